package redlock_test

import (
	"context"
	"errors"
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
// needs WAITAOF: on a Redis 7.0 run it starts Redis 8.6.
func TestFsyncedVotesOnClusterNodesSurviveAKill9OfTheSlotsMaster(t *testing.T) {
	server := redistest.SelectedServer()
	if server == redistest.Redis70 {
		server = redistest.Redis86 // WAITAOF is the subject
	}
	rcs := startClusters(t, 3, 2, 0, redistest.Options{Server: server, Args: everysec})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	x, err := redlock.New(clusterClients(t, rcs), fsyncedOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	y, err := redlock.New(clusterClients(t, rcs), fsyncedOptions())
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
