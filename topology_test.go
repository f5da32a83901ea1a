package redlock_test

// Nodes that are deployments: a *redis.ClusterClient over a Redis Cluster,
// a *redis.Client from redis.NewFailoverClient over Sentinel. The guards
// follow the servers that hold the keys.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// startClusters starts n Redis Clusters of masters masters with replicas
// replicas each, in parallel.
func startClusters(t *testing.T, n, masters, replicas int, opts redistest.Options) []*redistest.RedisCluster {
	t.Helper()
	rcs := make([]*redistest.RedisCluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { rcs[i], errs[i] = redistest.StartRedisCluster(masters, replicas, opts) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, rc := range rcs {
			if rc != nil {
				if err := rc.Stop(); err != nil {
					t.Errorf("stopping a cluster: %v", err)
				}
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return rcs
}

// clusterClients makes one ClusterClient per cluster, closed at cleanup: a
// client of the lock library of its own, as another process would have.
func clusterClients(t *testing.T, rcs []*redistest.RedisCluster) []redis.UniversalClient {
	t.Helper()
	out := make([]redis.UniversalClient, len(rcs))
	for i, rc := range rcs {
		cc := rc.ClusterClient()
		t.Cleanup(func() { _ = cc.Close() })
		out[i] = cc
	}
	return out
}

// nameInSlots finds a lock name whose hash slot is in [first, last].
func nameInSlots(c *redlock.Client, prefix string, first, last int) string {
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if s := c.KeySlot(name); first <= s && s <= last {
			return name
		}
	}
}

// Issue 18's schedule: five nodes, each a ClusterClient over a Redis
// Cluster of two masters without persistence. X holds a lock whose slot is
// on the second master; in the three clusters that hold X's keys that
// master restarts empty, keeping its slots. Neither a client that used the
// nodes before nor a fresh one may take the lock while X holds it: the
// restarted master lost X's key, and the guards must see that it is a new
// server although the ClusterClient's INFO may reach the other master.
func TestClusterNodesMasterRestartGivesNoSecondHolder(t *testing.T) {
	rcs := startClusters(t, 5, 2, 0, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := redlock.Options{TTL: 10 * time.Second}
	x, err := redlock.New(clusterClients(t, rcs), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	before, err := redlock.New(clusterClients(t, rcs), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	name := nameInSlots(x, "job", 8192, 16383) // the second master's

	// The fresh masters sit out the grace first: wait for it.
	warm := nameInSlots(x, "warm", 8192, 16383)
	l, err := before.Acquire(ctx, warm)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := x.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())

	// The clusters that hold X's key restart its slot's master empty.
	var holders []*redistest.RedisCluster
	for _, rc := range rcs {
		if n, err := rc.Shards[1].Master.Client().Exists(ctx, x.LockKey(name)).Result(); err != nil {
			t.Fatal(err)
		} else if n == 1 {
			holders = append(holders, rc)
		}
	}
	if len(holders) < x.Quorum() {
		t.Fatalf("X's key is on %d clusters' second master, want at least %d", len(holders), x.Quorum())
	}
	errs := make([]error, len(holders))
	var wg sync.WaitGroup
	for i, rc := range holders {
		wg.Go(func() { _, errs[i] = rc.RestartMaster(ctx, x.KeySlot(name)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, rc := range holders {
		if n, err := rc.Shards[1].Master.Client().Exists(ctx, x.LockKey(name)).Result(); err != nil || n != 0 {
			t.Fatalf("the restarted master kept X's key (%d, %v)", n, err)
		}
	}

	fresh, err := redlock.New(clusterClients(t, rcs), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	for _, tc := range []struct {
		who string
		c   *redlock.Client
	}{{"a client that used the nodes before", before}, {"a fresh client", fresh}} {
		// Several tries: the first may be the one that finds the new
		// connection, the next ones must not slip through either.
		for range 3 {
			left := time.Until(held.Deadline())
			if left < time.Second {
				t.Fatalf("X's validity ran out before the check (%v left): the test is too slow to tell", left)
			}
			l, err := tc.c.TryAcquire(ctx, name)
			if err == nil {
				_ = l.Release(ctx)
				t.Fatalf("%s took lock %q while X holds it for %.1fs more", tc.who, name, left.Seconds())
			}
			// The restarted masters' nodes sit out the grace.
			if !errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, redlock.ErrNodeSittingOut) {
				t.Fatalf("%s: want no quorum, the restarted masters' nodes sitting out, got %v", tc.who, err)
			}
		}
	}
}
