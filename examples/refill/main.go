// Command refill keeps a cache miss from becoming a stampede: of twenty
// concurrent misses, one recomputes the value under a lock, the others wait
// for it and read the cache.
//
// Start three local lock masters and one Redis as the cache (or set
// REDLOCK_NODES and REDLOCK_CACHE to your own):
//
//	for p in 7001 7002 7003 7004; do redis-server --port $p --save '' --daemonize yes; done
package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/examples/internal/setup"
	"github.com/quorumlabs/redlock/refill"
)

func main() {
	setup.Run(run)
}

func run(ctx context.Context, locks *redlock.Client) error {
	cache, err := setup.Redis("REDLOCK_CACHE", "redis://127.0.0.1:7004") // not a lock node
	if err != nil {
		return err
	}
	defer cache.Close()
	if err := cache.Del(ctx, "orders:today").Err(); err != nil { // start with a miss
		return err
	}

	guard, err := refill.New(locks, cache, refill.Options{
		ValueTTL: time.Minute,         // how long a refilled value lives in the cache
		MaxWait:  10 * time.Second,    // how long a caller waits for someone else's refill
		Fallback: refill.FallbackLoad, // or FallbackError: return refill.ErrWaitTimeout
	})
	if err != nil {
		return err
	}
	var queries atomic.Int32
	expensiveQuery := func(ctx context.Context) (string, error) { // ctx is cancelled if the refill lock is lost
		queries.Add(1)
		return "1234 orders today", nil
	}

	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = guard.Get(ctx, "orders:today", expensiveQuery)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	fmt.Printf("20 concurrent misses, the query ran %d time(s)\n", queries.Load())
	return nil
}
