package redlock_test

// Wake-ups: a waiting Acquire listens to its own lock's release channel, on
// one pub/sub connection per node, only while it waits (and a short linger).

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// subscriptions lists, per node, the channels under the default key prefix
// that anyone is subscribed to, sorted.
func subscriptions(t *testing.T, cl *redistest.Cluster) [][]string {
	t.Helper()
	var out [][]string
	for _, s := range cl.Servers {
		chs, err := s.Client().PubSubChannels(context.Background(), redlock.DefaultKeyPrefix+"*").Result()
		if err != nil {
			t.Fatalf("%s: PUBSUB CHANNELS: %v", s.Addr, err)
		}
		slices.Sort(chs)
		out = append(out, chs)
	}
	return out
}

// subscribedTo tells whether every node's channels under the prefix with
// a subscriber are exactly chans, sorted.
func subscribedTo(t *testing.T, cl *redistest.Cluster, chans ...string) bool {
	t.Helper()
	for _, chs := range subscriptions(t, cl) {
		if !slices.Equal(chs, chans) {
			return false
		}
	}
	return true
}

// noSubscriptions tells whether no node has a subscriber under the prefix.
func noSubscriptions(t *testing.T, cl *redistest.Cluster) bool {
	t.Helper()
	return subscribedTo(t, cl)
}

// holderAndWaiter starts three nodes, cl, and two clients of them with
// slowRetries: a holder, and a waiter whose failed attempts come on failed.
func holderAndWaiter(t *testing.T) (cl *redistest.Cluster, holder, waiter *redlock.Client, failed <-chan string) {
	t.Helper()
	cl = redistest.StartT(t, 3, redistest.Options{})
	wopts, failed := failures(slowRetries())
	return cl, newClient(t, cl, slowRetries()), newClient(t, cl, wopts), failed
}

// pubsubConns counts each node's pub/sub connections.
func pubsubConns(t *testing.T, cl *redistest.Cluster) []int {
	t.Helper()
	var out []int
	for _, s := range cl.Servers {
		list, err := s.Client().ClientList(context.Background()).Result()
		if err != nil {
			t.Fatalf("%s: CLIENT LIST: %v", s.Addr, err)
		}
		n := 0
		for line := range strings.Lines(list) {
			if strings.Contains(line, " flags=P ") {
				n++
			}
		}
		out = append(out, n)
	}
	return out
}

func TestWaiterListensToItsOwnLockOnlyWhileWaiting(t *testing.T) {
	cl, holder, waiter, failed := holderAndWaiter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	held := map[string]*redlock.Lock{}
	got := make(chan error, 2)
	for _, name := range []string{"a", "b"} {
		l, err := holder.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		held[name] = l
		go func() {
			l2, err := waiter.Acquire(ctx, name)
			if err == nil {
				err = l2.Release(ctx)
			}
			got <- err
		}()
		awaitWaiting(t, ctx, failed, name)
	}

	// Both locks' channels, on one pub/sub connection per node, and nothing
	// else: the releases of another lock reach no client. (The waiter went
	// on once a quorum confirmed; the last node may still be on its way.)
	want := []string{"redlock:{a}:released", "redlock:{b}:released"}
	eventually(t, 5*time.Second, "every node subscribed to a and b, on one connection", func() bool {
		return subscribedTo(t, cl, want...) && slices.Equal(pubsubConns(t, cl), []int{1, 1, 1})
	})
	for range 10 {
		takeAndRelease(t, ctx, holder.TryAcquire, "other")
	}

	// The release of a wakes its waiter at once, long before a retry.
	start := time.Now()
	if err := held["a"].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter of a: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the waiter of a took the lock %v after its release: not woken by it", took)
	}

	// Nobody waits for a any more: its subscription ends after the linger;
	// b's stays while its waiter waits.
	eventually(t, 10*time.Second, "the subscription to a ends after the linger", func() bool {
		return subscribedTo(t, cl, want[1:]...)
	})
	if err := held["b"].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter of b: %v", err)
	}
	eventually(t, 10*time.Second, "no subscription left after the linger", func() bool { return noSubscriptions(t, cl) })
}

// TestNoReleaseIsMissedAfterTheSubscriptionIsConfirmed releases the lock as
// soon as the waiter's attempt after its confirmation failed, hundreds of
// times. Each time the waiter is a new client, whose first wait must also
// dial its pub/sub connections: a waiter that went on before the nodes
// applied its SUBSCRIBE would miss the release and sleep for seconds.
func TestNoReleaseIsMissedAfterTheSubscriptionIsConfirmed(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	opts := slowRetries()
	opts.RestartGrace = redlock.NoRestartGrace // the nodes just started
	// A confirmation that never comes would hold the waiter this long: the
	// test would time out rather than pass by luck.
	opts.NodeTimeout = 20 * time.Second
	// A missed release leaves the waiter asleep for a minute, far past the
	// 30s each hand-off is given: a loaded machine that takes seconds to
	// run the woken waiter is not taken for a miss.
	opts.RetryDelayMin, opts.RetryDelayMax = time.Minute, time.Minute
	holder := newClient(t, cl, opts)
	wopts, failed := failures(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := range 300 {
		// A client of its own, with go-redis clients of its own: New adds
		// a hook to the clients it is given, and shared ones would pile up
		// hundreds.
		waiter, err := redlock.NewFromURLs(cl.URLs(), wopts)
		if err != nil {
			t.Fatal(err)
		}
		handOff(t, ctx, holder, waiter, failed, fmt.Sprintf("handoff-%d", i), 30*time.Second, nil)
		if err := waiter.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestForceUnlockWakesTheWaiter(t *testing.T) {
	_, holder, waiter, failed := holderAndWaiter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := holder.TryAcquire(ctx, "stuck"); err != nil {
		t.Fatal(err)
	}
	got := acquireReleaseAsync(ctx, waiter, "stuck")
	awaitWaiting(t, ctx, failed, "stuck")
	start := time.Now()
	if _, err := holder.ForceUnlock(ctx, "stuck"); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the waiter took the lock %v after ForceUnlock: not woken by it", took)
	}
}

func TestCloseLeavesNoSubscription(t *testing.T) {
	cl, holder, waiter, failed := holderAndWaiter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := holder.TryAcquire(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	waitCtx, stopWaiting := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(waitCtx, "c")
		got <- err
	}()
	awaitWaiting(t, ctx, failed, "c")
	eventually(t, 5*time.Second, "every node subscribed to c", func() bool {
		return subscribedTo(t, cl, "redlock:{c}:released")
	})
	// The Acquire still waits, so only Close can end the subscription.
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "no subscription and no pub/sub connection left after Close", func() bool {
		return noSubscriptions(t, cl) && slices.Equal(pubsubConns(t, cl), []int{0, 0, 0})
	})
	stopWaiting()
	if err := <-got; err == nil {
		t.Fatal("the waiter acquired a lock that is still held")
	}
}

// TestWaiterIsWokenAfterItsPubSubConnectionBroke kills the waiter's pub/sub
// connections while it waits: go-redis makes new ones and subscribes them
// again, and the release still wakes the waiter.
func TestWaiterIsWokenAfterItsPubSubConnectionBroke(t *testing.T) {
	cl, holder, waiter, failed := holderAndWaiter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := holder.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := acquireReleaseAsync(ctx, waiter, "k")
	awaitWaiting(t, ctx, failed, "k")
	want := []string{"redlock:{k}:released"}
	subscribed := func() bool {
		return subscribedTo(t, cl, want...)
	}
	eventually(t, 5*time.Second, "every node subscribed to k", subscribed)
	for _, s := range cl.Servers {
		if n, err := s.Client().ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n != 1 {
			t.Fatalf("%s: CLIENT KILL TYPE pubsub: %d killed, %v", s.Addr, n, err)
		}
	}
	eventually(t, 5*time.Second, "every node subscribed to k again", subscribed)
	start := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the waiter took the lock %v after the release: not woken by it", took)
	}
}

// Sharded wake-ups: on a Redis Cluster node whose masters have SPUBLISH, a
// release is announced in the lock's shard only (SPUBLISH), and a waiter
// listens on the master of its lock's slot (SSUBSCRIBE).

// clusterNodeClient is a client whose one node is the whole cluster rc.
func clusterNodeClient(t *testing.T, rc *redistest.RedisCluster, opts redlock.Options) *redlock.Client {
	t.Helper()
	cc := rc.ClusterClient()
	opts.AllowNoFaultTolerance = true
	opts.RestartGrace = redlock.NoRestartGrace // the servers just started
	c, err := redlock.New([]redis.UniversalClient{cc}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = cc.Close()
	})
	return c
}

// commandCalls sums the calls of command cmd over the servers that are
// masters now, as INFO commandstats counts them (a script's own calls
// included).
func commandCalls(t *testing.T, rc *redistest.RedisCluster, cmd string) int {
	t.Helper()
	total := 0
	for _, s := range rc.Servers {
		stats, err := s.Client().Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatalf("%s: INFO commandstats: %v", s.Addr, err)
		}
		for line := range strings.Lines(stats) {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
			if !ok {
				continue
			}
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			total += n
		}
	}
	return total
}

// shardSubscribers counts, per server of rc, the SSUBSCRIBErs of channel.
func shardSubscribers(t *testing.T, rc *redistest.RedisCluster, channel string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, s := range rc.Servers {
		m, err := s.Client().PubSubShardNumSub(context.Background(), channel).Result()
		if err != nil {
			t.Fatalf("%s: PUBSUB SHARDNUMSUB: %v", s.Addr, err)
		}
		out[s.Addr] = m[channel]
	}
	return out
}

// namesPerMaster gives, for each master of rc, a lock name whose slot it
// serves.
func namesPerMaster(t *testing.T, ctx context.Context, rc *redistest.RedisCluster, c *redlock.Client) []string {
	t.Helper()
	seen := map[string]bool{}
	var names []string
	for i := 0; len(names) < len(rc.Shards); i++ {
		name := fmt.Sprintf("shard-%d", i)
		m, err := rc.MasterFor(ctx, c.Keys(name).Slot)
		if err != nil {
			t.Fatal(err)
		}
		if !seen[m.Addr] {
			seen[m.Addr] = true
			names = append(names, name)
		}
	}
	return names
}

// handOff has waiter wait for name, held by holder, and releases it: the
// waiter must get it within bound, far shorter than its retry delay, so
// only the release's wake-up explains it. during runs while the waiter
// waits, subscribed.
func handOff(t *testing.T, ctx context.Context, holder, waiter *redlock.Client, failed <-chan string, name string, bound time.Duration, during func()) {
	t.Helper()
	handOffBy(t, ctx, holder, waiter, failed, name, bound, during, func(l *redlock.Lock) error { return l.Release(ctx) })
}

// handOffBy is handOff with the lock freed by release.
func handOffBy(t *testing.T, ctx context.Context, holder, waiter *redlock.Client, failed <-chan string, name string, bound time.Duration, during func(), release func(*redlock.Lock) error) {
	t.Helper()
	l, err := holder.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireReleaseAsync(ctx, waiter, name)
	awaitWaiting(t, ctx, failed, name)
	if during != nil {
		during()
	}
	if err := release(l); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	case <-time.After(bound):
		t.Fatalf("%s: the waiter was not woken by the release within %v", name, bound)
	}
}

// On a Cluster node of 2 and of 3 masters, a waiter listens with
// SSUBSCRIBE on the master of its lock's slot, and nowhere else, and the
// release wakes it by SPUBLISH: no PUBLISH reaches the cluster bus.
func TestClusterWaiterIsWokenBySPublish(t *testing.T) {
	for _, masters := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d masters", masters), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rc := redistest.StartRedisClusterT(t, masters, 0, redistest.Options{})
			opts := slowRetries()
			// A missed release would leave the waiter asleep for a minute,
			// and a confirmation that never comes would hold it as long.
			opts.RetryDelayMin, opts.RetryDelayMax = time.Minute, time.Minute
			opts.NodeTimeout = 20 * time.Second
			holder := clusterNodeClient(t, rc, opts)
			wopts, failed := failures(opts)
			waiter := clusterNodeClient(t, rc, wopts)
			for _, s := range rc.Servers {
				if err := s.Client().ConfigResetStat(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			names := namesPerMaster(t, ctx, rc, holder)
			for _, name := range names {
				channel := holder.Keys(name).Released
				master, err := rc.MasterFor(ctx, holder.Keys(name).Slot)
				if err != nil {
					t.Fatal(err)
				}
				handOff(t, ctx, holder, waiter, failed, name, 30*time.Second, func() {
					for addr, n := range shardSubscribers(t, rc, channel) {
						want := int64(0)
						if addr == master.Addr {
							want = 1
						}
						if n != want {
							t.Errorf("%s: %s has %d shard subscribers of %s, want %d (its master is %s)", name, addr, n, channel, want, master.Addr)
						}
					}
				})
			}
			if n := commandCalls(t, rc, "spublish"); n < len(names) {
				t.Errorf("spublish calls over the masters: %d, want at least %d (one per release)", n, len(names))
			}
			if n := commandCalls(t, rc, "publish"); n != 0 {
				t.Errorf("publish calls over the masters: %d, want none", n)
			}
			if n := commandCalls(t, rc, "subscribe"); n != 0 {
				t.Errorf("subscribe calls over the masters: %d, want none", n)
			}
		})
	}
}

// A failover of the master a waiter listens on leaves the waiter to its
// retries at worst: it gets the lock within its retry delay of the
// release. Later waits route to the new master and are woken by the
// release again.
func TestClusterWaiterOutlivesAFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rc := redistest.StartRedisClusterT(t, 2, 1, redistest.Options{})
	opts := redlock.Options{TTL: time.Minute, RetryDelayMin: 3 * time.Second, RetryDelayMax: 3 * time.Second,
		NodeTimeout: 20 * time.Second, AllowFailoverNodes: true}
	holder := clusterNodeClient(t, rc, opts)
	wopts, failed := failures(opts)
	waiter := clusterNodeClient(t, rc, wopts)
	name := "failover"
	slot := holder.Keys(name).Slot
	// The failover happens while the waiter waits, subscribed on the old
	// master: the release may come before the waiter routed again, and
	// then only a retry finds the lock free. A waiter stuck beyond its
	// retry delay (plus the test machine's slack) fails the test.
	// The holder's own release may count the lock as lost, the new master
	// being a new server (DESIGN §6): it is freed by ForceUnlock, which
	// deletes the key wherever it is and announces it.
	handOffBy(t, ctx, holder, waiter, failed, name, opts.RetryDelayMax+20*time.Second, func() {
		if _, err := rc.Failover(ctx, slot, false); err != nil {
			t.Fatal(err)
		}
	}, func(*redlock.Lock) error {
		_, err := holder.ForceUnlock(ctx, name)
		return err
	})
	// After the failover the waiter's channel lives on the new master,
	// and a release there wakes it, well within the retry delay... once
	// the acquire sees the new master (its probe sits out no grace here).
	opts.RetryDelayMin, opts.RetryDelayMax = time.Minute, time.Minute
	holder2 := clusterNodeClient(t, rc, opts)
	wopts2, failed2 := failures(opts)
	waiter2 := clusterNodeClient(t, rc, wopts2)
	handOff(t, ctx, holder2, waiter2, failed2, name, 30*time.Second, nil)
	// And the first waiter, which listened on the old master, listens on
	// the new one now, and on no other server.
	channel := holder.Keys(name).Released
	handOff(t, ctx, holder2, waiter, failed, name, 30*time.Second, func() {
		master, err := rc.MasterFor(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		for addr, n := range shardSubscribers(t, rc, channel) {
			if (addr == master.Addr) != (n > 0) {
				t.Errorf("after the failover %s has %d shard subscribers of %s (the master is %s)", addr, n, channel, master.Addr)
			}
		}
	})
}
