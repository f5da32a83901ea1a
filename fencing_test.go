package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

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
		fence, _ := rdb.Get(ctx, c.Keys("repair").Fence).Int64()
		return fence == l.Token() && rdb.Exists(ctx, c.Keys("repair").Lock).Val() == 1
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
				pttl, err := s.Client().PTTL(ctx, c.Keys(name).Fence).Result()
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
				if err := s.Client().Del(ctx, c.Keys(name).Fence).Err(); err != nil {
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
