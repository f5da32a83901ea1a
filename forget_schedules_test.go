package redlock_test

// Schedules of issue 25 that nobody designed for: nodes that forget, seen
// by a client whose view of them was interrupted.

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

// fillUntilOOM writes 4 KiB values without a TTL to s until the server
// refuses a write for want of memory (noeviction at its maxmemory).
func fillUntilOOM(ctx context.Context, t *testing.T, s *redistest.Server) {
	t.Helper()
	rdb := s.Client()
	value := strings.Repeat("c", 4096)
	for i := 0; ; i++ {
		pipe := rdb.Pipeline()
		for j := range 256 {
			pipe.Set(ctx, fmt.Sprintf("cache:%d:%d", i, j), value, 0)
		}
		_, err := pipe.Exec(ctx)
		if err != nil && strings.Contains(err.Error(), "OOM") {
			return
		}
		if err != nil {
			t.Fatalf("filling %s: %v", s.Addr, err)
		}
		if i > 10000 {
			t.Fatalf("%s never refused a write for want of memory", s.Addr)
		}
	}
}

// A node at its maxmemory with noeviction (the policy the library asks for)
// refuses every write, the data-kept marker's SET included, until an
// operator frees memory, often by FLUSHALL. A probe made while the node
// was full reads no marker; the client must not forget the marker it saw
// before, or the flush that follows goes unseen by a client that knew the
// node, and a second client takes a lock that the first still holds.
func TestFlushAfterAFullNodeIsSeen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := redistest.StartT(t, 3, redistest.Options{Persistence: true,
		Args: []string{"--maxmemory", "8mb", "--maxmemory-policy", "noeviction"}})
	opts := redlock.Options{TTL: 30 * time.Second}
	newClient := func() *redlock.Client {
		c, err := redlock.New(cl.Clients(), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	x, y := newClient(), newClient()
	for _, info := range y.Nodes(ctx) { // Y meets the nodes and their markers
		if info.Err != nil || !info.Voting {
			t.Fatalf("a persistent node with noeviction: %+v, want it voting", info)
		}
	}
	const name = "job"
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	// The cache fills two nodes; Y probes them while they are full.
	for _, s := range cl.Servers[:2] {
		fillUntilOOM(ctx, t, s)
	}
	y.Nodes(ctx)
	// The operator frees the memory the usual way.
	for _, s := range cl.Servers[:2] {
		if err := s.Client().FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Y probes the nodes again after the flush (so that the window of a
	// guard up to a second old plays no part).
	for i, info := range y.Nodes(ctx)[:2] {
		t.Logf("node %d after the flush: voting %v, %s", i, info.Voting, info.SitOutReason)
	}
	for range 3 {
		left := time.Until(held.Deadline())
		if left < time.Second {
			t.Fatalf("X's validity ran out before the check (%v left): the test is too slow to tell", left)
		}
		l, err := y.TryAcquire(ctx, name)
		if err == nil {
			_ = l.Release(ctx)
			t.Fatalf("Y took lock %q after FLUSHALL on 2 of 3 nodes, while X holds it for %.1fs more", name, left.Seconds())
		}
		if !errors.Is(err, redlock.ErrNodeSittingOut) {
			t.Fatalf("want the flushed nodes sitting out, got %v", err)
		}
	}
}

// Issue 25's schedule 1 with one more step: the promoted replica (on
// persistent servers) restarts before a fresh client meets it. INFO shows a
// promotion only until the server's next start (second_repl_offset is -1
// again after it), and persistence spares a restart the grace: the fresh
// client sees a persistent master that was never promoted, and counts its
// vote, although it lacks X's key.
func TestPromotedReplicaRestartedBeforeAFreshClientSitsOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	en := startEpochNodes(t, true)
	opts := redlock.Options{TTL: 15 * time.Second, AllowFailoverNodes: true}
	x := en.client(t, opts)
	eventually(t, 30*time.Second, "C votes, past its master's start", func() bool {
		info := x.Nodes(ctx)[2]
		return info.Err == nil && info.Voting
	})
	if err := redistest.CutReplication(ctx, en.rc.Shards[0].Replicas[0]); err != nil {
		t.Fatal(err)
	}
	const name = "job"
	held := en.takeOnP0AndC(t, ctx, x, name)
	promoted, err := en.rc.Failover(ctx, x.Keys(name).Slot, true)
	if err != nil {
		t.Fatal(err)
	}
	restarted, err := en.rc.RestartMaster(ctx, x.Keys(name).Slot)
	if err != nil || restarted != promoted {
		t.Fatalf("restarting the promoted replica: %v, %v", restarted, err)
	}
	if n, err := promoted.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 0 {
		t.Fatalf("the promoted replica has X's key (%d, %v): the failover lost nothing", n, err)
	}
	fresh := en.client(t, opts)
	for range 3 {
		left := time.Until(held.Deadline())
		if left < 500*time.Millisecond {
			t.Fatalf("X's validity ran out before the check (%v left): the test is too slow to tell", left)
		}
		l, err := fresh.TryAcquire(ctx, name)
		if err == nil {
			_ = l.Release(ctx)
			t.Fatalf("a fresh client took lock %q while X holds it for %.1fs more", name, left.Seconds())
		}
		if !errors.Is(err, redlock.ErrNodeSittingOut) || !strings.Contains(err.Error(), "ClusterClient#3: redlock: node is sitting out") {
			t.Fatalf("want a refusal with C sitting out, got %v", err)
		}
		awaitNoKey(t, ctx, en.plain.Servers[1], fresh.Keys(name).Lock)
	}
}

// An operator lets persistent nodes evict at run time (CONFIG SET maxmemory
// and a policy, not written to the config file); a client that accepts
// evicting nodes sees them evicting at a probe, then goes idle. The cache
// evicts X's key, and the nodes restart with the file's settings: not
// evicting, their evicted_keys back at 0, persistent. The client's next
// call must not take the lock X still holds.
func TestARestartAfterARunTimeEvictionIsALoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := redistest.StartT(t, 3, redistest.Options{Persistence: true})
	newClient := func() *redlock.Client {
		c, err := redlock.New(cl.Clients(), redlock.Options{TTL: 30 * time.Second, AllowEvictingNodes: true, RestartGrace: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	x, y := newClient(), newClient()
	const name = "job"
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	y.Nodes(ctx) // Y meets the nodes before they may evict
	for _, s := range cl.Servers {
		if err := s.Client().ConfigSet(ctx, "maxmemory", "8mb").Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Client().ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, info := range y.Nodes(ctx) {
		if info.Err != nil || !info.Voting {
			t.Fatalf("node %d, evicting but nothing evicted yet: %+v, want it voting", i, info)
		}
	}
	for _, s := range cl.Servers {
		fillUntilOOM(ctx, t, s)
		if n, err := s.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 0 {
			t.Fatalf("X's key on %s after the fill: %d, %v; want it evicted", s.Addr, n, err)
		}
		if err := s.Restart(true); err != nil {
			t.Fatal(err)
		}
	}
	left := time.Until(held.Deadline())
	l, err := y.TryAcquire(ctx, name)
	if err == nil {
		_ = l.Release(ctx)
		t.Fatalf("Y took lock %q after its nodes evicted X's key and restarted, while X holds it for %.1fs more", name, left.Seconds())
	}
	if !errors.Is(err, redlock.ErrNodeSittingOut) || !strings.Contains(err.Error(), "may evict keys") {
		t.Fatalf("want the restarted nodes sitting out, got %v", err)
	}
}

// With AllowEvictingNodes, an eviction makes a node sit out the restart
// grace: the largest TTL in use, which a client that did not know the
// holder's TTL reads in the nodes' registers. But an eviction is not a
// restart of one node: the cache that fills one node fills the others, and
// the registers have a TTL, so volatile-* and allkeys-* policies evict them
// with the lock's keys, on every node at once. A fresh client with a
// shorter TTL then finds no register, sits out its own TTL only, and takes
// the lock the holder still holds. So AllowEvictingNodes needs the grace
// declared (RestartGrace), and no lock may outlive it.
func TestEvictedRegistersStillGiveTheHoldersGrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := redistest.StartT(t, 3, redistest.Options{Persistence: true,
		Args: []string{"--maxmemory", "8mb", "--maxmemory-policy", "noeviction"}})
	_, err := redlock.New(cl.Clients(), redlock.Options{TTL: time.Second, AllowEvictingNodes: true})
	if !errors.Is(err, redlock.ErrInvalidConfig) || !strings.Contains(err.Error(), "RestartGrace") {
		t.Fatalf("AllowEvictingNodes without RestartGrace: want ErrInvalidConfig naming RestartGrace, got %v", err)
	}
	const grace = 30 * time.Second
	_, err = redlock.New(cl.Clients(), redlock.Options{TTL: time.Minute, AllowEvictingNodes: true, RestartGrace: grace})
	if !errors.Is(err, redlock.ErrInvalidConfig) || !strings.Contains(err.Error(), "1m0s") {
		t.Fatalf("AllowEvictingNodes with a TTL above RestartGrace: want ErrInvalidConfig naming the TTL, got %v", err)
	}
	newClient := func(ttl time.Duration) *redlock.Client {
		c, err := redlock.New(cl.Clients(), redlock.Options{TTL: ttl, AllowEvictingNodes: true, RestartGrace: grace})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	x := newClient(30 * time.Second)
	const name = "job"
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	// The operator lets the nodes evict (a managed service's default), at
	// run time: a persistent restart under an evicting policy would have
	// made X wait out a grace first.
	for _, s := range cl.Servers {
		if err := s.Client().ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The cache (keys without a TTL) fills every node: volatile-lru evicts
	// every key with a TTL before it refuses a write; then the cache frees
	// some memory.
	for _, s := range cl.Servers {
		fillUntilOOM(ctx, t, s)
		if n, err := s.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 0 {
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
	}
	y := newClient(time.Second)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	l, err := y.Acquire(wctx, name)
	if err == nil {
		left := time.Until(held.Deadline())
		_ = l.Release(ctx)
		if left > 0 {
			t.Fatalf("a fresh client with a 1s TTL took lock %q after the nodes evicted its keys, while X holds it for %.1fs more", name, left.Seconds())
		}
	}
	if !errors.Is(err, redlock.ErrNodeSittingOut) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the evicting nodes sitting out X's TTL, got %v", err)
	}
}
