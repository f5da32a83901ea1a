package redlock_test

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

// Review of 248cabb. A client (Y) meets two nodes only while their
// data-kept marker cannot be read (here NOREPLICAS: an operator's
// min-replicas-to-write with no replica in reach). Then FLUSHALL drops X's
// lock key there, the writes are allowed again, and X's own probe (X knew
// the markers: it sees the flush and sits the nodes out) writes a new
// marker. Y's first probe that can read the marker finds X's new one: not
// missing, so the "met only while unreadable, first read finds none" rule
// (nextEpoch) does not fire, and with no value of its own to compare, Y
// sees no loss and counts the flushed nodes at once. The flush came after
// Y's first contact, so the "flush before first contact" limit does not
// cover it.
func TestReviewMarkerErrFirstContactThenAnotherClientRewritesMarker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := redlock.Options{TTL: 30 * time.Second}
	cl, xs := guardedClients(t, opts, 1)
	x := xs[0]
	meetVoting(ctx, t, x)
	const name = "job"
	held := hold(t, ctx, x.TryAcquire, name) // X's probes wrote the markers
	configSetOn(ctx, t, cl.Servers[:2], "min-replicas-to-write", "1")
	// Y meets the nodes only now, and tries the lock (refused).
	y := newClientOn(t, cl.Clients(), opts)
	if l, err := y.TryAcquire(ctx, name); err == nil {
		_ = l.Release(ctx)
		t.Fatal("Y took the lock X holds before any flush")
	} else if !errors.Is(err, redlock.ErrNodeSittingOut) || !errors.Is(err, redlock.ErrNoQuorum) || !strings.Contains(err.Error(), "NOREPLICAS") {
		t.Fatalf("Y's first try, nodes refusing writes: %v; want ErrNoQuorum and ErrNodeSittingOut, naming NOREPLICAS", err)
	}
	for _, s := range cl.Servers[:2] {
		// (FLUSHALL is a write: refused with NOREPLICAS too.)
		if err := s.Client().ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Client().FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// X probes: it knew the markers, sees the flush, and writes new ones.
	for i, info := range x.Nodes(ctx)[:2] {
		t.Logf("X, node %d after the flush: voting %v (%s)", i, info.Voting, info.SitOutReason)
	}
	t.Logf("lock key on: %v", keysLeft(t, cl, x, name))
	refusedWhileHeld(t, ctx, held, name, refusal{tries: 3, margin: time.Second, after: " after FLUSHALL on 2 of 3 nodes that Y met only while their marker could not be read (another client wrote the marker again),", is: sittingOut(false, ""), want: "the flushed nodes sitting out"}, contender{"Y", y})
}

// The same with the memory refusal the rule was written for (OOM): Y met
// the nodes only while full; after the flush X's probe writes the marker
// again before Y reads it.
func TestReviewMarkerFullFirstContactThenAnotherClientRewritesMarker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := startCappedNodes(t)
	opts := redlock.Options{TTL: 30 * time.Second}
	x := newClientOn(t, cl.Clients(), opts)
	const name = "job"
	held := hold(t, ctx, x.TryAcquire, name)
	configSetOn(ctx, t, cl.Servers[:2], "maxmemory", "1")
	y := newClientOn(t, cl.Clients(), opts)
	for i, info := range y.Nodes(ctx) {
		t.Logf("Y meets node %d: voting %v (%s)", i, info.Voting, info.SitOutReason)
	}
	for _, s := range cl.Servers[:2] {
		if err := s.Client().FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Client().ConfigSet(ctx, "maxmemory", "8mb").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, info := range x.Nodes(ctx)[:2] {
		t.Logf("X, node %d after the flush: voting %v (%s)", i, info.Voting, info.SitOutReason)
	}
	t.Logf("lock key on: %v", keysLeft(t, cl, x, name))
	refusedWhileHeld(t, ctx, held, name, refusal{tries: 3, margin: time.Second, after: " after FLUSHALL on 2 of 3 nodes that Y met only while full (another client wrote the marker again),", is: sittingOut(false, ""), want: "the flushed nodes sitting out"}, contender{"Y", y})
}

// The schedule of TestReviewMarkerErrFirstContactThenAnotherClientRewritesMarker
// on a Cluster node: Y first meets node C while the master of the lock's
// slot (and one plain node) refuse writes; the flush, X's probe writes new
// markers, and Y's first read of the master's marker finds X's.
func TestReviewMarkerErrFirstContactOnAClusterMaster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rc, plain, client := plainAndClusterNodes(t)
	opts := redlock.Options{TTL: 30 * time.Second}
	x := client(opts)
	meetVoting(ctx, t, x)
	const name = "job"
	held := hold(t, ctx, x.TryAcquire, name)
	master, err := rc.MasterFor(ctx, x.Keys(name).Slot)
	if err != nil {
		t.Fatal(err)
	}
	flushed := []*redistest.Server{plain.Servers[0], master}
	configSetOn(ctx, t, flushed, "min-replicas-to-write", "1")
	y := client(opts)
	for i, info := range y.Nodes(ctx) {
		t.Logf("Y meets node %d: voting %v (%s)", i, info.Voting, info.SitOutReason)
	}
	for _, s := range flushed {
		if err := s.Client().ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Client().FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, info := range x.Nodes(ctx) {
		t.Logf("X, node %d after the flush: voting %v (%s)", i, info.Voting, info.SitOutReason)
	}
	refusedWhileHeld(t, ctx, held, name, refusal{tries: 3, margin: time.Second, after: " after FLUSHALL on a plain node and on the Cluster master of the lock's slot, both met by Y only while their marker could not be read,", is: sittingOut(false, ""), want: "the flushed nodes sitting out"}, contender{"Y", y})
}

// plainAndClusterNodes starts two persistent standalone servers and a
// persistent Cluster of two masters without replicas, and client makes a
// client of the three nodes (the Cluster through a ClusterClient of its
// own).
func plainAndClusterNodes(t *testing.T) (*redistest.RedisCluster, *redistest.Cluster, func(redlock.Options) *redlock.Client) {
	t.Helper()
	done := make(chan struct{})
	var rc *redistest.RedisCluster
	go func() {
		defer close(done)
		rc = redistest.StartRedisClusterT(t, 2, 0, redistest.Options{Persistence: true})
	}()
	plain := redistest.StartT(t, 2, redistest.Options{Persistence: true})
	<-done
	if rc == nil {
		t.FailNow()
	}
	return rc, plain, func(opts redlock.Options) *redlock.Client {
		cc := rc.ClusterClient()
		t.Cleanup(func() { _ = cc.Close() })
		return newClientOn(t, []redis.UniversalClient{plain.Servers[0].Client(), plain.Servers[1].Client(), cc}, opts)
	}
}

// otherMaster is the master of rc (two masters) that does not serve slot.
func otherMaster(ctx context.Context, t *testing.T, rc *redistest.RedisCluster, slot int) (serving, other *redistest.Server) {
	t.Helper()
	serving, err := rc.MasterFor(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range rc.Shards {
		if sh.Master != serving {
			return serving, sh.Master
		}
	}
	t.Fatal("no other master")
	return nil, nil
}

// Availability, new with 248cabb: an auto-extended lock's renewal round
// judges a Cluster node with no key (renewalGuardsPass(ctx, n, "")), so
// every master must pass. A master that cannot write the marker (here
// NOREPLICAS) but serves none of the lock's keys now takes the node's vote
// from every auto-extended lock, on any master; before, only OOM did, and
// extensions were exempt from it. With one other node down the lock is
// lost, though each of its keys sits on a node that takes the extension
// (an Extend, which names the key, succeeds).
func TestReviewMarkerErrOnAnotherMasterCostsAutoExtension(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rc, plain, client := plainAndClusterNodes(t)
	x := client(redlock.Options{TTL: 3 * time.Second})
	meetVoting(ctx, t, x)
	const name = "job"
	held := hold(t, ctx, x.TryAcquire, name, redlock.WithAutoExtend())
	_, other := otherMaster(ctx, t, rc, x.Keys(name).Slot)
	if err := other.Client().ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := plain.Servers[1].Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("master %s (not the lock's) refuses writes, node 1 is down", other.Addr)
	select {
	case <-held.Done():
		t.Fatalf("the auto-extended lock was lost (%v), though its key sits on node 0 and on the Cluster master of its slot, which both take extensions", held.Err())
	case <-time.After(7 * time.Second): // two TTLs: several renewal rounds
	}
	if err := held.Extend(ctx); err != nil {
		t.Fatalf("Extend: %v", err)
	}
}

// The sit-out reason of a Cluster master that cannot read its marker names
// the master and the refusal in plain words (it read "the its master
// 127.0.0.1:7001's data-kept marker" when first written).
func TestReviewMarkerErrClusterReason(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rc, _, client := plainAndClusterNodes(t)
	x := client(redlock.Options{TTL: 30 * time.Second})
	meetVoting(ctx, t, x)
	master, _ := otherMaster(ctx, t, rc, x.Keys("job").Slot)
	if err := master.Client().ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	info := x.Nodes(ctx)[2]
	want := "its master " + master.Addr + "'s data-kept marker could not be read"
	if info.Voting || !strings.Contains(info.SitOutReason, "NOREPLICAS") || !strings.Contains(info.SitOutReason, want) || strings.Contains(info.SitOutReason, "the its ") {
		t.Fatalf("node C: voting %v, reason %q; want it sitting out, the reason saying %q and naming NOREPLICAS", info.Voting, info.SitOutReason, want)
	}
}
