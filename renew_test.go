package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
	"github.com/quorumlabs/redlock/redistest"
)

// extendWrites counts the writes to a node that carry extend calls (and
// acquire calls, which look the same: the test resets it after acquiring).
type extendWrites struct {
	mu            sync.Mutex
	writes, calls int
}

// extends tells how many extend calls cmd carries: one for a plain extend,
// N for a run of the batched form of extend.lua (N locks of 2 keys, then
// N, then runs of locks of one layout: the run's count of locks, 2 and 4,
// and the 4 arguments of each).
func extends(cmd redis.Cmder) int {
	args := cmd.Args()
	if cmd.Name() != "evalsha" || len(args) < 4 {
		return 0
	}
	keys, _ := args[2].(int)
	if len(args) == 9 && keys == 2 {
		return 1
	}
	if len(args) <= 3+keys {
		return 0
	}
	n, _ := args[3+keys].(int)
	if n < 2 || keys != 2*n {
		return 0
	}
	p, seen := 4+keys, 0
	for seen < n && p+3 <= len(args) {
		m, _ := args[p].(int)
		nk, _ := args[p+1].(int)
		na, _ := args[p+2].(int)
		if m < 1 || nk != 2 || na != 4 {
			return 0
		}
		p, seen = p+3+m*na, seen+m
	}
	if seen != n || p != len(args) {
		return 0
	}
	return n
}

func (w *extendWrites) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *extendWrites) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := extends(cmd); n > 0 {
			w.mu.Lock()
			w.writes++
			w.calls += n
			w.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (w *extendWrites) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, cmd := range cmds {
			n += extends(cmd)
		}
		if n > 0 {
			w.mu.Lock()
			w.writes++
			w.calls += n
			w.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// Locks held together are renewed together: one write per node carries the
// renewals that fall due at once, and no lock is lost.
func TestAutoExtendedLocksAreRenewedInBatches(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	counters := make([]*extendWrites, 3)
	for i, rdb := range cl.Clients() {
		counters[i] = &extendWrites{}
		rdb.AddHook(counters[i])
	}
	var extended atomic.Int64
	c := newClient(t, cl, redlock.Options{TTL: time.Second, Observer: observe.Func(func(e observe.Event) {
		if e.Kind == observe.Extended {
			extended.Add(1)
		}
	})})
	ctx := context.Background()
	var held []*redlock.Lock
	for i := range 200 {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("batch-%d", i), redlock.WithAutoExtend())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	for _, w := range counters {
		w.mu.Lock()
		w.writes, w.calls = 0, 0
		w.mu.Unlock()
	}
	extended.Store(0)
	// Three renewal rounds at least: every lock renews each third of its validity.
	for extended.Load() < 3*200 {
		select {
		case <-held[0].Done():
			t.Fatalf("lost: %v", held[0].Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	for i, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("batch-%d: %v", i, err)
		}
	}
	for i, w := range counters {
		w.mu.Lock()
		writes, calls := w.writes, w.calls
		w.mu.Unlock()
		t.Logf("node %d: %d extend calls in %d writes", i, calls, writes)
		if calls < 3*200 || writes > calls/10 {
			t.Fatalf("node %d: %d extend calls in %d writes, want at least 600 calls, ten or more a write", i, calls, writes)
		}
	}
}

// A lock whose renewal finds another owner is told at once; the locks
// renewed in the same batch are not.
func TestRenewalTellsOnlyTheLockThatWasLost(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: time.Second})
	ctx := context.Background()
	var held []*redlock.Lock
	for i := range 20 {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("lost-%d", i), redlock.WithAutoExtend())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	// Another owner takes lock 7 on every node behind our back.
	for _, s := range cl.Servers {
		if err := s.Client().Set(ctx, c.Keys("lost-7").Lock, "someone else", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-held[7].Done():
	case <-time.After(time.Second):
		t.Fatal("the lost lock's Done did not close within one TTL")
	}
	if err := held[7].Err(); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("lost lock: %v", err)
	}
	if d := time.Until(held[7].Deadline()); d <= 0 {
		t.Fatalf("Done closed only at the end of the validity (%v), not at once", d)
	}
	for i, l := range held {
		if i == 7 {
			continue
		}
		if err := l.Err(); err != nil {
			t.Fatalf("lost-%d, renewed in the same batch: %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("lost-%d: %v", i, err)
		}
	}
}

// WithLeanRenewal renews once two thirds of the remaining validity passed:
// about half as many renewals as WithAutoExtend over the same hold, and
// the lock is kept all the same.
func TestLeanRenewalRenewsHalfAsOftenAndKeepsTheLock(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	var mu sync.Mutex
	extended := map[string]int{}
	c := newClient(t, cl, redlock.Options{Observer: observe.Func(func(e observe.Event) {
		if e.Kind == observe.Extended {
			mu.Lock()
			extended[e.Name]++
			mu.Unlock()
		}
	})})
	ctx := context.Background()
	// 2s: the lean cadence leaves a third of the validity for the renewal
	// to come back, which at 900ms a loaded machine (load average 10)
	// sometimes missed.
	const ttl = 2 * time.Second
	usual, err := c.Acquire(ctx, "renew-usual", redlock.WithTTL(ttl), redlock.WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	lean, err := c.Acquire(ctx, "renew-lean", redlock.WithTTL(ttl), redlock.WithLeanRenewal())
	if err != nil {
		t.Fatal(err)
	}
	// Held for six TTLs: a lock that is not renewed is lost within one.
	select {
	case <-usual.Done():
		t.Fatalf("the auto-extended lock was lost: %v", usual.Err())
	case <-lean.Done():
		t.Fatalf("the lean-renewed lock was lost: %v", lean.Err())
	case <-time.After(6 * ttl):
	}
	for _, l := range []*redlock.Lock{usual, lean} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	u, l := extended["renew-usual"], extended["renew-lean"]
	t.Logf("renewals over six TTLs: auto-extend %d, lean %d", u, l)
	if l == 0 || l >= u {
		t.Fatalf("lean renewals %d, auto-extend %d: want fewer, and at least one", l, u)
	}
}
