package redlock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// Review of 75fdd08: the rule "a master that stops migrating a slot it
// still serves starts an epoch" is read only by the probe of a node that is
// a whole Redis Cluster (a *redis.ClusterClient, probe.go probeCluster).
// A node that is one master of a Cluster, given as a plain client (GUARANTEES
// "Nodes in Redis Cluster mode": "one node may be a cluster master"), is
// probed by cluster.go's probeCluster, which reads CLUSTER NODES for the
// served slots only: neither claims nor migrating reach nextEpoch, so the
// same abort (the lock's keys MIGRATEd to the importing master, then CLUSTER
// SETSLOT STABLE) goes unseen by a client that probed while the slot was
// open. DESIGN §7: "Keep this rule in one place in the code, so that a new
// kind of node cannot go around it."
//
// Schedule: nodes = a standalone server and the slot owner M of two
// 2-master Clusters, each given as a plain client. X holds a lock whose slot
// M serves. On both Clusters: SETSLOT IMPORTING on N, MIGRATING on M, MIGRATE
// every key of the slot to N. Client "before" probes (a lock in another slot
// of M) while the slot is open. SETSLOT STABLE on N and M. After the guard's
// one-second window, "before" tries X's lock.
func TestReviewPlainClusterMasterMigrationAbortedGivesNoSecondHolder(t *testing.T) {
	done := make(chan struct{})
	var rcs []*redistest.RedisCluster
	go func() {
		defer close(done)
		rcs = redistest.StartRedisClustersT(t, 2, 2, 0, redistest.Options{Persistence: true})
	}()
	plain := redistest.StartT(t, 1, redistest.Options{Persistence: true})
	<-done
	if rcs == nil {
		t.FailNow()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nodes := func() []redis.UniversalClient {
		out := []redis.UniversalClient{plain.Servers[0].Client()}
		for _, rc := range rcs {
			c := redis.NewClient(&redis.Options{Addr: rc.Shards[0].Master.Addr})
			t.Cleanup(func() { _ = c.Close() })
			out = append(out, c)
		}
		return out
	}
	opts := redlock.Options{TTL: 20 * time.Second}
	x := newClientOn(t, nodes(), opts)
	before := newClientOn(t, nodes(), opts)
	// In the first master's slots (0-8191, the register's 8189 among them),
	// not its slot 0.
	name := nameInSlots(x, "job", 100, 8000)
	slot := x.Keys(name).Slot
	warm := name
	for i := 0; x.Keys(warm).Slot == slot || x.Keys(warm).Slot < 100 || x.Keys(warm).Slot > 8000; i++ {
		warm = nameInSlots(x, "warm"+string(rune('a'+i)), 100, 8000)
	}
	held := hold(t, ctx, x.TryAcquire, name)
	ms := []*redistest.Server{plain.Servers[0]}
	for _, rc := range rcs {
		ms = append(ms, rc.Shards[0].Master)
	}
	awaitKeyOnEvery(t, ctx, ms, x.Keys(name).Lock)
	for _, rc := range rcs {
		migrateKeysOpen(t, ctx, slot, rc.Shards[0].Master, rc.Shards[1].Master)
	}
	// "before" probes while the slot is open.
	time.Sleep(1100 * time.Millisecond)
	takeAndRelease(t, ctx, before.TryAcquire, warm)
	for _, rc := range rcs {
		for _, s := range []*redistest.Server{rc.Shards[1].Master, rc.Shards[0].Master} {
			if err := s.Client().Do(ctx, "cluster", "setslot", slot, "stable").Err(); err != nil {
				t.Fatal(err)
			}
		}
		if keys, err := rc.Shards[0].Master.Client().ClusterGetKeysInSlot(ctx, slot, 100).Result(); err != nil || slices.Contains(keys, x.Keys(name).Lock) {
			t.Fatalf("X's key is back on the owner %s after the abort (%v, %v): nothing lost", rc.Shards[0].Master.Addr, keys, err)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	refusedWhileHeld(t, ctx, held, name, refusal{after: " after the migration of its slot was aborted on the plain cluster-mode masters, its keys left on the importing master", tries: 3, margin: 5 * time.Second,
		is: sittingOut(true, "stopped migrating"), want: "no quorum, the masters that stopped migrating the lock's slot sitting out"},
		contender{"a client that used the nodes before (and probed while the slot was open)", before})
}
