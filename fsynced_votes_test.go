package redlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// everysec is the AOF most deployments run: fsynced about once a second,
// not before each reply.
var everysec = []string{"--appendonly", "yes", "--appendfsync", "everysec"}

// fsyncedOptions are the options of a client whose everysec nodes count as
// persistent through WAITAOF: a node timeout that leaves room for the
// next fsync (up to a second away), and a grace that a node which is not
// persistent surely sits out while the test looks.
func fsyncedOptions() redlock.Options {
	return redlock.Options{TTL: 30 * time.Second, NodeTimeout: 3 * time.Second, RestartGrace: 30 * time.Second, FsyncedVotes: true}
}

// fsyncTrustedServer is the server build whose WAITAOF FsyncedVotes trusts
// (Redis 8.0+), for the tests of what it does there. Valkey 9.1.2 confirms
// WAITAOF 1 0 before its fsync (TestBreakAOFPowerLossAfterAnUnfsyncedConfirmation),
// so there FsyncedVotes keeps the rule without it, as on Redis 7.0
// (TestAnFsyncedVoteSurvivesAKill9WithoutGrace checks both).
func fsyncTrustedServer() string { return redistest.Redis86 }

// With FsyncedVotes, a vote on a Redis 8.6 node with
// appendfsync everysec counts only once WAITAOF confirmed the node's fsync
// of it, so the node keeps it across a kill -9 and a restart, and needs no
// restart grace: right after the restart of every node, Y is refused X's
// lock by the nodes themselves (ErrLocked, X's key is there), and takes
// another lock at once. On Redis 7.0 (REDLOCK_TEST_SERVER unset or
// redis-7.0), which has no WAITAOF, and on Valkey 9.1 (valkey-9.1), whose
// WAITAOF may confirm before it fsyncs, everysec is not persistence: the
// restarted nodes sit out the grace, and Y is refused both.
func TestAnFsyncedVoteSurvivesAKill9WithoutGrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := redistest.StartT(t, 3, redistest.Options{Args: everysec})
	build := cl.Servers[0].Build()
	waitAOF := build.Name == redistest.Redis86 // a WAITAOF that FsyncedVotes trusts
	t.Logf("server: %s", build)
	xOpts := fsyncedOptions()
	if !waitAOF {
		// Fresh nodes that are not persistent sit out the grace: X,
		// the holder, turns it off to take its lock at all. Y's view
		// is what the test judges.
		xOpts.RestartGrace = redlock.NoRestartGrace
	}
	x, err := redlock.New(cl.Clients(), xOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Close() })
	y := newClient(t, cl, fsyncedOptions())
	for i, info := range y.Nodes(ctx) {
		if info.Err != nil {
			t.Fatalf("Y, node %d: %v", i, info.Err)
		}
		if waitAOF && !info.Voting {
			// Fresh servers, met for the first time: only persistence
			// lets them vote at once.
			t.Fatalf("Y, node %d on %s with everysec and WAITAOF: not voting (%s), want it persistent", i, build.Name, info.SitOutReason)
		}
	}
	const name = "job"
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("X: %v", err)
	}
	// The vote counted: kill -9 every node at once, before anything else
	// runs, and start each again on its own data.
	for _, s := range cl.Servers {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range cl.Servers {
		if err := s.Restart(true); err != nil {
			t.Fatal(err)
		}
	}
	kept := 0
	for _, s := range cl.Servers {
		if n, err := s.Client().Exists(ctx, x.Keys(name).Lock).Result(); err == nil && n == 1 {
			kept++
		}
	}
	t.Logf("X's key survived on %d of 3 nodes", kept)
	_, errSame := y.TryAcquire(ctx, name)
	other, errOther := y.TryAcquire(ctx, "another")
	if errSame == nil {
		t.Errorf("BROKEN: Y took %q after a kill -9 and restart of every node, with %v of X's validity left", name, time.Until(held.Deadline()).Round(time.Millisecond))
	}
	if !time.Now().Before(held.Deadline()) {
		t.Fatalf("the checks ran past X's validity (a machine too slow to judge): Y's refusal %v proves nothing", errSame)
	}
	if waitAOF {
		if kept < 2 {
			t.Errorf("X's fsynced key survived on %d nodes, want every node of its quorum", kept)
		}
		if !errors.Is(errSame, redlock.ErrLocked) || errors.Is(errSame, redlock.ErrNodeSittingOut) {
			t.Errorf("Y on %q: %v, want it refused by the nodes that kept X's key (ErrLocked), none sitting out", name, errSame)
		}
		if errOther != nil {
			t.Errorf("Y on another lock: %v, want it taken at once: persistent nodes sit out no grace", errOther)
		}
	} else {
		if !errors.Is(errSame, redlock.ErrNodeSittingOut) {
			t.Errorf("Y on %q: %v, want the restarted nodes sitting out the grace", name, errSame)
		}
		if errOther == nil || !errors.Is(errOther, redlock.ErrNodeSittingOut) {
			t.Errorf("Y on another lock: %v, want the nodes sitting out the grace (no WAITAOF that FsyncedVotes trusts: everysec is not persistence)", errOther)
		}
	}
	if other != nil {
		_ = other.Release(ctx)
	}
	_ = held.Release(ctx)
}

// A node counted persistent through WAITAOF whose AOF is then switched off
// and on again at run time (CONFIG SET), with a first rewrite that lasts,
// logs its writes meanwhile to a file that no manifest names, and WAITAOF
// confirms no fsync until the rewrite ends. X, whose last probe (under a
// second old, so not read again) saw the node persistent, votes there: the
// vote does not count (ErrVoteNotDurable, naming the node), and X learns
// the node's persistence again. It is no longer persistent, so once X
// holds the lock and the nodes crash and restart, X sees them sit out the
// grace, as does Y, which probed during the rewrite. Were the vote
// counted, X would hold a lock whose keys the crash loses: the BROKEN
// branch says so. It needs a WAITAOF that FsyncedVotes trusts: it runs
// on Redis 8.6 whatever the run's server.
func TestAVoteWhoseFsyncIsNotConfirmedDoesNotCount(t *testing.T) {
	server := fsyncTrustedServer()
	// The switch must land between X's probe and its vote, which a probe
	// older than a second would read again: on a machine too loaded for
	// that, the run says so and starts over, at most three times.
	for range 3 {
		if fsyncNotConfirmed(t, server) {
			return
		}
	}
	t.Fatal("three runs in which X's probe aged past a second before its vote: the machine is too loaded to judge")
}

// fsyncNotConfirmed runs TestAVoteWhoseFsyncIsNotConfirmedDoesNotCount once
// on fresh servers; false if X probed the nodes again before its vote.
func fsyncNotConfirmed(t *testing.T, server string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cl := redistest.StartT(t, 3, redistest.Options{Server: server, Args: everysec})
	defer func() {
		for _, s := range cl.Servers[:2] {
			_ = s.Kill() // the rewrite's child sleeps between keys: do not wait for it at Stop
		}
	}()
	t.Logf("server: %s", cl.Servers[0].Build())
	opts := fsyncedOptions()
	opts.TTL = 20 * time.Second
	x, y := newClient(t, cl, opts), newClient(t, cl, opts)
	var probed time.Time // just before X's last probe
	// X probes twice: its first contact waits for the barrier's fsync
	// (up to a second), the second one reads the nodes only.
	for _, c := range []*redlock.Client{y, x, x} {
		probed = time.Now()
		for i, info := range c.Nodes(ctx) {
			if info.Err != nil || !info.Voting {
				t.Fatalf("node %d: %+v, want it voting (persistent: everysec with WAITAOF)", i, info)
			}
		}
	}
	for _, s := range cl.Servers[:2] {
		aofWaitingForRewrite(ctx, t, s)
	}
	const name = "job"
	crash := func() {
		t.Helper()
		for _, s := range cl.Servers[:2] {
			if err := s.Restart(true); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A guard under a second old is not read again before a vote
	// (guardMaxAge): well within it, X votes on what its probe saw.
	// Past it, X may have seen the rewrite, which is not the case under
	// test. (The time only picks the case; nothing is asserted on it.)
	if age := time.Since(probed); age > 700*time.Millisecond {
		t.Logf("X's probe is %v old at its vote, and may be read again: starting over", age)
		return false
	}
	first, err := x.TryAcquire(ctx, name)
	if err == nil {
		crash()
		l, err := y.TryAcquire(ctx, name)
		if err == nil {
			_ = l.Release(ctx)
		}
		t.Fatalf("BROKEN: X took %q with votes whose fsync was not confirmed on nodes it counts as persistent; after their crash Y, whose last probe saw them persistent, got %v with %v of X's validity left", name, err, time.Until(first.Deadline()).Round(time.Millisecond))
	}
	if !errors.Is(err, redlock.ErrVoteNotDurable) {
		t.Fatalf("X: %v, want ErrVoteNotDurable", err)
	}
	if !strings.Contains(err.Error(), cl.Servers[0].Addr) && !strings.Contains(err.Error(), cl.Servers[1].Addr) {
		t.Errorf("X: %v, want the node whose fsync was not confirmed named", err)
	}
	t.Logf("X refused: %v", err)
	// Y probes during the rewrite, as the limit of docs/PROTOCOL.md §11
	// asks: a client that never looks cannot tell.
	for i, info := range y.Nodes(ctx) {
		if info.Err != nil {
			t.Fatalf("Y, node %d during the rewrite: %v", i, info.Err)
		}
	}
	// X learnt that nodes 1 and 2 are not persistent now. Its votes
	// there still wait for a WAITAOF, and count only once it confirms
	// the fsync: another client may count the nodes as persistent (Y
	// did until it looked again), and would excuse their restart. The
	// first rewrite confirms nothing until it ends, so X takes no lock:
	// availability, never safety.
	if l, err := x.TryAcquire(ctx, name); err == nil {
		_ = l.Release(ctx)
		t.Fatalf("BROKEN: X, which counts the rewriting nodes as not persistent, took %q with votes there whose fsync was not confirmed", name)
	} else if !errors.Is(err, redlock.ErrVoteNotDurable) {
		t.Fatalf("X, once it knows the nodes are not persistent: %v, want ErrVoteNotDurable: a vote counts only with its fsync confirmed", err)
	}
	crash()
	if l, err := y.TryAcquire(ctx, name); err == nil {
		t.Errorf("BROKEN: Y took %q right after the crash of nodes it saw rewriting", name)
		_ = l.Release(ctx)
	} else if !errors.Is(err, redlock.ErrNodeSittingOut) {
		t.Errorf("Y: %v, want the crashed nodes sitting out", err)
	}
	for i, info := range x.Nodes(ctx)[:2] {
		if info.Voting {
			t.Errorf("X, node %d after the crash: voting, want it sitting out the grace (it was not persistent when it crashed)", i)
		}
	}
	return true
}

// appendfsync no is not persistence, WAITAOF or not: the server leaves the
// fsync to the kernel, and its WAITAOF confirms none (it answers 0 at its
// timeout). So with FsyncedVotes fresh such servers sit out the grace.
// Votes there still wait for a WAITAOF and do not count without it: a
// client whose last probe saw the server with everysec (appendfsync no
// set since with CONFIG SET, which a restart undoes) counts it as
// persistent and would excuse its restart, so no client may count a vote
// there that is not fsynced. With FsyncedVotes such a node takes no lock
// (ErrVoteNotDurable): availability, never safety. It needs a WAITAOF
// that FsyncedVotes trusts: it runs on Redis 8.6 whatever the run's
// server.
func TestAppendfsyncNoIsNotPersistenceEvenWithWAITAOF(t *testing.T) {
	server := fsyncTrustedServer()
	cl := redistest.StartT(t, 3, redistest.Options{Server: server, Args: []string{"--appendonly", "yes", "--appendfsync", "no"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	y := newClient(t, cl, fsyncedOptions())
	for i, info := range y.Nodes(ctx) {
		if info.Err != nil {
			t.Fatalf("node %d: %v", i, info.Err)
		}
		if info.Voting {
			t.Errorf("node %d (appendfsync no, just started): voting, want it sitting out the grace: it is not persistent", i)
		}
	}
	opts := fsyncedOptions()
	opts.RestartGrace = redlock.NoRestartGrace // to take a lock on servers that just started
	x := newClient(t, cl, opts)
	l, err := x.TryAcquire(ctx, "job")
	if err == nil {
		_ = l.Release(ctx)
		t.Fatal("BROKEN: X took a lock with votes whose fsync no server confirmed (appendfsync no)")
	}
	if !errors.Is(err, redlock.ErrVoteNotDurable) {
		t.Errorf("X: %v, want ErrVoteNotDurable", err)
	}
	for _, s := range cl.Servers {
		stats, err := s.Client().Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stats, "cmdstat_waitaof:") {
			t.Errorf("%s: the vote waited for no WAITAOF", s.Addr)
		}
	}
}

// Every primitive's vote goes through the one durable write path, so on
// nodes counted as persistent through WAITAOF (FsyncedVotes, everysec)
// each acquire is followed by a WAITAOF on at least a quorum of them: the
// mutex, the semaphore, the read and the write side of a read-write lock,
// the fair lock, and a multi-lock (batched scripts). The servers count
// the calls (INFO commandstats, reset before each acquire); the client
// met the nodes before, so no probe sends one of its own. It needs
// a WAITAOF that FsyncedVotes trusts: it runs on Redis 8.6 whatever the
// run's server.
func TestFsyncedVotesOfEveryPrimitive(t *testing.T) {
	server := fsyncTrustedServer()
	cl := redistest.StartT(t, 3, redistest.Options{Server: server, Args: everysec})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := newClient(t, cl, fsyncedOptions())
	sem, err := c.Semaphore("permits", 2)
	if err != nil {
		t.Fatal(err)
	}
	try := []struct {
		what    string
		acquire func() (func(context.Context) error, error)
	}{
		{"mutex", func() (func(context.Context) error, error) {
			l, err := c.TryAcquire(ctx, "mutex")
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}},
		{"semaphore", func() (func(context.Context) error, error) {
			p, err := sem.TryAcquire(ctx)
			if err != nil {
				return nil, err
			}
			return p.Release, nil
		}},
		{"reader", func() (func(context.Context) error, error) {
			l, err := c.RWLock("rw").TryRLock(ctx)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}},
		{"writer", func() (func(context.Context) error, error) {
			l, err := c.RWLock("rw").TryLock(ctx)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}},
		{"fair", func() (func(context.Context) error, error) {
			l, err := c.TryAcquire(ctx, "fair", redlock.WithFairness())
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}},
		{"multilock", func() (func(context.Context) error, error) {
			m, err := c.TryAcquireMulti(ctx, []string{"a", "b", "c"})
			if err != nil {
				return nil, err
			}
			return m.Release, nil
		}},
	}
	// First contact: the probes' barriers, and the TTL register raised.
	if release, err := try[0].acquire(); err != nil {
		t.Fatalf("warm-up: %v", err)
	} else if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	waitAOFCalls := func() []int {
		t.Helper()
		calls := make([]int, len(cl.Servers))
		for i, s := range cl.Servers {
			stats, err := s.Client().Info(ctx, "commandstats").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(stats, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_waitaof:calls="); ok {
					calls[i], _ = strconv.Atoi(strings.SplitN(v, ",", 2)[0])
				}
			}
		}
		return calls
	}
	for _, tc := range try {
		for _, s := range cl.Servers {
			if err := s.Client().ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		release, err := tc.acquire()
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		t.Logf("%s: taken in %v", tc.what, time.Since(start).Round(time.Millisecond))
		calls := waitAOFCalls()
		if err := release(ctx); err != nil {
			t.Fatal(err)
		}
		waited := 0
		for _, n := range calls {
			if n > 0 {
				waited++
			}
		}
		if waited < 2 {
			t.Errorf("%s: WAITAOF calls per node %v, want one on at least a quorum (2 of 3): its votes counted without a confirmed fsync", tc.what, calls)
		}
	}
}

// FsyncedVotes on Cluster nodes: each master is judged on its own, and a
// vote waits for the WAITAOF of the master that serves its slot. Three
// nodes, each a Cluster of two masters with appendfsync everysec. X takes a
// lock in the second master's slots; that master is killed with SIGKILL in
// every cluster and restarted on its data. Y, which met the nodes before,
// is refused by the restarted masters themselves (X's key is there) and
// takes another lock in the same master's slots at once: no grace. It
// needs a WAITAOF that FsyncedVotes trusts: it runs on Redis 8.6 whatever
// the run's server.
func TestFsyncedVotesOnClusterNodesSurviveAKill9OfTheSlotsMaster(t *testing.T) {
	server := fsyncTrustedServer()
	rcs := redistest.StartRedisClustersT(t, 3, 2, 0, redistest.Options{Server: server, Args: everysec})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	x, err := redlock.New(redistest.ClusterClientsT(t, rcs), fsyncedOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	y, err := redlock.New(redistest.ClusterClientsT(t, rcs), fsyncedOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	for _, c := range []*redlock.Client{x, y} {
		for i, info := range c.Nodes(ctx) {
			if info.Err != nil || !info.Voting {
				t.Fatalf("node %d: %+v, want it voting (fresh masters, persistent: everysec with WAITAOF)", i, info)
			}
		}
	}
	name := nameInSlots(x, "job", 8192, 16383) // the second master's
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("X: %v", err)
	}
	defer held.Release(context.Background())
	errs := make([]error, len(rcs))
	var wg sync.WaitGroup
	for i, rc := range rcs {
		wg.Go(func() { _, errs[i] = rc.RestartMaster(ctx, x.Keys(name).Slot) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, rc := range rcs {
		if n, err := rc.Shards[1].Master.Client().Exists(ctx, x.Keys(name).Lock).Result(); err == nil && n == 1 {
			kept++
		}
	}
	if kept < x.Quorum() {
		t.Errorf("X's fsynced key survived on %d restarted masters, want at least a quorum (%d)", kept, x.Quorum())
	}
	_, errSame := y.TryAcquire(ctx, name)
	other, errOther := y.TryAcquire(ctx, nameInSlots(y, "other", 8192, 16383))
	if !time.Now().Before(held.Deadline()) {
		t.Fatalf("the checks ran past X's validity (a machine too slow to judge)")
	}
	if errSame == nil {
		t.Errorf("BROKEN: Y took %q after a kill -9 and restart of its slot's master on every node", name)
	} else if !errors.Is(errSame, redlock.ErrLocked) || errors.Is(errSame, redlock.ErrNodeSittingOut) {
		t.Errorf("Y on %q: %v, want it refused by the masters that kept X's key (ErrLocked), none sitting out", name, errSame)
	}
	if errOther != nil {
		t.Errorf("Y on another lock of the restarted master's slots: %v, want it taken at once: persistent masters sit out no grace", errOther)
	} else {
		_ = other.Release(ctx)
	}
}

// On a Cluster node the TTL register's key (no hash tag) sits on its own
// master, most often not the one that serves the lock's slot: the WAITAOF
// behind the vote does not cover the register's raise, as it does on a
// node that is one server (PROTOCOL §13, rule 2). A power loss of the
// register's master before its fsync, excused as a persistent restart,
// would take the register back to a smaller TTL, and a fresh client would
// learn a grace too short from it. So with FsyncedVotes the raise a
// Cluster node's vote relies on waits for its own master's WAITAOF. The
// test takes a lock in the second master's slots on fresh clusters whose
// register is on the first master, and counts the WAITAOF calls the
// register's master got from the acquire (INFO commandstats, reset after
// the client's first probe, whose barrier sends one of its own). It runs
// on Redis 8.6 whatever the run's server.
func TestFsyncedVotesOnClusterNodesWaitForTheRegistersFsync(t *testing.T) {
	rcs := redistest.StartRedisClustersT(t, 3, 2, 0, redistest.Options{Server: fsyncTrustedServer(), Args: everysec})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	x, err := redlock.New(redistest.ClusterClientsT(t, rcs), fsyncedOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	for i, info := range x.Nodes(ctx) {
		if info.Err != nil || !info.Voting {
			t.Fatalf("node %d: %+v, want it voting (fresh masters, persistent: everysec with WAITAOF)", i, info)
		}
	}
	for _, rc := range rcs {
		for _, sh := range rc.Shards {
			if err := sh.Master.Client().ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	name := nameInSlots(x, "job", 8192, 16383) // the second master's
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("X: %v", err)
	}
	defer held.Release(context.Background())
	waited := 0
	for i, rc := range rcs {
		reg := rc.Shards[0].Master.Client()
		keys, err := reg.Keys(ctx, "*ttl-in-use").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("node %d: the register is not on the first master (%v, %v)", i, keys, err)
		}
		stats, err := reg.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stats, "cmdstat_waitaof:") {
			waited++
		}
	}
	if waited < x.Quorum() {
		t.Errorf("BROKEN: the register's master got a WAITAOF behind the raise on %d nodes, want at least a quorum (%d): the votes rely on a raise no fsync confirmed", waited, x.Quorum())
	}
}
