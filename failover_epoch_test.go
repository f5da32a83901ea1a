package redlock_test

// Issue 25: every event that may lose a granted key starts a new epoch of
// the server, which sits out the restart grace from it, and persistence
// excuses none of them but the server's own restart.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// epochNodes are issue 25's three nodes: two persistent standalone masters
// P0 and P1, and a Redis Cluster C of one master with one replica
// (persistent or not).
type epochNodes struct {
	plain *redistest.Cluster
	rc    *redistest.RedisCluster
}

func startEpochNodes(t *testing.T, clusterPersistent bool) epochNodes {
	t.Helper()
	var en epochNodes
	done := make(chan struct{})
	go func() {
		defer close(done)
		en.rc = redistest.StartRedisClusterT(t, 1, 1, redistest.Options{Persistence: clusterPersistent})
	}()
	en.plain = redistest.StartT(t, 2, redistest.Options{Persistence: true})
	<-done
	if en.rc == nil {
		t.FailNow() // the cluster's start failed, and said why
	}
	return en
}

// client is a client of the library over the three nodes, with a
// ClusterClient of its own, as another process would have.
func (en epochNodes) client(t *testing.T, opts redlock.Options) *redlock.Client {
	t.Helper()
	cc := en.rc.ClusterClient()
	t.Cleanup(func() { _ = cc.Close() })
	c, err := redlock.New([]redis.UniversalClient{en.plain.Servers[0].Client(), en.plain.Servers[1].Client(), cc}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// takeOnP0AndC has x take name while P1 is down, so that its key is on P0
// and on C's master only; P1 then comes back with its data.
func (en epochNodes) takeOnP0AndC(t *testing.T, ctx context.Context, x *redlock.Client, name string) *redlock.Lock {
	t.Helper()
	p1 := en.plain.Servers[1]
	if err := p1.Kill(); err != nil {
		t.Fatal(err)
	}
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	if err := p1.Restart(true); err != nil {
		t.Fatal(err)
	}
	// The decision may come before C's answer: wait for the key there.
	m := en.rc.Shards[0].Master
	eventually(t, 5*time.Second, "X's key on C's master", func() bool {
		n, err := m.Client().Exists(ctx, x.Keys(name).Lock).Result()
		return err == nil && n == 1
	})
	return held
}

// Issue 25, schedule 1: on persistent servers, a replica promoted in place
// of the master of a lock's slot lacks the lock's key. Persistence kept
// the replica's own writes, not the master's: the promoted replica must
// sit out the grace, for a fresh client and for one that knew the old
// master, so that nobody takes the lock while X holds it.
func TestPromotedReplicaOnPersistentServersSitsOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	en := startEpochNodes(t, true)
	opts := redlock.Options{TTL: 15 * time.Second, AllowFailoverNodes: true}
	x := en.client(t, opts)
	before := en.client(t, opts)
	// Persistence spares no start on a node that fails over (C's master
	// may have been promoted before it): both wait out its start's grace.
	for _, c := range []*redlock.Client{x, before} {
		eventually(t, 30*time.Second, "C votes, past its master's start", func() bool {
			info := c.Nodes(ctx)[2]
			return info.Err == nil && info.Voting
		})
	}
	if err := redistest.CutReplication(ctx, en.rc.Shards[0].Replicas[0]); err != nil {
		t.Fatal(err)
	}
	const name = "job"
	held := en.takeOnP0AndC(t, ctx, x, name)
	promoted, err := en.rc.Failover(ctx, x.Keys(name).Slot, true)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := promoted.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 0 {
		t.Fatalf("the promoted replica has X's key (%d, %v): the failover lost nothing", n, err)
	}
	fresh := en.client(t, opts)
	refusedWhileHeld(t, ctx, en.plain.Servers[1], held, name, before, fresh)
	info, err := fresh.NodesFor(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if c := info[2]; c.Voting || !strings.Contains(c.SitOutReason, "was promoted from replica since it started") || !strings.Contains(c.SitOutReason, promoted.Addr) {
		t.Fatalf("the Cluster node to a fresh client: %+v, want its promoted master %s sitting out", c, promoted.Addr)
	}
}

// Issue 25, schedule 2: a master fails over to its replica, loses a lock's
// key in the resync, and is promoted back under the same address and
// run_id, while nobody calls the node. A client that knew it before must
// see the change of its replication id and make it sit out, as a fresh
// client does.
func TestFailBackUnderTheSameRunIDSitsOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	en := startEpochNodes(t, false)
	// The TTL leaves room for the two failovers within X's validity; C's
	// master sits out its start's grace (one TTL) first.
	opts := redlock.Options{TTL: 12 * time.Second, AllowFailoverNodes: true}
	x := en.client(t, opts)
	y := en.client(t, opts)
	for _, c := range []*redlock.Client{x, y} {
		eventually(t, 30*time.Second, "C votes, past its master's start", func() bool {
			info := c.Nodes(ctx)[2]
			return info.Err == nil && info.Voting
		})
	}
	yMet := time.Now()
	a, r := en.rc.Shards[0].Master, en.rc.Shards[0].Replicas[0]
	runA := runID(t, a)
	if err := redistest.CutReplication(ctx, r); err != nil {
		t.Fatal(err)
	}
	const name = "job"
	held := en.takeOnP0AndC(t, ctx, x, name)
	slot := x.Keys(name).Slot
	if p, err := en.rc.Failover(ctx, slot, false); err != nil || p != r {
		t.Fatalf("failover to the replica: %v, %v", p, err)
	}
	// A is now R's replica: it resyncs from R and loses X's keys.
	eventually(t, 20*time.Second, "the old master resynced from the replica, without X's key", func() bool {
		info, err := a.Client().Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_link_status:up") {
			return false
		}
		// A replica in cluster mode answers reads of its slots with
		// MOVED: count the slot's keys instead (X's are its only ones).
		n, err := a.Client().ClusterCountKeysInSlot(ctx, slot).Result()
		return err == nil && n == 0
	})
	if p, err := en.rc.Failover(ctx, slot, false); err != nil || p != a {
		t.Fatalf("fail-back to the old master: %v, %v", p, err)
	}
	if got := runID(t, a); got != runA {
		t.Fatalf("the old master's run_id changed (%s, was %s): not the schedule under test", got, runA)
	}
	// Y last probed the nodes at its warm-up. A probe is due before its
	// next vote once the guard is a second old, the window the library
	// states (docs/PROTOCOL.md §11); the failovers took longer than that
	// on any machine, and this wait only makes sure of it.
	time.Sleep(time.Until(yMet.Add(1100 * time.Millisecond)))
	fresh := en.client(t, opts)
	refusedWhileHeld(t, ctx, en.plain.Servers[1], held, name, y, fresh)
	info, err := y.NodesFor(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if c := info[2]; c.Voting || !strings.Contains(c.SitOutReason, a.Addr) || !strings.Contains(c.SitOutReason, "replication id") {
		t.Fatalf("the Cluster node to the client that knew it: %+v, want its master %s sitting out for its new replication id", c, a.Addr)
	}
}

// refusedWhileHeld tries the lock that held holds, three times from each of
// a client that used the nodes before and a fresh one, while X's validity
// lasts: each must be refused, with C sitting out. Each attempt's key on
// P1 (which X does not hold) is awaited gone before the next: left there,
// it would make the next attempt stop at ErrLocked on P0 and P1 before C
// answered, which happened on a loaded machine.
func refusedWhileHeld(t *testing.T, ctx context.Context, p1 *redistest.Server, held *redlock.Lock, name string, before, fresh *redlock.Client) {
	t.Helper()
	for _, tc := range []struct {
		who string
		c   *redlock.Client
	}{{"a client that used the nodes before", before}, {"a fresh client", fresh}} {
		for range 3 {
			left := time.Until(held.Deadline())
			if left < 500*time.Millisecond {
				t.Fatalf("X's validity ran out before the check (%v left): the test is too slow to tell", left)
			}
			l, err := tc.c.TryAcquire(ctx, name)
			if err == nil {
				_ = l.Release(ctx)
				t.Fatalf("%s took lock %q while X holds it for %.1fs more", tc.who, name, left.Seconds())
			}
			if !errors.Is(err, redlock.ErrNodeSittingOut) || !strings.Contains(err.Error(), "ClusterClient#3: redlock: node is sitting out") {
				t.Fatalf("%s: want a refusal with C sitting out, got %v", tc.who, err)
			}
			awaitNoKey(t, ctx, p1, tc.c.Keys(name).Lock)
		}
	}
}

// awaitNoKey waits until s holds no key at key: a refused attempt's release
// sweep is done there.
func awaitNoKey(t *testing.T, ctx context.Context, s *redistest.Server, key string) {
	t.Helper()
	eventually(t, 10*time.Second, "the refused attempt's key released on "+s.Addr, func() bool {
		n, err := s.Client().Exists(ctx, key).Result()
		return err == nil && n == 0
	})
}
