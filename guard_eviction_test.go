package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// evictingNodes starts three persistent standalone masters (no grace due)
// with a small maxmemory and policy, as a Redis shared by a cache and the
// locks is set up.
func evictingNodes(t *testing.T, policy string) *redistest.Cluster {
	t.Helper()
	return redistest.StartT(t, 3, redistest.Options{Persistence: true,
		Args: []string{"--maxmemory", "8mb", "--maxmemory-policy", policy}})
}

// setPolicy sets every node's maxmemory-policy at run time.
func setPolicy(t *testing.T, cl *redistest.Cluster, policy string) {
	t.Helper()
	for _, s := range cl.Servers {
		if err := s.Client().ConfigSet(context.Background(), "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// fillUntilEvicted plays the application's cache on s: values of 4 KiB with
// a TTL, until s has evicted key.
func fillUntilEvicted(ctx context.Context, s *redistest.Server, key string) error {
	value := strings.Repeat("c", 4096)
	for batch := 0; batch < 200; batch++ {
		pipe := s.Client().Pipeline()
		for i := range 256 {
			pipe.Set(ctx, fmt.Sprintf("cache:%d:%d", batch, i), value, time.Hour)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		if n, err := s.Client().Exists(ctx, key).Result(); err != nil || n == 0 {
			return err
		}
	}
	return fmt.Errorf("%s: %s not evicted after 200 MiB of cache writes", s.Addr, key)
}

// Issue 25, schedule 3: a node that may evict keys is refused by default,
// naming its policy and the fix, under a policy that evicts only keys with
// a TTL (every lock key has one) as under one that evicts any key.
func TestEvictingNodesAreRefusedByDefault(t *testing.T) {
	ctx := context.Background()
	for _, policy := range []string{"volatile-lru", "allkeys-lru"} {
		t.Run(policy, func(t *testing.T) {
			cl := evictingNodes(t, policy)
			c, err := redlock.New(cl.Clients(), redlock.Options{TTL: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.TryAcquire(ctx, "job")
			if !errors.Is(err, redlock.ErrEvictingNode) || !errors.Is(err, redlock.ErrInvalidConfig) ||
				!strings.Contains(err.Error(), "maxmemory-policy "+policy) || !strings.Contains(err.Error(), "noeviction") ||
				!strings.Contains(err.Error(), "a Redis of its own") || !strings.Contains(err.Error(), "AllowEvictingNodes") {
				t.Fatalf("a node with maxmemory and %s: want ErrEvictingNode naming the policy and the fixes, got %v", policy, err)
			}
			if err := c.Verify(ctx); !errors.Is(err, redlock.ErrEvictingNode) {
				t.Fatalf("Verify: want ErrEvictingNode, got %v", err)
			}
			info := c.Nodes(ctx)[0]
			if info.MaxMemoryPolicy != policy || info.MaxMemory != 8<<20 || !errors.Is(info.Refused, redlock.ErrEvictingNode) {
				t.Fatalf("Nodes: want policy %s, maxmemory 8 MiB and the refusal, got %+v", policy, info)
			}
			for _, s := range cl.Servers {
				if n, err := s.Client().Exists(ctx, c.Keys("job").Lock).Result(); err != nil || n != 0 {
					t.Fatalf("%s: the refused acquire left a key (%d, %v)", s.Addr, n, err)
				}
			}
		})
	}
}

// A policy changed at run time is seen at the next probe: from then on the
// node is refused, and accepted again once it is back to noeviction.
func TestEvictionPolicyChangedAtRunTimeIsSeen(t *testing.T) {
	ctx := context.Background()
	cl := evictingNodes(t, "noeviction")
	c, err := redlock.New(cl.Clients(), redlock.Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("noeviction with a maxmemory: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	s := cl.Servers[1]
	if err := s.Client().ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err(); err != nil {
		t.Fatal(err)
	}
	if info := c.Nodes(ctx)[1]; !errors.Is(info.Refused, redlock.ErrEvictingNode) || !strings.Contains(info.Refused.Error(), "volatile-ttl") {
		t.Fatalf("after CONFIG SET maxmemory-policy volatile-ttl: %+v, want the node refused naming the policy", info)
	}
	if _, err := c.TryAcquire(ctx, "job"); !errors.Is(err, redlock.ErrEvictingNode) {
		t.Fatalf("acquire after the policy changed: %v, want ErrEvictingNode", err)
	}
	if err := s.Client().ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if info := c.Nodes(ctx)[1]; info.Refused != nil {
		t.Fatalf("back to noeviction: still refused: %v", info.Refused)
	}
}

// Issue 25, schedule 3 with the opt-in: the application's cache makes every
// node evict X's key. A fresh client, and one that used the nodes before,
// must be refused while X holds the lock: the nodes sit out the grace from
// the probe that sees the eviction.
func TestEvictedLockKeyMakesTheNodeSitOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, policy := range []string{"volatile-lru", "allkeys-lru"} {
		t.Run(policy, func(t *testing.T) {
			// A server that may evict sits out the grace from its start
			// (its evictions before the start are not counted): the
			// clients meet the nodes under noeviction, then the policy
			// changes at run time, before X takes the lock.
			cl := evictingNodes(t, "noeviction")
			opts := redlock.Options{TTL: 20 * time.Second, AllowEvictingNodes: true, RestartGrace: 20 * time.Second}
			newClient := func() *redlock.Client {
				// Clients of their own, as other processes have.
				var clients []redis.UniversalClient
				for _, s := range cl.Servers {
					rdb := redis.NewClient(&redis.Options{Addr: s.Addr, DisableIdentity: true})
					t.Cleanup(func() { _ = rdb.Close() })
					clients = append(clients, rdb)
				}
				c, err := redlock.New(clients, opts)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				return c
			}
			x, before := newClient(), newClient()
			for _, c := range []*redlock.Client{x, before} {
				warm, err := c.TryAcquire(ctx, "warm-up")
				if err != nil {
					t.Fatalf("persistent nodes that evict nothing: %v", err)
				}
				if err := warm.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			setPolicy(t, cl, policy)
			for _, c := range []*redlock.Client{x, before} {
				if info := c.Nodes(ctx)[0]; info.MaxMemoryPolicy != policy || !info.Voting {
					t.Fatalf("after the policy changed to %s, with the opt-in: %+v, want the node voting", policy, info)
				}
			}
			beforeMet := time.Now()
			const name = "job"
			held, err := x.TryAcquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Release(context.Background())
			eventually(t, 5*time.Second, "X's key on every node", func() bool {
				for _, s := range cl.Servers {
					if n, err := s.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 1 {
						return false
					}
				}
				return true
			})
			for _, s := range cl.Servers {
				if err := fillUntilEvicted(ctx, s, x.Keys(name).Lock); err != nil {
					t.Fatal(err)
				}
			}
			// The client that used the nodes before probes them again once
			// its guard is a second old (the window docs/PROTOCOL.md §11
			// states); the fill took longer on any machine, this only makes
			// sure of it.
			time.Sleep(time.Until(beforeMet.Add(1100 * time.Millisecond)))
			fresh := newClient()
			for _, tc := range []struct {
				who string
				c   *redlock.Client
			}{{"a client that used the nodes before", before}, {"a fresh client", fresh}} {
				left := time.Until(held.Deadline())
				if left < time.Second {
					t.Fatalf("X's validity ran out before the check (%v left): the test is too slow to tell", left)
				}
				l, err := tc.c.TryAcquire(ctx, name)
				if err == nil {
					_ = l.Release(ctx)
					t.Fatalf("%s took lock %q, evicted from every node, while X holds it for %.1fs more", tc.who, name, left.Seconds())
				}
				if !errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, redlock.ErrNodeSittingOut) || !strings.Contains(err.Error(), "evicted") {
					t.Fatalf("%s: want no quorum, the nodes sitting out for their evictions, got %v", tc.who, err)
				}
			}
			if info := fresh.Nodes(ctx)[0]; info.EvictedKeys == 0 || info.Voting || info.MaxMemoryPolicy != policy {
				t.Fatalf("Nodes: want the evictions counted and the node sitting out, got %+v", info)
			}
		})
	}
}

// A FLUSHALL (or FLUSHDB) on a quorum of the nodes during a hold: a client
// that met the nodes before sees their data-kept marker gone or written
// anew, and the nodes sit out the grace from that probe, so it is refused
// while X holds the lock. (A client that meets a node only after the flush
// cannot tell it from a new server: docs/PROTOCOL.md §11.)
func TestFlushedNodesSitOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := redistest.StartT(t, 3, redistest.Options{Persistence: true})
	opts := redlock.Options{TTL: 20 * time.Second}
	guarded := func() *redlock.Client { // newClient turns the guard off
		c, err := redlock.New(cl.Clients(), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	x, before, other := guarded(), guarded(), guarded()
	for _, c := range []*redlock.Client{before, other} {
		warm, err := c.TryAcquire(ctx, "warm-up")
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	met := time.Now()
	const name = "job"
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	eventually(t, 5*time.Second, "X's key on every node", func() bool {
		for _, s := range cl.Servers {
			if n, err := s.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 1 {
				return false
			}
		}
		return true
	})
	if err := cl.Servers[0].Client().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Servers[1].Client().FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Another client's probe writes the marker again first: the value,
	// not only its presence, shows the loss.
	if info := other.Nodes(ctx); info[0].Voting || info[1].Voting {
		t.Fatalf("the flushed nodes vote for a client that knew them: %+v", info[:2])
	}
	// The guard is read again before a vote once it is a second old (the
	// window docs/PROTOCOL.md §11 states).
	time.Sleep(time.Until(met.Add(1100 * time.Millisecond)))
	left := time.Until(held.Deadline())
	l, err := before.TryAcquire(ctx, name)
	if err == nil {
		_ = l.Release(ctx)
		t.Fatalf("a client that knew the nodes took lock %q, flushed from a quorum, while X holds it for %.1fs more", name, left.Seconds())
	}
	if !errors.Is(err, redlock.ErrNodeSittingOut) || !strings.Contains(err.Error(), "data-kept marker") {
		t.Fatalf("want a refusal, the flushed nodes sitting out for their lost marker, got %v", err)
	}
}
