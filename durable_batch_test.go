package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// Batched durable votes: every counted vote's WAIT covers its write, in the
// renewal rounds' batched runs and in the pipe's batches of queued calls
// alike. Many auto-extended holds of three kinds (mutexes, readers,
// permits: the renewal rounds run them as batched runs of their scripts)
// lose the replication of 2 of 3 masters: none may count an extension the
// replicas did not acknowledge, so each ends by a TTL after the cut began,
// when the replicas' copies expire. Then a burst of acquires (calls queued
// while the pipe's WAIT is in flight go out as batches): none may win.
func TestBatchedDurableVotesWaitForEveryWrite(t *testing.T) {
	masters, replicas := startReplicated(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ttl = 5 * time.Second // above twice waitRoom
	c := newClient(t, masters, redlock.Options{TTL: ttl, NodeTimeout: waitRoom, DurableVotes: true})
	sem, err := c.Semaphore("pool", 8)
	if err != nil {
		t.Fatal(err)
	}
	// The holds are set-up, not the property: each waits (Acquire, not
	// TryAcquire) while a loaded machine's replicas are late to
	// acknowledge within the node timeout.
	var held []*redlock.Lock
	for i := range 8 {
		l, err := c.Acquire(ctx, fmt.Sprintf("job-%d", i), redlock.WithAutoExtend())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		r, err := c.RWLock(fmt.Sprintf("doc-%d", i)).RLock(ctx, redlock.WithAutoExtend())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
		p, err := sem.Acquire(ctx, redlock.WithAutoExtend())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p.Lock)
	}
	defer func() {
		for _, l := range held {
			_ = l.Release(context.Background())
		}
	}()
	for _, r := range replicas[:2] {
		if err := redistest.CutReplication(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// A renewal that counted was acknowledged before the cut was complete:
	// its deadline is at most a TTL from now.
	bound := time.Now().Add(ttl)
	for _, l := range held {
		select {
		case <-l.Done():
		case <-ctx.Done():
			t.Fatalf("%q still held long after replication was cut: a renewal that was not durable counted", l.Name())
		}
		if l.Deadline().After(bound) {
			t.Fatalf("%q: a renewal sent after replication was cut moved its deadline to %v, past %v", l.Name(), l.Deadline(), bound)
		}
		if !errors.Is(l.Err(), redlock.ErrLockLost) {
			t.Fatalf("%q ended with %v, want ErrLockLost", l.Name(), l.Err())
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Go(func() {
			var l *redlock.Lock
			l, errs[i] = c.TryAcquire(ctx, fmt.Sprintf("burst-%d", i))
			if errs[i] == nil {
				_ = l.Release(context.Background())
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			t.Fatalf("burst-%d won with the replication of 2 of 3 masters cut: a vote in a batch counted without its replicas", i)
		}
		// The WAIT of a batch ends at its calls' latest deadline: on a
		// loaded machine the node timeout may end a call first. Either way
		// no vote of the cut masters counted.
		if !errors.Is(err, redlock.ErrVoteNotDurable) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("burst-%d: want ErrVoteNotDurable (or the node timeout), got %v", i, err)
		}
	}
}
