package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

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
