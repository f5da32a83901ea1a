package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
	"github.com/quorumlabs/redlock/redistest"
)

// A burst of acquisitions far above what the client and the nodes can
// serve must degrade into queueing and refusals, never into the loss of
// locks held before it began: waiting in the client is not a node failure,
// and renewals go before queued acquisitions.
func TestBurstFarAboveCapacityLosesNoHeldLock(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	var extendErrs sync.Map
	obs := observe.Func(func(e observe.Event) {
		if e.Kind == observe.ExtendFailed {
			extendErrs.Store(e.Err.Error(), true)
		}
	})
	// The property is the client's own: its queue must not starve the
	// renewals. A node timeout of a quarter TTL, not the default tenth,
	// keeps a server that a loaded machine starves of CPU for a few hundred
	// milliseconds from counting as a failure (i/o timeouts on two of three
	// nodes lost locks at a load average of 15).
	c, err := redlock.NewFromURLs(cl.URLs(), redlock.Options{TTL: 2 * time.Second, NodeTimeout: 500 * time.Millisecond,
		RestartGrace: redlock.NoRestartGrace, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var held []*redlock.Lock
	for i := range 50 {
		l, err := c.Acquire(ctx, fmt.Sprintf("held-%d", i), redlock.WithAutoExtend())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}

	const workers, burst = 256, 3 * time.Second
	bctx, cancel := context.WithTimeout(ctx, burst)
	defer cancel()
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; bctx.Err() == nil; i++ {
				l, err := c.TryAcquire(bctx, fmt.Sprintf("burst-%d-%d", w, i))
				if err != nil {
					failed.Add(1)
					continue
				}
				ok.Add(1)
				_ = l.Release(ctx)
			}
		}()
	}
	wg.Wait()
	t.Logf("burst: %d acquisitions, %d failed", ok.Load(), failed.Load())
	extendErrs.Range(func(k, _ any) bool { t.Log("extend failed: ", k); return true })
	var lost []string
	for i, l := range held {
		select {
		case <-l.Done():
			lost = append(lost, fmt.Sprintf("held-%d: %v", i, l.Err()))
			continue
		default:
		}
		if err := l.Release(ctx); errors.Is(err, redlock.ErrLockLost) {
			lost = append(lost, fmt.Sprintf("held-%d at release: %v", i, err))
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d locks held before the burst were lost, the first: %s", len(lost), len(held), lost[0])
	}
}
