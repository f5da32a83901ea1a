package redlock_test

// Issue 25's events, held against every primitive: a quorum of the nodes
// forgets during a hold (a flush, a restart that lost its disk, a restart
// without persistence, an eviction), and another client must not get a
// second hold (a semaphore: more than its permits; a read-write lock: a
// reader beside a writer) while the first is valid.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// forgetEvent is one way for servers to lose a hold's keys.
type forgetEvent struct {
	name  string
	nodes redistest.Options
	opts  func(o *redlock.Options)
	// met runs once the clients met the nodes, before the hold.
	met func(t *testing.T, ctx context.Context, cl *redistest.Cluster)
	// lose makes s lose keys, the hold's among them.
	lose func(t *testing.T, ctx context.Context, s *redistest.Server, keys []string)
	// fresh: a client that meets the nodes only after the event sees it
	// too (a flush before a first contact is a stated limit).
	fresh  bool
	reason string // in the refusal
}

var forgetEvents = []forgetEvent{
	{name: "flush", nodes: redistest.Options{Persistence: true}, reason: "data-kept marker",
		lose: func(t *testing.T, ctx context.Context, s *redistest.Server, _ []string) {
			if err := s.Client().FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}},
	{name: "restart-that-lost-its-disk", nodes: redistest.Options{Persistence: true}, reason: "data-kept marker",
		lose: func(t *testing.T, ctx context.Context, s *redistest.Server, _ []string) {
			if err := s.Restart(false); err != nil {
				t.Fatal(err)
			}
		}},
	// Servers without persistence that have been up an hour (their clocks
	// say so), so that the hold needs no grace first.
	{name: "restart-without-persistence", nodes: redistest.Options{FakeTime: true}, fresh: true, reason: "without persistence",
		lose: func(t *testing.T, ctx context.Context, s *redistest.Server, _ []string) {
			if err := s.Restart(true); err != nil {
				t.Fatal(err)
			}
		}},
	{name: "eviction", fresh: true, reason: "evicted",
		nodes: redistest.Options{Persistence: true, Args: []string{"--maxmemory", "8mb", "--maxmemory-policy", "noeviction"}},
		opts: func(o *redlock.Options) {
			o.AllowEvictingNodes, o.RestartGrace = true, 20*time.Second
		},
		// The policy changes at run time once the clients met the nodes: a
		// server that may evict sits out the grace from its start.
		met: func(t *testing.T, ctx context.Context, cl *redistest.Cluster) { setPolicy(t, cl, "volatile-lru") },
		lose: func(t *testing.T, ctx context.Context, s *redistest.Server, keys []string) {
			value := strings.Repeat("c", 4096)
			for batch := 0; ; batch++ {
				if n, err := s.Client().Exists(ctx, keys...).Result(); err != nil || n == 0 {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				if batch == 200 {
					t.Fatalf("%s: the hold's keys %v not evicted after 200 MiB of cache writes", s.Addr, keys)
				}
				pipe := s.Client().Pipeline()
				for i := range 256 {
					pipe.Set(ctx, fmt.Sprintf("cache:%d:%d", batch, i), value, time.Hour)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}},
}

// forgetPrimitive is a hold of one primitive, and the hold another client
// must not get beside it.
type forgetPrimitive struct {
	name string
	// hold takes the first client's hold; it returns the hold's deadline.
	hold func(t *testing.T, ctx context.Context, c *redlock.Client) time.Time
	// second tries the conflicting hold; it releases what it got.
	second func(ctx context.Context, c *redlock.Client) error
}

func releaseOf(ctx context.Context, l interface{ Release(context.Context) error }, err error) error {
	if err == nil {
		_ = l.Release(ctx)
	}
	return err
}

var forgetPrimitives = []forgetPrimitive{
	{name: "mutex",
		hold: func(t *testing.T, ctx context.Context, c *redlock.Client) time.Time {
			l, err := c.TryAcquire(ctx, "job")
			if err != nil {
				t.Fatal(err)
			}
			return l.Deadline()
		},
		second: func(ctx context.Context, c *redlock.Client) error {
			l, err := c.TryAcquire(ctx, "job")
			return releaseOf(ctx, l, err)
		}},
	{name: "reentrant",
		hold: func(t *testing.T, ctx context.Context, c *redlock.Client) time.Time {
			outer, err := c.TryAcquire(ctx, "job")
			if err != nil {
				t.Fatal(err)
			}
			nested, err := c.TryAcquire(redlock.ContextWithLock(ctx, outer), "job")
			if err != nil {
				t.Fatal(err)
			}
			return nested.Deadline()
		},
		second: func(ctx context.Context, c *redlock.Client) error {
			l, err := c.TryAcquire(ctx, "job")
			return releaseOf(ctx, l, err)
		}},
	{name: "semaphore-of-2",
		hold: func(t *testing.T, ctx context.Context, c *redlock.Client) time.Time {
			s, err := c.Semaphore("pool", 2)
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Time{}
			for range 2 {
				p, err := s.TryAcquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if deadline.IsZero() || p.Deadline().Before(deadline) {
					deadline = p.Deadline()
				}
			}
			return deadline
		},
		second: func(ctx context.Context, c *redlock.Client) error {
			s, err := c.Semaphore("pool", 2)
			if err != nil {
				return err
			}
			p, err := s.TryAcquire(ctx)
			return releaseOf(ctx, p, err)
		}},
	{name: "reader-then-writer",
		hold: func(t *testing.T, ctx context.Context, c *redlock.Client) time.Time {
			l, err := c.RWLock("doc").TryRLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return l.Deadline()
		},
		second: func(ctx context.Context, c *redlock.Client) error {
			l, err := c.RWLock("doc").TryLock(ctx)
			return releaseOf(ctx, l, err)
		}},
	{name: "writer-then-reader",
		hold: func(t *testing.T, ctx context.Context, c *redlock.Client) time.Time {
			l, err := c.RWLock("doc").TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return l.Deadline()
		},
		second: func(ctx context.Context, c *redlock.Client) error {
			l, err := c.RWLock("doc").TryRLock(ctx)
			return releaseOf(ctx, l, err)
		}},
	{name: "fair",
		hold: func(t *testing.T, ctx context.Context, c *redlock.Client) time.Time {
			l, err := c.TryAcquire(ctx, "line", redlock.WithFairness())
			if err != nil {
				t.Fatal(err)
			}
			return l.Deadline()
		},
		second: func(ctx context.Context, c *redlock.Client) error {
			l, err := c.TryAcquire(ctx, "line", redlock.WithFairness())
			return releaseOf(ctx, l, err)
		}},
	{name: "multi-lock",
		hold: func(t *testing.T, ctx context.Context, c *redlock.Client) time.Time {
			m, err := c.TryAcquireMulti(ctx, []string{"a", "b"})
			if err != nil {
				t.Fatal(err)
			}
			return m.Deadline()
		},
		second: func(ctx context.Context, c *redlock.Client) error {
			l, err := c.TryAcquire(ctx, "b")
			return releaseOf(ctx, l, err)
		}},
}

// holdKeys lists the keys of s but the guards' own (the data-kept marker
// and the register of the largest TTL in use): the hold's, once it is the
// only one.
func holdKeys(t *testing.T, ctx context.Context, s *redistest.Server) []string {
	t.Helper()
	keys, err := s.Client().Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	keys = slices.DeleteFunc(keys, func(k string) bool {
		return strings.Contains(k, "data-kept") || strings.HasSuffix(k, "ttl-in-use")
	})
	slices.Sort(keys)
	return keys
}

func TestEveryPrimitiveSurvivesNodesThatForget(t *testing.T) {
	for _, ev := range forgetEvents {
		for _, pr := range forgetPrimitives {
			t.Run(ev.name+"/"+pr.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				cl := redistest.StartT(t, 3, ev.nodes)
				if ev.nodes.FakeTime {
					for _, s := range cl.Servers {
						if err := s.SetClockOffset(time.Hour); err != nil {
							t.Fatal(err)
						}
					}
				}
				// A node timeout of a second: the schedule, not a loaded
				// machine's slow answers, decides who holds.
				opts := redlock.Options{TTL: 20 * time.Second, NodeTimeout: time.Second}
				if ev.opts != nil {
					ev.opts(&opts)
				}
				newClient := func() *redlock.Client {
					return newClientOn(t, cl.Clients(), opts)
				}
				x, before := newClient(), newClient()
				for _, c := range []*redlock.Client{x, before} {
					for i, info := range c.Nodes(ctx) {
						if info.Err != nil || !info.Voting {
							t.Fatalf("node %d before anything happened: %+v, want it voting", i, info)
						}
					}
				}
				if ev.met != nil {
					ev.met(t, ctx, cl)
				}
				deadline := pr.hold(t, ctx, x)
				var keys []string
				eventually(t, 5*time.Second, "the hold's keys on every node", func() bool {
					keys = holdKeys(t, ctx, cl.Servers[2])
					for _, s := range cl.Servers[:2] {
						if !slices.Equal(holdKeys(t, ctx, s), keys) {
							return false
						}
					}
					return len(keys) > 0
				})
				for _, s := range cl.Servers[:2] {
					ev.lose(t, ctx, s, keys)
					if left := holdKeys(t, ctx, s); len(left) > 0 && !slices.Contains([]string{"eviction"}, ev.name) {
						t.Fatalf("%s kept keys %v: nothing was lost", s.Addr, left)
					}
				}
				before.Nodes(ctx) // it probes the nodes again: the window of a guard a second old plays no part
				clients := []*redlock.Client{before}
				if ev.fresh {
					clients = append(clients, newClient())
				}
				for i, c := range clients {
					who := [...]string{"a client that knew the nodes", "a fresh client"}[i]
					left := time.Until(deadline)
					if left < time.Second {
						t.Fatalf("the hold's validity ran out before the check (%v left): the test is too slow to tell", left)
					}
					err := pr.second(ctx, c)
					if err == nil {
						t.Fatalf("%s got a second hold of the %s after a %s on 2 of 3 nodes, while the first is valid for %.1fs more", who, pr.name, ev.name, left.Seconds())
					}
					if !errors.Is(err, redlock.ErrNodeSittingOut) || !strings.Contains(err.Error(), ev.reason) {
						t.Fatalf("%s: want a refusal with the nodes sitting out (%q), got %v", who, ev.reason, err)
					}
				}
			})
		}
	}
}
