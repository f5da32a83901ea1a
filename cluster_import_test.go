package redlock_test

import (
	"context"
	"errors"
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

// A reshard onto a brand-new master N (met, serving no slot yet): the
// lock's slot is IMPORTING on N and MIGRATING on its owner M, and the
// lock's keys have been MIGRATEd to N, as redis-cli --cluster reshard does
// key by key while the slot is open. go-redis's ForEachMaster lists only
// the masters that serve slots (CLUSTER SLOTS), so the probe never reads
// N, and no epoch covers it; an acquire of the lock is sent to M, which no
// longer has the keys and answers ASK, and the ClusterClient follows it to
// N. N restarts empty (nodes.conf keeps it importing, as an operator's
// tool would set again), in two of three nodes: no key of X's is left
// there, and nothing the client probes shows it.
//
// Another client, one that used the nodes before and a fresh one, is
// still refused while X holds, and not by the guard: N answers TRYAGAIN.
// A server takes a command on a slot it imports (after ASKING) only if
// the command names one key, or finds every key it names (Redis 7.0,
// 8.6, Valkey 9.1 alike). Every script that grants a lock names at least
// two keys (the lock key and its fence register; the readers', queue's,
// slots' keys besides) and can grant only where the lock key is missing,
// so an importing master never grants: it holds every key, the lock's
// too, or answers TRYAGAIN. That rule is what keeps an unprobed importing
// master out of the quorum; a grant from a script of one key would not be
// (the SET below is taken). docs/PROTOCOL.md section 11 says so.
func TestClusterImportingMasterRestartedEmptyGivesNoSecondHolder(t *testing.T) {
	done := make(chan struct{})
	var rcs []*redistest.RedisCluster
	go func() {
		defer close(done)
		rcs = redistest.StartRedisClustersT(t, 2, 1, 0, redistest.Options{Persistence: true})
	}()
	plain := redistest.StartT(t, 1, redistest.Options{Persistence: true})
	// The new masters keep nothing across a restart but nodes.conf.
	news := redistest.StartT(t, 2, redistest.Options{ClusterMode: true, Args: []string{
		"--cluster-node-timeout", strconv.Itoa(int(redistest.NodeTimeout.Milliseconds()))}})
	<-done
	if rcs == nil {
		t.FailNow()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// N joins M's cluster, serving no slot, before any client meets it.
	// (A master alone learns its own address only when another meets it.)
	for i, rc := range rcs {
		n, m := news.Servers[i], rc.Shards[0].Master
		if err := n.Client().Do(ctx, "cluster", "meet", "127.0.0.1", m.Port, m.BusPort).Err(); err != nil {
			t.Fatal(err)
		}
		awaitMet(t, ctx, n, m)
	}
	nodes := func() []redis.UniversalClient {
		return append([]redis.UniversalClient{plain.Servers[0].Client()}, redistest.ClusterClientsT(t, rcs)...)
	}
	opts := redlock.Options{TTL: 20 * time.Second} // the restart guard on
	x := newClientOn(t, nodes(), opts)
	before := newClientOn(t, nodes(), opts)
	// Not slot 0 (the masters' data-kept marker) nor the register's.
	name := nameInSlots(x, "job", 100, 8000)
	slot := x.Keys(name).Slot
	takeAndRelease(t, ctx, before.TryAcquire, nameInSlots(x, "warm", 100, 8000))

	held := hold(t, ctx, x.TryAcquire, name)
	ms := []*redistest.Server{plain.Servers[0]}
	for _, rc := range rcs {
		ms = append(ms, rc.Shards[0].Master)
	}
	awaitKeyOnEvery(t, ctx, ms, x.Keys(name).Lock)
	for i, rc := range rcs {
		n, m := news.Servers[i], rc.Shards[0].Master
		migrateKeysOpen(t, ctx, slot, m, n)
		if got := askingExists(t, ctx, n, x.Keys(name).Lock); got != 1 {
			t.Fatalf("X's key is not on the importing master %s after MIGRATE (%d)", n.Addr, got)
		}
	}
	// X's key is on the importing masters of both clusters (a quorum with
	// the plain node); they restart empty, still importing.
	for i, rc := range rcs {
		n, m := news.Servers[i], rc.Shards[0].Master
		if err := n.Restart(true); err != nil {
			t.Fatal(err)
		}
		awaitMet(t, ctx, n, m)
		keepImporting(t, ctx, slot, m, n)
		if got := askingExists(t, ctx, n, x.Keys(name).Lock); got != 0 {
			t.Fatalf("the importing master %s kept X's key across its restart (%d)", n.Addr, got)
		}
	}
	for i, rc := range rcs {
		n, m := news.Servers[i], rc.Shards[0].Master
		if k, err := m.Client().ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || k != 0 {
			t.Fatalf("%s, migrating, still holds %d keys of slot %d (%v): it would not redirect to %s", m.Addr, k, slot, err, n.Addr)
		}
		// One key, missing: the importing master takes it.
		pipe := n.Client().Pipeline()
		pipe.Do(ctx, "asking")
		set := pipe.Set(ctx, x.Keys(name).Lock+":one-key", "v", time.Minute)
		if _, err := pipe.Exec(ctx); err != nil || set.Err() != nil {
			t.Fatalf("ASKING SET of one missing key on %s: %v", n.Addr, err)
		}
	}
	fresh := newClientOn(t, nodes(), opts)
	refusedWhileHeld(t, ctx, held, name, refusal{after: " after the masters importing its slot restarted empty", tries: 3, margin: 5 * time.Second,
		is: func(err error) bool {
			return errors.Is(err, redlock.ErrNoQuorum) && strings.Count(err.Error(), "TRYAGAIN") == 1 && strings.Contains(err.Error(), "2 nodes (")
		},
		want: "no quorum, the importing masters of both clusters answering TRYAGAIN"},
		beforeAndFresh(before, fresh)...)
}

// awaitMet waits until n, a master of no slot, and m know each other and
// n sees the cluster ok (a MIGRATE to it is refused with CLUSTERDOWN until
// then).
func awaitMet(t *testing.T, ctx context.Context, n, m *redistest.Server) {
	t.Helper()
	nid, mid := serverID(t, ctx, n), serverID(t, ctx, m)
	if err := redistest.Await(ctx, n.Addr+" and "+m.Addr+" met", 20*time.Second, func(ctx context.Context) (bool, error) {
		for _, s := range []*redistest.Server{n, m} {
			nodes, err := s.Client().ClusterNodes(ctx).Result()
			if err != nil || !strings.Contains(nodes, nid) || !strings.Contains(nodes, mid) || strings.Contains(nodes, "handshake") || strings.Contains(nodes, "disconnected") || strings.Contains(nodes, "fail") {
				return false, err
			}
		}
		info, err := n.Client().ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok"), err
	}); err != nil {
		t.Fatal(err)
	}
}

// migrateKeysOpen opens slot's migration from m to n (IMPORTING on n,
// MIGRATING on m) and moves every key of the slot with MIGRATE, leaving
// the slot open: the middle of a reshard.
func migrateKeysOpen(t *testing.T, ctx context.Context, slot int, m, n *redistest.Server) {
	t.Helper()
	keepImporting(t, ctx, slot, m, n)
	if err := m.Client().Do(ctx, "cluster", "setslot", slot, "migrating", serverID(t, ctx, n)).Err(); err != nil {
		t.Fatal(err)
	}
	keys, err := m.Client().ClusterGetKeysInSlot(ctx, slot, 100).Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys of slot %d on %s: %v, %v", slot, m.Addr, keys, err)
	}
	args := []any{"migrate", "127.0.0.1", n.Port, "", 0, 5000, "keys"}
	for _, k := range keys {
		args = append(args, k)
	}
	if err := m.Client().Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
}

// keepImporting sets slot IMPORTING from m on n unless n shows it so.
func keepImporting(t *testing.T, ctx context.Context, slot int, m, n *redistest.Server) {
	t.Helper()
	nodes, err := n.Client().ClusterNodes(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(nodes, fmt.Sprintf("[%d-<-%s]", slot, serverID(t, ctx, m))) {
		return
	}
	if err := n.Client().Do(ctx, "cluster", "setslot", slot, "importing", serverID(t, ctx, m)).Err(); err != nil {
		t.Fatal(err)
	}
}

// askingExists counts key on s after ASKING: on a master importing its
// slot too.
func askingExists(t *testing.T, ctx context.Context, s *redistest.Server, key string) int64 {
	t.Helper()
	pipe := s.Client().Pipeline()
	pipe.Do(ctx, "asking")
	n := pipe.Exists(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	return n.Val()
}

func serverID(t *testing.T, ctx context.Context, s *redistest.Server) string {
	t.Helper()
	id, err := s.ID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A migration aborted by hand after some of the slot's keys were moved:
// the lock's slot is MIGRATING on its owner M and IMPORTING on the other
// master N, X's keys are MIGRATEd to N, and an operator closes the slot
// with CLUSTER SETSLOT STABLE on both (a stuck reshard "fixed" by hand;
// SETSLOT NODE M does the same). M serves the slot as it always did, and
// X's keys lie on N, where no command of the slot reaches them (Redis 8.6
// deletes them there): M lost them, in two of three nodes. M gained no slot, kept its run_id, its
// marker and its slots, so no rule of the guard saw a loss. A client that
// probed the nodes while the slot was open sees M stop migrating a slot
// it still serves, and must be refused while X holds. (A client that
// meets the nodes only after the abort cannot tell, as for a slot moved
// before it met them: docs/PROTOCOL.md section 11.)
func TestClusterMigrationAbortedAfterMigrateGivesNoSecondHolder(t *testing.T) {
	migrationAbortedGivesNoSecondHolder(t, false)
}

// migrationAbortedGivesNoSecondHolder is the schedule above, on a plain
// node and two 2-master Clusters, each given as a ClusterClient, or with
// plainMasters as a plain client of the master that serves the lock's slot.
func migrationAbortedGivesNoSecondHolder(t *testing.T, plainMasters bool) {
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
		if !plainMasters {
			return append(out, redistest.ClusterClientsT(t, rcs)...)
		}
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
	// In the first master's slots (0-8191, the register's 8189 among
	// them), not its slot 0 (the data-kept marker).
	name := nameInSlots(x, "job", 100, 8000)
	slot := x.Keys(name).Slot
	// The other client's lock: in the other master's slots, or, when the
	// nodes are the first masters alone, in theirs but not name's slot.
	warm := nameInSlots(x, "warm", 8200, 16000)
	if plainMasters {
		warm = name
		for i := 0; x.Keys(warm).Slot == slot || x.Keys(warm).Slot < 100 || x.Keys(warm).Slot > 8000; i++ {
			warm = nameInSlots(x, "warm"+string(rune('a'+i)), 100, 8000)
		}
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
	// The other client probes while the slot is open (a guard older than
	// a second is read again before a vote).
	time.Sleep(1100 * time.Millisecond)
	takeAndRelease(t, ctx, before.TryAcquire, warm)
	for _, rc := range rcs {
		for _, s := range []*redistest.Server{rc.Shards[1].Master, rc.Shards[0].Master} {
			if err := s.Client().Do(ctx, "cluster", "setslot", slot, "stable").Err(); err != nil {
				t.Fatal(err)
			}
		}
		// Not back on the owner. (It stays on N, in a slot N does not
		// serve, on Redis 7.0 and Valkey 9.1; Redis 8.6 deletes it there.)
		if keys, err := rc.Shards[0].Master.Client().ClusterGetKeysInSlot(ctx, slot, 100).Result(); err != nil || slices.Contains(keys, x.Keys(name).Lock) {
			t.Fatalf("X's key is back on the owner %s after the abort (%v, %v): nothing lost", rc.Shards[0].Master.Addr, keys, err)
		}
	}
	// Past the window in which a loss is not yet seen (guardMaxAge).
	time.Sleep(1100 * time.Millisecond)
	after, who := " after the migration of its slot was aborted, its keys left on the importing master", "a client that used the nodes before"
	if plainMasters {
		after, who = " after the migration of its slot was aborted on the plain cluster-mode masters, its keys left on the importing master", "a client that used the nodes before (and probed while the slot was open)"
	}
	refusedWhileHeld(t, ctx, held, name, refusal{after: after, tries: 3, margin: 5 * time.Second,
		is: sittingOut(true, "stopped migrating"), want: "no quorum, the masters that stopped migrating the lock's slot sitting out"},
		contender{who, before})
}
