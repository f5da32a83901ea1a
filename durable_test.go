package redlock_test

// Durable votes (Options.DurableVotes): a vote counts only once every
// replica that could be promoted in its master's place acknowledged it.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// waitRoom is the node timeout of the tests that expect a WAIT to time
// out: a third of it goes to the WAIT, which the server answers up to
// 1/hz (100ms) late, and a loaded machine (-race, other tests) must
// still see the answer, not the deadline: the vote then fails as not
// durable rather than as unanswered (both leave it uncounted). The votes
// that must count need the room too: at a load average of 8, replicas
// took more than the 333ms of a 1s node timeout to acknowledge.
const waitRoom = 2 * time.Second

// startReplicated starts n masters with one replica each, in sync.
func startReplicated(t *testing.T, n int) (*redistest.Cluster, []*redistest.Server) {
	t.Helper()
	return redistest.StartReplicatedT(t, n, redistest.Options{})
}

// A master with a replica fails over as soon as someone promotes the
// replica: refused like a Sentinel or Cluster node unless votes are durable
// or the caller accepts failovers.
func TestMasterWithReplicaIsRefusedUnlessVotesAreDurable(t *testing.T) {
	masters, _ := startReplicated(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	refused := newClient(t, masters, redlock.Options{TTL: 2 * time.Second})
	err := refused.Verify(ctx)
	if !errors.Is(err, redlock.ErrFailoverNode) || !errors.Is(err, redlock.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "master with 1 replicas") || !strings.Contains(err.Error(), "DurableVotes") {
		t.Fatalf("masters with a replica, no option: want ErrFailoverNode naming the replica and the DurableVotes hint, got %v", err)
	}
	if _, err := refused.TryAcquire(ctx, "refused"); !errors.Is(err, redlock.ErrFailoverNode) {
		t.Fatalf("acquire on refused nodes: want ErrFailoverNode, got %v", err)
	}

	for _, opts := range []redlock.Options{{TTL: 2 * time.Second, DurableVotes: true}, {TTL: 2 * time.Second, AllowFailoverNodes: true}} {
		c := newClient(t, masters, opts)
		if err := c.Verify(ctx); err != nil {
			t.Fatalf("DurableVotes %v, AllowFailoverNodes %v: %v", opts.DurableVotes, opts.AllowFailoverNodes, err)
		}
		l, err := c.TryAcquire(ctx, "accepted")
		if err != nil {
			t.Fatalf("DurableVotes %v, AllowFailoverNodes %v: acquire: %v", opts.DurableVotes, opts.AllowFailoverNodes, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A write the replica never received is not a durable vote: with the
// replication of a majority of the masters cut, the acquire fails with
// ErrVoteNotDurable from those nodes, and leaves no key behind.
func TestDurableVoteNeedsTheReplicasAcknowledgement(t *testing.T) {
	masters, replicas := startReplicated(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t, masters, redlock.Options{TTL: 5 * time.Second, NodeTimeout: waitRoom, DurableVotes: true})
	l, err := c.TryAcquire(ctx, "durable")
	if err != nil {
		t.Fatalf("replication works: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range replicas[:2] {
		if err := redistest.CutReplication(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.TryAcquire(ctx, "durable")
	if !errors.Is(err, redlock.ErrVoteNotDurable) || errors.Is(err, redlock.ErrFailoverNode) {
		t.Fatalf("replication of 2 of 3 masters cut: want the acquire to fail with ErrVoteNotDurable, got %v", err)
	}
	for _, a := range masters.Addrs()[:2] {
		if !strings.Contains(err.Error(), a) {
			t.Errorf("the error does not name the node %s whose vote was not durable: %v", a, err)
		}
	}
	eventually(t, 5*time.Second, "the attempt's sweep deletes the keys of the votes that did not count", func() bool {
		return len(keysLeft(t, masters, c, "durable")) == 0
	})
}

// An extension is a vote too: one that a majority of the replicas did not
// acknowledge does not count, and the lock keeps its old deadline.
func TestDurableExtendThatIsNotAcknowledgedDoesNotCount(t *testing.T) {
	masters, replicas := startReplicated(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t, masters, redlock.Options{TTL: 5 * time.Second, NodeTimeout: waitRoom, DurableVotes: true})
	l, err := c.TryAcquire(ctx, "extended")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx); err != nil {
		t.Fatalf("replication works: extend: %v", err)
	}
	deadline := l.Deadline()
	for _, r := range replicas[:2] {
		if err := redistest.CutReplication(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	err = l.Extend(ctx)
	if !errors.Is(err, redlock.ErrVoteNotDurable) {
		t.Fatalf("replication of 2 of 3 masters cut: want the extension to fail with ErrVoteNotDurable, got %v", err)
	}
	if !l.Deadline().Equal(deadline) {
		t.Fatalf("an extension that was not durable moved the deadline from %v to %v", deadline, l.Deadline())
	}
}

// The renewal scheduler's extensions (batched per node) are votes too: with
// the replication of a majority cut during an auto-extended hold, the
// renewals do not count, and the lock is lost by its last durable deadline.
func TestDurableAutoExtendStopsAtTheLastDurableDeadline(t *testing.T) {
	masters, replicas := startReplicated(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = 5 * time.Second // above twice waitRoom
	c := newClient(t, masters, redlock.Options{TTL: ttl, NodeTimeout: waitRoom, DurableVotes: true})
	l := hold(t, ctx, c.TryAcquire, "renewed", redlock.WithAutoExtend())
	for _, r := range replicas[:2] {
		if err := redistest.CutReplication(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// A renewal that counted was sent before the cut was complete: its
	// deadline is at most a TTL from now.
	bound := time.Now().Add(ttl)
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the lock was still held 30s after replication was cut: renewals that were not durable counted")
	}
	if !errors.Is(l.Err(), redlock.ErrLockLost) {
		t.Fatalf("the lock ended with %v, want ErrLockLost", l.Err())
	}
	if l.Deadline().After(bound) {
		t.Fatalf("a renewal sent after replication was cut moved the deadline to %v, past %v", l.Deadline(), bound)
	}
}

// The semaphore, the read-write lock and the fair lock vote through their
// own scripts: each waits for the replicas as the mutex does.
func TestDurableVotesOfEveryPrimitive(t *testing.T) {
	masters, replicas := startReplicated(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t, masters, redlock.Options{TTL: 5 * time.Second, NodeTimeout: waitRoom, DurableVotes: true})
	sem, err := c.Semaphore("permits", 2)
	if err != nil {
		t.Fatal(err)
	}
	try := map[string]func() (func(context.Context) error, error){
		"semaphore": func() (func(context.Context) error, error) {
			p, err := sem.TryAcquire(ctx)
			if err != nil {
				return nil, err
			}
			return p.Release, nil
		},
		"reader": func() (func(context.Context) error, error) {
			l, err := c.RWLock("rw").TryRLock(ctx)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		},
		"writer": func() (func(context.Context) error, error) {
			l, err := c.RWLock("rw").TryLock(ctx)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		},
		"fair": func() (func(context.Context) error, error) {
			l, err := c.TryAcquire(ctx, "fair", redlock.WithFairness())
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		},
	}
	for what, acquire := range try {
		release, err := acquire()
		if err != nil {
			t.Fatalf("%s, replication works: %v", what, err)
		}
		if err := release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range replicas[:2] {
		if err := redistest.CutReplication(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for what, acquire := range try {
		release, err := acquire()
		if err == nil {
			_ = release(ctx)
		}
		if !errors.Is(err, redlock.ErrVoteNotDurable) {
			t.Errorf("%s, replication of 2 of 3 masters cut: want ErrVoteNotDurable, got %v", what, err)
		}
	}
}

// heldIfDurable takes the lock name with c, released at cleanup. A refusal
// must be ErrVoteNotDurable (why says why it must): then it returns nil,
// and the test has shown what it wanted.
func heldIfDurable(t *testing.T, ctx context.Context, c *redlock.Client, name, why string) *redlock.Lock {
	t.Helper()
	l, err := c.TryAcquire(ctx, name)
	if err != nil {
		if !errors.Is(err, redlock.ErrVoteNotDurable) {
			t.Fatalf("%s: want ErrVoteNotDurable, got %v", why, err)
		}
		return nil
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// failoverNodes are 3 nodes: the Sentinel deployments' masters (through
// redis.NewFailoverClient, a client of its own each call) and plain.
func failoverNodes(t *testing.T, ss []*redistest.Sentinels, plain *redistest.Cluster) []redis.UniversalClient {
	t.Helper()
	var nodes []redis.UniversalClient
	for _, s := range ss {
		fc := s.FailoverClient()
		t.Cleanup(func() { _ = fc.Close() })
		nodes = append(nodes, fc)
	}
	return append(nodes, plain.Clients()...)
}

func newFailoverClient(t *testing.T, ss []*redistest.Sentinels, plain *redistest.Cluster, opts redlock.Options) *redlock.Client {
	t.Helper()
	return newClientOn(t, failoverNodes(t, ss, plain), opts)
}

// The failing case of a failover is a vote counted on a write its replica
// never received. With the replication of a majority of the nodes cut
// before the acquire: with durable votes the acquire fails and leaves no
// key; without them (and without the restart grace, which would make the
// promoted replicas sit out) it succeeds, the masters fail over to
// replicas that lack the key, and a second client takes the lock while the
// first holds it: unsafe by design, so the mechanism is what makes the
// difference.
func TestDurableVotesAgainstAMajorityFailoverOfUnreplicatedWrites(t *testing.T) {
	ss := redistest.StartSentinelsT(t, 2, 1, redistest.Options{})
	plain := redistest.StartT(t, 1, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const name = "failover"
	durable := newFailoverClient(t, ss, plain, redlock.Options{TTL: 10 * time.Second, NodeTimeout: waitRoom, RestartGrace: redlock.NoRestartGrace, DurableVotes: true})
	// The client meets the masters with their replicas connected: a
	// replica it never saw connected is not counted (PROTOCOL §11).
	if err := durable.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if err := redistest.CutReplication(ctx, s.Replicas[0]); err != nil {
			t.Fatal(err)
		}
	}
	_, err := durable.TryAcquire(ctx, name)
	if !errors.Is(err, redlock.ErrVoteNotDurable) || !errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("durable votes, replication of 2 of 3 nodes cut: want no quorum with ErrVoteNotDurable, got %v", err)
	}
	var masters []*redistest.Server
	for _, s := range ss {
		masters = append(masters, s.Master)
	}
	masters = append(masters, plain.Servers...)
	key := durable.Keys(name).Lock
	eventually(t, 5*time.Second, "the sweep deletes the keys of the votes that did not count", func() bool {
		for _, m := range masters {
			if n, err := m.Client().Exists(ctx, key).Result(); err != nil || n > 0 {
				return false
			}
		}
		return true
	})

	opts := redlock.Options{TTL: 10 * time.Second, RestartGrace: redlock.NoRestartGrace, AllowFailoverNodes: true}
	x := newFailoverClient(t, ss, plain, opts)
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("votes that are not durable count at once: %v", err)
	}
	for _, s := range ss {
		if _, err := s.Failover(ctx); err != nil {
			t.Fatal(err)
		}
	}
	y := newFailoverClient(t, ss, plain, opts)
	var second *redlock.Lock
	eventually(t, 5*time.Second, "without durable votes, a second client takes the lock once the failovers lost X's keys", func() bool {
		second, err = y.TryAcquire(ctx, name)
		return err == nil
	})
	if left := time.Until(held.Deadline()); left <= 0 {
		t.Fatalf("X's validity ran out before the second holder (%v): the test is too slow to tell", left)
	}
	_ = second.Release(ctx)
}

// With durable votes and replication that works, a failover in a majority
// of the nodes during a hold gives no second holder: every promoted
// replica acknowledged X's key before X's vote counted.
func TestDurableVotesSurviveAMajorityFailover(t *testing.T) {
	ss := redistest.StartSentinelsT(t, 2, 1, redistest.Options{})
	plain := redistest.StartT(t, 1, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const name = "failover"
	opts := redlock.Options{TTL: 20 * time.Second, RestartGrace: redlock.NoRestartGrace, DurableVotes: true}
	x := newFailoverClient(t, ss, plain, opts)
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if _, _, err := s.KillMaster(ctx); err != nil {
			t.Fatal(err)
		}
	}
	y := newFailoverClient(t, ss, plain, opts)
	// Refused by the promoted replicas, which have X's key, or for want
	// of a quorum (durable votes: a client that saw a replica behind the
	// node counts it even after the failover took it; or a
	// FailoverClient still finding the new master).
	refusedWhileHeld(t, ctx, held, name, refusal{tries: 3, margin: time.Second,
		is:   func(err error) bool { return errors.Is(err, redlock.ErrLocked) || errors.Is(err, redlock.ErrNoQuorum) },
		want: "the lock held or no quorum",
	}, contender{"the holder's client", x}, contender{"a fresh client", y})
}

// On Cluster nodes a vote waits for the replicas of the master that serves
// its slot, not for an arbitrary master's (a keyless WAIT through the
// ClusterClient): with that master's replication cut in a majority of the
// clusters, its locks fail as not durable while the other master's are
// taken, calls of both masters in one batch included. Once replication
// works again, a durable hold survives the failover of its master in that
// majority.
func TestDurableVotesOnClusterNodesFollowTheSlotsMaster(t *testing.T) {
	rcs := redistest.StartRedisClustersT(t, 3, 2, 1, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := redlock.Options{TTL: 10 * time.Second, NodeTimeout: waitRoom, RestartGrace: redlock.NoRestartGrace, DurableVotes: true}
	c := newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
	takeAndRelease(t, ctx, c.Acquire, "warm-up") // the first contact probes every master
	// Many acquisitions at once, on both masters' slots: their calls share
	// the pipes' writes, each master's with its own WAIT.
	burst := func(what string, want func(i int, err error) error) {
		t.Helper()
		errs := make([]error, 16)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				first := (i % 2) * 8192
				l, err := c.TryAcquire(ctx, nameInSlots(c, fmt.Sprintf("%s-%d", what, i), first, first+8191))
				if err == nil {
					err = errors.Join(l.Release(ctx))
				}
				errs[i] = want(i, err)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
	burst("both", func(i int, err error) error { return err })

	lossy := rcs[:c.Quorum()]
	for _, rc := range lossy {
		if err := redistest.CutReplication(ctx, rc.Shards[1].Replicas[0]); err != nil {
			t.Fatal(err)
		}
	}
	burst("cut", func(i int, err error) error {
		switch {
		case i%2 == 0 && err != nil:
			return fmt.Errorf("lock %d, on the master whose replication works: %w", i, err)
		case i%2 == 1 && !errors.Is(err, redlock.ErrVoteNotDurable):
			return fmt.Errorf("lock %d, on the master whose replication is cut in 2 of 3 clusters: want ErrVoteNotDurable, got %v", i, err)
		}
		return nil
	})

	for _, rc := range lossy {
		if err := redistest.RestoreReplication(ctx, rc.Shards[1].Replicas[0]); err != nil {
			t.Fatal(err)
		}
	}
	name := nameInSlots(c, "held", 8192, 16383)
	held := hold(t, ctx, c.TryAcquire, name)
	failOverEach(t, ctx, lossy, c.Keys(name).Slot, func(p *redistest.Server) error {
		if n, err := p.Client().Exists(ctx, c.Keys(name).Lock).Result(); err != nil || n != 1 {
			return fmt.Errorf("the promoted replica %s lacks X's durable key (%d, %v)", p.Addr, n, err)
		}
		return nil
	})
	fresh := newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
	for _, who := range []*redlock.Client{c, fresh} {
		for range 3 {
			left := time.Until(held.Deadline())
			if left < time.Second {
				t.Fatalf("X's validity ran out before the check (%v left): the test is too slow to tell", left)
			}
			l, err := who.TryAcquire(ctx, name)
			if err == nil {
				_ = l.Release(ctx)
				t.Fatalf("a second client took lock %q while X holds it for %.1fs more", name, left.Seconds())
			}
			if !errors.Is(err, redlock.ErrLocked) && !errors.Is(err, redlock.ErrNoQuorum) {
				t.Fatalf("want the lock held or no quorum, got %v", err)
			}
		}
	}
}

// Schedule 4 of issue 25: every write a vote relies on must be durable,
// the TTL register's raise too, on whichever master of a Cluster holds it.
// C is a Cluster of 3 masters with a replica each; P2 and P3 are plain
// masters. The replica of M_a, the master of the register's slot, has its
// link cut. B (TTL 9s, durable votes) cannot reach P3, and takes "job1"
// (a slot on another master, whose WAIT is durable) on C and P2: its
// vote on C relies on its raise of C's register to 9s, which the replica
// never got. If that vote counts: M_a dies and its replica is promoted
// without the 9s register, P2 restarts empty, and a fresh client A (TTL
// 1s) finds 1s in every register, lets P2 and P3 vote once they are up
// 1s, and takes "job1" on them while B still holds it. The vote must not
// count: the raise waits for M_a's replica as the lock's keys wait for
// their master's.
func TestDurableVoteWaitsForTheRegisterRaiseOnItsOwnMaster(t *testing.T) {
	rc := redistest.StartRedisClusterT(t, 3, 1, redistest.Options{})
	plain := redistest.StartT(t, 2, redistest.Options{})
	p2, p3 := plain.Servers[0], plain.Servers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cc := rc.ClusterClient()
	t.Cleanup(func() { _ = cc.Close() }) // after the held lock's release at cleanup
	regSlot, err := cc.ClusterKeySlot(ctx, redlock.DefaultKeyPrefix+"ttl-in-use").Result()
	if err != nil {
		t.Fatal(err)
	}
	ma, err := rc.MasterFor(ctx, int(regSlot))
	if err != nil {
		t.Fatal(err)
	}
	reps, err := rc.ReplicasOf(ctx, ma)
	if err != nil || len(reps) != 1 {
		t.Fatalf("the register's master %s: replicas %v, %v", ma.Addr, reps, err)
	}
	if err := redistest.CutReplication(ctx, reps[0]); err != nil {
		t.Fatal(err)
	}
	if err := p3.Kill(); err != nil {
		t.Fatal(err)
	}

	nodes := func() []redis.UniversalClient {
		cc := rc.ClusterClient()
		t.Cleanup(func() { _ = cc.Close() })
		return []redis.UniversalClient{cc, p2.Client(), p3.Client()}
	}
	// B's grace is off: the servers were just started, and B is the
	// holder; the grace that matters is A's.
	b := newClientOn(t, nodes(), redlock.Options{TTL: 9 * time.Second, NodeTimeout: waitRoom, RestartGrace: redlock.NoRestartGrace, DurableVotes: true})
	name := ""
	for i := 0; name == ""; i++ {
		cand := nameInSlots(b, fmt.Sprintf("job1-%d", i), 0, 16383)
		if m, err := rc.MasterFor(ctx, b.Keys(cand).Slot); err == nil && m != ma {
			name = cand
		}
	}
	held := heldIfDurable(t, ctx, b, name, "B's vote on C relies on a register raise M_a's replica never got")
	if held == nil {
		return // refused as not durable: what the test wants
	}

	// B's vote counted: play the schedule on, to show what it costs.
	if _, _, err := rc.KillMaster(ctx, int(regSlot)); err != nil {
		t.Fatal(err)
	}
	if err := p2.Restart(false); err != nil {
		t.Fatal(err)
	}
	if err := p3.Restart(false); err != nil {
		t.Fatal(err)
	}
	a := newClientOn(t, nodes(), redlock.Options{TTL: time.Second, DurableVotes: true})
	var last error
	for time.Until(held.Deadline()) > 0 {
		l, err := a.TryAcquire(ctx, name)
		last = err
		if err == nil {
			left := time.Until(held.Deadline())
			_ = l.Release(ctx)
			t.Fatalf("B's vote on C counted on a register raise that M_a's replica never acknowledged: after the failover a fresh client took %q with %.1fs of B's validity left", name, left.Seconds())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("B's vote on C counted on a register raise that M_a's replica never acknowledged (no second holder came before B's validity ran out: %v)", last)
}

// Schedule 5 of issue 25: the replicas a vote waits for are those its
// master has when the vote counts, not those of the last probe. The
// client meets a Cluster node whose one master M has no replica (it
// learns to wait for none); a replica R then joins M and syncs, so that
// M's CLUSTER NODES lists it, and then lags (its link is cut). An acquire
// must not count M's vote: R may be promoted (CLUSTER FAILOVER TAKEOVER)
// without the key.
func TestDurableVoteWaitsForAReplicaThatJoinedAfterTheProbe(t *testing.T) {
	rc := redistest.StartRedisClusterT(t, 1, 0, redistest.Options{})
	m := rc.Shards[0].Master
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cc := rc.ClusterClient()
	t.Cleanup(func() { _ = cc.Close() }) // after the held lock's release at cleanup
	c := newClientOn(t, []redis.UniversalClient{cc}, redlock.Options{TTL: 10 * time.Second, NodeTimeout: waitRoom, RestartGrace: redlock.NoRestartGrace, DurableVotes: true, AllowNoFaultTolerance: true})
	if err := c.Verify(ctx); err != nil { // meets M without a replica
		t.Fatal(err)
	}

	r := redistest.StartT(t, 1, redistest.Options{ClusterMode: true, Args: []string{
		"--cluster-node-timeout", strconv.Itoa(int(redistest.NodeTimeout.Milliseconds())),
		"--cluster-replica-validity-factor", "0"}}).Servers[0]
	mid, err := m.ID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rid, err := r.ID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Client().Do(ctx, "cluster", "meet", "127.0.0.1", m.Port, m.BusPort).Err(); err != nil {
		t.Fatal(err)
	}
	if err := redistest.Await(ctx, "R knows M", 20*time.Second, func(ctx context.Context) (bool, error) {
		nodes, err := r.Client().ClusterNodes(ctx).Result()
		return err == nil && strings.Contains(nodes, mid) && !strings.Contains(nodes, "handshake"), err
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.Client().Do(ctx, "cluster", "replicate", mid).Err(); err != nil {
		t.Fatal(err)
	}
	if err := redistest.Await(ctx, "M lists R as its replica, in sync", 20*time.Second, func(ctx context.Context) (bool, error) {
		nodes, err := m.Client().ClusterNodes(ctx).Result()
		if err != nil || !strings.Contains(nodes, rid+" ") || !strings.Contains(nodes, "slave "+mid) {
			return false, err
		}
		info, err := r.Client().Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up"), err
	}); err != nil {
		t.Fatal(err)
	}
	if err := redistest.CutReplication(ctx, r); err != nil {
		t.Fatal(err)
	}

	const name = "job"
	l := heldIfDurable(t, ctx, c, name, "M's replica R lags")
	if l == nil {
		return // refused as not durable: what the test wants
	}
	if err := r.Client().Do(ctx, "cluster", "failover", "takeover").Err(); err != nil {
		t.Fatal(err)
	}
	if err := redistest.Await(ctx, "R promoted", 20*time.Second, func(ctx context.Context) (bool, error) {
		role, err := r.Client().Do(ctx, "role").Slice()
		return err == nil && len(role) > 0 && role[0] == "master", err
	}); err != nil {
		t.Fatal(err)
	}
	n, err := r.Client().Exists(ctx, c.Keys(name).Lock).Result()
	t.Fatalf("the vote counted without a WAIT for R, which joined after the probe: R, promoted, holds %d copies of the key (%v), with %.1fs of the holder's validity left",
		n, err, time.Until(l.Deadline()).Seconds())
}
