package redlock_test

// A node that evicted, and evicts no more, seen by a late client with a
// short TTL. The test asserts the property: no second holder while the
// first holder's validity runs.

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

// evictThenRevert plays an operator who lets every node evict at run time
// (maxmemory-policy volatile-lru), a cache that fills the nodes (volatile-lru
// evicts every key with a TTL: X's lock key and the TTL register), then
// frees some memory, and the operator who sets the policy back to
// noeviction, before any client looks again.
func evictThenRevert(ctx context.Context, t *testing.T, cl *redistest.Cluster, lockKey string) {
	t.Helper()
	for _, s := range cl.Servers {
		if err := s.Client().ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range cl.Servers {
		fillUntilOOM(ctx, t, s)
		if n, err := s.Client().Exists(ctx, lockKey).Result(); err != nil || n != 0 {
			t.Fatalf("X's key on %s after the fill: %d, %v; want it evicted", s.Addr, n, err)
		}
		for i := range 4 {
			keys := make([]string, 256)
			for j := range keys {
				keys[j] = fmt.Sprintf("cache:%d:%d", i, j)
			}
			if err := s.Client().Del(ctx, keys...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Client().ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// A run-time eviction episode, over before a client with default options
// (no AllowEvictingNodes, so no RestartGrace is asked of it) first meets
// the nodes. The nodes say noeviction, and evicted_keys > 0 makes each sit
// out "the restart grace", which this client can only learn from the TTL
// registers: the same eviction took them with X's key. It must not take the
// lock while X's 30s validity runs.
func TestANodeThatEvictedIsRefusedAfterItsPolicyIsReverted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, xopts := range []struct {
		name string
		opts redlock.Options
	}{
		{"holder-default", redlock.Options{TTL: 30 * time.Second}},
		{"holder-opted-in", redlock.Options{TTL: 30 * time.Second, AllowEvictingNodes: true, RestartGrace: 30 * time.Second}},
	} {
		t.Run(xopts.name, func(t *testing.T) {
			cl := redistest.StartT(t, 3, redistest.Options{Persistence: true,
				Args: []string{"--maxmemory", "8mb", "--maxmemory-policy", "noeviction"}})
			x, err := redlock.New(cl.Clients(), xopts.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			name := "job-" + xopts.name
			held, err := x.TryAcquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = held.Release(context.Background()) }()
			evictThenRevert(ctx, t, cl, x.Keys(name).Lock)

			y, err := redlock.New(cl.Clients(), redlock.Options{TTL: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer y.Close()
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			defer wcancel()
			l, err := y.Acquire(wctx, name)
			if err == nil {
				got := time.Now()
				_ = l.Release(ctx)
				if left := held.Deadline().Sub(got); left > 0 {
					t.Fatalf("BROKEN: a late client (default options, TTL 500ms) took %q after a reverted run-time eviction, with %.1fs of X's validity left", name, left.Seconds())
				}
				return
			}
			if !errors.Is(err, redlock.ErrEvictingNode) || !strings.Contains(err.Error(), "has evicted") {
				t.Fatalf("want the nodes refused for their evictions (ErrEvictingNode), got %v", err)
			}
			// The operator's way back, once no lock the evictions may have
			// taken is held any more: CONFIG RESETSTAT. Y's acquires look
			// at the refused nodes again by themselves (no Nodes call).
			if err := held.Release(ctx); err != nil && !errors.Is(err, redlock.ErrLockLost) {
				t.Fatal(err)
			}
			for _, s := range cl.Servers {
				if err := s.Client().ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
					t.Fatal(err)
				}
				if err := s.Client().ConfigResetStat(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			// A refusal is an error at once (no silent wait): Y tries
			// again, as a caller would, until the nodes sat out its grace.
			eventually(t, 20*time.Second, "Y's lock after CONFIG RESETSTAT", func() bool {
				l, err := y.TryAcquire(ctx, name)
				if err != nil {
					return false
				}
				_ = l.Release(ctx)
				return true
			})
		})
	}
}
