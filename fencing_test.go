package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

func TestFenceAdmitsOnlyTokensNotBelowTheHighest(t *testing.T) {
	var f redlock.Fence
	for _, tc := range []struct {
		token int64
		ok    bool
	}{{5, true}, {5, true}, {7, true}, {6, false}, {0, false}, {8, true}} {
		err := f.Admit(tc.token)
		if (err == nil) != tc.ok {
			t.Fatalf("Admit(%d) = %v, want ok=%v", tc.token, err, tc.ok)
		}
		var se *redlock.StaleTokenError
		if err != nil && (!errors.As(err, &se) || !errors.Is(err, redlock.ErrStaleToken) || se.Highest != 7) {
			t.Fatalf("Admit(%d): %v, want a *StaleTokenError naming 7", tc.token, err)
		}
	}
	if f.Highest() != 8 {
		t.Fatalf("highest %d, want 8", f.Highest())
	}
}

// Admissions from many goroutines keep the order of the tokens: each
// admitted token is at least every one admitted before it, and a reader
// never sees the highest go down. (The admissions are recorded under the
// same lock as the call, so the record's order is the admissions' order:
// recorded after the call returned, two goroutines could append theirs in
// the other order, as a Valkey matrix run once showed: "admitted 59 after
// 60".)
func TestFenceUnderConcurrency(t *testing.T) {
	var f redlock.Fence
	var wg sync.WaitGroup
	var mu sync.Mutex
	var admitted []int64
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			last := int64(0)
			for {
				select {
				case <-stop:
					return
				default:
				}
				h := f.Highest()
				if h < last {
					t.Errorf("Highest went down from %d to %d", last, h)
					return
				}
				last = h
			}
		}()
	}
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if f.Admit(int64(i)) == nil {
				admitted = append(admitted, int64(i))
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	if f.Highest() != 63 {
		t.Fatalf("highest %d, want 63", f.Highest())
	}
	for i := 1; i < len(admitted); i++ {
		if admitted[i] < admitted[i-1] {
			t.Fatalf("admitted %d after %d", admitted[i], admitted[i-1])
		}
	}
}

func TestFencedSetRejectsAStaleHolder(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 100 * time.Millisecond})
	resource := cl.Servers[0].Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A holder stalls past its validity (a GC pause, say); another client
	// takes the lock and writes; the first one wakes up and writes.
	stalled, err := c.Acquire(ctx, "account") // retries: a 100ms TTL leaves each node 10ms
	if err != nil {
		t.Fatal(err)
	}
	<-stalled.Done() // its validity is over
	next, err := c.Acquire(ctx, "account")
	if err != nil {
		t.Fatal(err)
	}
	if err := redlock.FencedSet(ctx, resource, "balance", next.Token(), "100"); err != nil {
		t.Fatal(err)
	}
	err = redlock.FencedSet(ctx, resource, "balance", stalled.Token(), "0")
	var se *redlock.StaleTokenError
	if !errors.As(err, &se) || se.Token != stalled.Token() || se.Highest != next.Token() {
		t.Fatalf("stale write: %v, want a *StaleTokenError", err)
	}
	v, tok, err := redlock.FencedGet(ctx, resource, "balance")
	if err != nil || v != "100" || tok != next.Token() {
		t.Fatalf("resource holds %q with token %d (%v), want 100 with %d", v, tok, err, next.Token())
	}
	// The same holder may write again with its token.
	if err := redlock.FencedSet(ctx, resource, "balance", next.Token(), "101"); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := redlock.FencedGet(ctx, resource, "absent"); v != "" {
		t.Fatalf("absent resource reads %q", v)
	}
	if err := redlock.FencedSet(ctx, resource, "", 1, "x"); !errors.Is(err, redlock.ErrInvalidConfig) {
		t.Fatalf("empty key: %v", err)
	}
}

func TestExtendRepairsANodeThatLostItsKeys(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "repair")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Servers[0].Restart(false); err != nil { // comes back empty
		t.Fatal(err)
	}
	// The first call to the restarted node may fail on the connection the
	// restart broke, and an extend decides at a quorum without it: extend
	// until the node is repaired, as the auto-extender would.
	rdb := cl.Servers[0].Client()
	eventually(t, 10*time.Second, "the restarted node holds the key and the token again", func() bool {
		if err := l.Extend(ctx); err != nil {
			t.Fatal(err)
		}
		fence, _ := rdb.Get(ctx, c.FenceKey("repair")).Int64()
		return fence == l.Token() && rdb.Exists(ctx, c.LockKey("repair")).Val() == 1
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestInspectAndForceUnlock(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	ctx := context.Background()
	st, err := c.Inspect(ctx, "ops")
	if err != nil || st.Held {
		t.Fatalf("free lock inspected as %+v, %v", st, err)
	}
	l, err := c.TryAcquire(ctx, "ops")
	if err != nil {
		t.Fatal(err)
	}
	st, err = c.Inspect(ctx, "ops")
	if err != nil || !st.Held || st.Fence != l.Token() || st.Remaining <= 0 || st.Remaining > 10*time.Second {
		t.Fatalf("held lock inspected as %+v, %v", st, err)
	}
	n, err := c.ForceUnlock(ctx, "ops")
	if err != nil || n < c.Quorum() {
		t.Fatalf("force unlock deleted %d keys: %v", n, err)
	}
	if st, _ := c.Inspect(ctx, "ops"); st.Held || st.Fence != l.Token()+1 {
		t.Fatalf("after force unlock: %+v; want free, the fence raised by one", st)
	}
	// The holder, still alive, must not take the lock back by repairing
	// the missing keys: the raised fence tells it a newer token exists.
	if err := l.Extend(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("extend after force unlock: %v, want ErrLockLost", err)
	}
	if st, _ := c.Inspect(ctx, "ops"); st.Held {
		t.Fatalf("the forced-out holder took the lock back: %+v", st)
	}
	next, err := c.TryAcquire(ctx, "ops")
	if err != nil || next.Token() <= l.Token()+1 {
		t.Fatalf("after force unlock: token %v, %v; want above %d", next, err, l.Token()+1)
	}
	if _, err := c.Inspect(ctx, ""); !errors.Is(err, redlock.ErrInvalidConfig) {
		t.Fatalf("empty name: %v", err)
	}
	for _, s := range cl.Servers[:2] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	st, err = c.Inspect(ctx, "ops")
	if !errors.Is(err, redlock.ErrNoQuorum) || st == nil || st.Nodes[2].Err != nil {
		t.Fatalf("2 of 3 nodes down: %+v, %v; want the partial status and ErrNoQuorum", st, err)
	}
}

// A lock name's fence register expires FenceLifetime after the name's last
// acquisition, so names used once do not pile up on the nodes; every
// acquisition renews it. Tokens still increase after it expired, being
// time-based.
func TestFenceRegisterLivesFenceLifetimePastTheLastAcquisition(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	ctx := context.Background()
	for _, tc := range []struct {
		lifetime time.Duration
		want     time.Duration // PTTL; -1: no expiry
	}{
		{0, redlock.DefaultFenceLifetime},
		{2 * time.Hour, 2 * time.Hour},
		{redlock.NoFenceExpiry, -1},
	} {
		c, err := redlock.New(cl.Clients(), redlock.Options{RestartGrace: redlock.NoRestartGrace, FenceLifetime: tc.lifetime})
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("lifetime-%v", tc.lifetime)
		var last int64
		for range 2 {
			l, err := c.TryAcquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if l.Token() <= last {
				t.Fatalf("token %d after %d", l.Token(), last)
			}
			last = l.Token()
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			seen := 0 // the node that decided nothing may not have run its acquire yet
			for _, s := range cl.Servers {
				pttl, err := s.Client().PTTL(ctx, c.FenceKey(name)).Result()
				if err != nil {
					t.Fatal(err)
				}
				if pttl == -2 {
					continue
				}
				seen++
				if tc.want < 0 && pttl != -1 || tc.want > 0 && (pttl > tc.want || pttl < tc.want-time.Minute) {
					t.Fatalf("lifetime %v: fence register PTTL %v on %s, want %v", tc.lifetime, pttl, s.Addr, tc.want)
				}
			}
			if seen < c.Quorum() {
				t.Fatalf("lifetime %v: the fence register on %d nodes, want a quorum", tc.lifetime, seen)
			}
			// The register expires: the next token is still higher.
			for _, s := range cl.Servers {
				if err := s.Client().Del(ctx, c.FenceKey(name)).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		_ = c.Close()
	}
	if _, err := redlock.New(cl.Clients(), redlock.Options{FenceLifetime: time.Minute}); err == nil || !strings.Contains(err.Error(), "FenceLifetime") {
		t.Fatalf("a 1m fence lifetime: %v, want a config error", err)
	}
}
