package refill_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
	"github.com/quorumlabs/redlock/refill"
)

func Example() {
	// Three lock nodes and a cache, started for the example. In production:
	// your independent Redis masters, and your cache.
	lockNodes, err := redistest.Start(3, redistest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer lockNodes.Stop()
	cacheNode, err := redistest.Start(1, redistest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer cacheNode.Stop()

	// The lock nodes are fresh: they sit out one TTL (the restart grace)
	// before they vote, so a short TTL keeps the wait short.
	locks, err := redlock.NewFromURLs(lockNodes.URLs(), redlock.Options{TTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	cache := redis.NewClient(&redis.Options{Addr: cacheNode.Addrs()[0]})
	defer cache.Close()

	guard, err := refill.New(locks, cache, refill.Options{
		ValueTTL: time.Minute,
		MaxWait:  10 * time.Second,
		Fallback: refill.FallbackError,
	})
	if err != nil {
		log.Fatal(err)
	}

	// Twenty requests miss the cache at once; the expensive query runs once.
	var queries atomic.Int32
	expensiveQuery := func(ctx context.Context) (string, error) {
		queries.Add(1)
		return "1234 orders today", nil
	}
	var wg sync.WaitGroup
	answers := make([]string, 20)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := guard.Get(context.Background(), "orders:today", expensiveQuery)
			if err != nil {
				log.Fatal(err)
			}
			answers[i] = v
		}()
	}
	wg.Wait()
	same := 0
	for _, a := range answers {
		if a == answers[0] {
			same++
		}
	}
	fmt.Printf("%d of %d answers were %q; the query ran %d time(s)\n", same, len(answers), answers[0], queries.Load())
	// Output: 20 of 20 answers were "1234 orders today"; the query ran 1 time(s)
}
