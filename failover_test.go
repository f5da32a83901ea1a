package redlock_test

// Nodes that are deployments: a *redis.ClusterClient over a Redis Cluster,
// a *redis.Client from redis.NewFailoverClient over Sentinel. The guards
// follow the servers that hold the keys.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
	"github.com/quorumlabs/redlock/redistest"
)

// Issue 18's schedule: five nodes, each a ClusterClient over a Redis
// Cluster of two masters without persistence. X holds a lock whose slot is
// on the second master; in the three clusters that hold X's keys that
// master restarts empty, keeping its slots. Neither a client that used the
// nodes before nor a fresh one may take the lock while X holds it: the
// restarted master lost X's key, and the guards must see that it is a new
// server although the ClusterClient's INFO may reach the other master.
func TestClusterNodesMasterRestartGivesNoSecondHolder(t *testing.T) {
	rcs := redistest.StartRedisClustersT(t, 5, 2, 0, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := redlock.Options{TTL: 10 * time.Second}
	x := newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
	before := newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
	name := nameInSlots(x, "job", 8192, 16383) // the second master's

	// The fresh masters sit out the grace first: wait for it.
	warm := nameInSlots(x, "warm", 8192, 16383)
	takeAndRelease(t, ctx, before.Acquire, warm)
	held := hold(t, ctx, x.Acquire, name)

	// The clusters that hold X's key restart its slot's master empty.
	var holders []*redistest.RedisCluster
	for _, rc := range rcs {
		if n, err := rc.Shards[1].Master.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil {
			t.Fatal(err)
		} else if n == 1 {
			holders = append(holders, rc)
		}
	}
	if len(holders) < x.Quorum() {
		t.Fatalf("X's key is on %d clusters' second master, want at least %d", len(holders), x.Quorum())
	}
	if err := redistest.EachCluster(holders, func(rc *redistest.RedisCluster) error {
		_, err := rc.RestartMaster(ctx, x.Keys(name).Slot)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, rc := range holders {
		if n, err := rc.Shards[1].Master.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 0 {
			t.Fatalf("the restarted master kept X's key (%d, %v)", n, err)
		}
	}

	fresh := newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
	// The restarted masters' nodes sit out the grace.
	noSecondHolder(t, ctx, held, name, time.Second, "the restarted masters'", before, fresh)
}

// Clients of redis.NewFailoverClient all report the address
// "FailoverClient": each is named by its position, and refused for what it
// is, a master that fails over with votes that are not durable, not as a
// duplicate of the others.
func TestFailoverClientNodesAreRefusedForWhatTheyAre(t *testing.T) {
	var nodes []redis.UniversalClient
	for i := range 5 {
		fc := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:    fmt.Sprintf("master-%d", i),
			SentinelAddrs: []string{fmt.Sprintf("127.0.0.1:%d", 1+i)}, // never dialled
		})
		defer fc.Close()
		nodes = append(nodes, fc)
	}
	_, err := redlock.New(nodes, redlock.Options{})
	if !errors.Is(err, redlock.ErrFailoverNode) || !errors.Is(err, redlock.ErrInvalidConfig) || errors.Is(err, redlock.ErrNotIndependent) {
		t.Fatalf("five failover clients: want ErrFailoverNode (an invalid config, not a duplicate), got %v", err)
	}
	if !strings.Contains(err.Error(), "FailoverClient#1") || !strings.Contains(err.Error(), "AllowFailoverNodes") {
		t.Fatalf("the refusal must name the node by position and the opt-in: %v", err)
	}
	c, err := redlock.New(nodes, redlock.Options{AllowFailoverNodes: true})
	if err != nil {
		t.Fatalf("five failover clients with AllowFailoverNodes: %v", err)
	}
	defer c.Close()
	probeless, cancel := context.WithCancel(context.Background())
	cancel() // the names, not the probes
	for i, info := range c.Nodes(probeless) {
		if want := fmt.Sprintf("FailoverClient#%d", i+1); info.Node != want {
			t.Fatalf("node %d is named %q, want %q", i+1, info.Node, want)
		}
	}
}

// With the opt-in, a Sentinel-managed master is a node. When Sentinel
// promotes a replica, the node follows it, and the promoted replica sits
// out the grace as a restarted master would, for the client that saw the
// failover and for a client that meets the node afterwards: its uptime is
// the replica's, long, and cannot date the promotion.
//
// Persistent servers change nothing (issue 25): persistence kept the
// replica's own writes, not the old master's.
func TestFailoverClientNodesWithTheOptIn(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		t.Run(fmt.Sprintf("persistence=%v", persistent), func(t *testing.T) { failoverClientNodesWithTheOptIn(t, persistent) })
	}
}

func failoverClientNodesWithTheOptIn(t *testing.T, persistent bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	plain := redistest.StartT(t, 2, redistest.Options{Persistence: persistent})
	ss := redistest.StartSentinelT(t, "locks", 1, redistest.Options{Persistence: persistent})
	newClient := func() *redlock.Client {
		fc := ss.FailoverClient()
		t.Cleanup(func() { _ = fc.Close() })
		return newClientOn(t, append(plain.Clients(), fc), redlock.Options{TTL: time.Second, AllowFailoverNodes: true})
	}
	known := newClient()
	if name := known.Nodes(ctx)[2].Node; name != "FailoverClient#3" {
		t.Fatalf("the failover node is named %q", name)
	}
	votes := func(c *redlock.Client) redlock.NodeInfo {
		info := c.Nodes(ctx)[2]
		if info.Err != nil {
			t.Fatal(info.Err)
		}
		return info
	}
	eventually(t, 20*time.Second, "the failover node votes after its start's grace", func() bool { return votes(known).Voting })
	takeAndRelease(t, ctx, known.TryAcquire, "job")

	promoted, err := ss.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	promotedID := runID(t, promoted)
	fresh := newClient()
	for _, tc := range []struct {
		who string
		c   *redlock.Client
	}{{"the client that saw the old master", known}, {"a fresh client", fresh}} {
		var info redlock.NodeInfo
		eventually(t, 10*time.Second, tc.who+" follows the promoted replica", func() bool {
			info = votes(tc.c)
			return info.RunID == promotedID
		})
		if info.Voting || !info.Promoted || !strings.Contains(info.SitOutReason, "restart grace") {
			t.Fatalf("%s: the promoted replica (uptime %v) votes at once: %+v", tc.who, info.Uptime, info)
		}
	}
	eventually(t, 10*time.Second, "the promoted replica votes after the grace", func() bool { return votes(fresh).Voting })
}

// A ClusterClient whose masters have replicas is a node that fails over:
// refused without the opt-in. With it, the node follows a failover of the
// lock's master: the promoted replica is a new server that sits out the
// grace, then votes, and the lock's keys are on it.
func TestClusterNodeWithReplicasFailsOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	plain := redistest.StartT(t, 2, redistest.Options{})
	rc := redistest.StartRedisClusterT(t, 2, 1, redistest.Options{})
	newClient := func(opts redlock.Options) *redlock.Client {
		return newClientOn(t, append(plain.Clients(), redistest.ClusterClientsT(t, []*redistest.RedisCluster{rc})...), opts)
	}
	// Replicas whose links are down count too: they may still be promoted.
	for _, sh := range rc.Shards {
		if err := redistest.CutReplication(ctx, sh.Replicas[0]); err != nil {
			t.Fatal(err)
		}
	}
	refused := newClient(redlock.Options{TTL: time.Second})
	_, err := refused.TryAcquire(ctx, "job")
	if !errors.Is(err, redlock.ErrFailoverNode) || !strings.Contains(err.Error(), "ClusterClient#3") || !strings.Contains(err.Error(), "2 replicas") {
		t.Fatalf("a cluster node with replicas (their links down), without the opt-in: want ErrFailoverNode naming ClusterClient#3 and its 2 replicas, got %v", err)
	}
	if err := refused.Verify(ctx); !errors.Is(err, redlock.ErrFailoverNode) {
		t.Fatalf("Verify: want ErrFailoverNode, got %v", err)
	}
	for _, sh := range rc.Shards {
		if err := redistest.RestoreReplication(ctx, sh.Replicas[0]); err != nil {
			t.Fatal(err)
		}
	}

	c := newClient(redlock.Options{TTL: time.Second, AllowFailoverNodes: true})
	name := nameInSlots(c, "job", 0, 8191) // the first master's
	node := func() redlock.NodeInfo {
		info := c.Nodes(ctx)[2]
		if info.Err != nil {
			t.Fatal(info.Err)
		}
		return info
	}
	eventually(t, 20*time.Second, "the cluster node votes after its start's grace", func() bool { return node().Voting })
	if info := node(); info.Replicas != 2 || info.Node != "ClusterClient#3" {
		t.Fatalf("Nodes: want ClusterClient#3 with 2 replicas, got %+v", info)
	}
	takeAndRelease(t, ctx, c.TryAcquire, name)

	promoted, err := rc.Failover(ctx, c.Keys(name).Slot, false)
	if err != nil {
		t.Fatal(err)
	}
	id := runID(t, promoted)
	var info redlock.NodeInfo
	eventually(t, 10*time.Second, "the node follows the promoted replica", func() bool {
		info = node()
		return strings.Contains(info.RunID, promoted.Addr+"="+id)
	})
	if info.Voting || !info.Promoted || !strings.Contains(info.SitOutReason, "restart grace") {
		t.Fatalf("the promoted replica votes at once: %+v", info)
	}
	eventually(t, 10*time.Second, "the promoted replica votes after the grace", func() bool { return node().Voting })
	hold(t, ctx, c.TryAcquire, name)
	// The decision may come before the cluster node's answer: it sets the
	// key all the same.
	eventually(t, 5*time.Second, "the lock's key on the promoted master", func() bool {
		n, err := promoted.Client().Exists(ctx, c.Keys(name).Lock).Result()
		return err == nil && n == 1
	})
}

// A failover that loses the lock's key, in the clusters of a quorum of the
// nodes: their replicas' links were cut before X took the lock, then the
// replicas are promoted by force. With the opt-in, neither a client that
// used the nodes before nor a fresh one may take the lock while X holds it:
// the promoted replicas are new servers, whose long uptime dates nothing.
func TestClusterNodeLossyFailoverGivesNoSecondHolder(t *testing.T) {
	rcs := redistest.StartRedisClustersT(t, 3, 1, 1, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := redlock.Options{TTL: 5 * time.Second, AllowFailoverNodes: true}
	x := newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
	before := newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
	takeAndRelease(t, ctx, before.Acquire, "warm-up") // waits out the fresh servers' grace
	lossy := rcs[:x.Quorum()]
	for _, rc := range lossy {
		if err := redistest.CutReplication(ctx, rc.Shards[0].Replicas[0]); err != nil {
			t.Fatal(err)
		}
	}
	const name = "job"
	held := hold(t, ctx, x.Acquire, name)
	failOverEach(t, ctx, lossy, x.Keys(name).Slot, func(p *redistest.Server) error {
		if n, err := p.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 0 {
			return fmt.Errorf("the promoted replica %s has X's key (%d, %v): the failover lost nothing", p.Addr, n, err)
		}
		return nil
	})

	fresh := newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
	noSecondHolder(t, ctx, held, name, 500*time.Millisecond, "the promoted replicas'", before, fresh)
}

// On Cluster nodes the restart grace follows the master of the lock's
// slot: when one master of each cluster restarts empty, locks whose slots
// are on the other master are taken at once, by the client that saw the
// restart and by a fresh one, while the restarted master's locks wait.
func TestClusterNodeGuardFollowsTheLocksMaster(t *testing.T) {
	rcs := redistest.StartRedisClustersT(t, 3, 2, 0, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The restarted master sits out for a TTL: long enough that both
	// clients' checks land inside it on a loaded machine (with 2s, a
	// fresh client under -race sometimes came after the grace).
	opts := redlock.Options{TTL: 6 * time.Second}
	known := newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
	kept := nameInSlots(known, "kept", 0, 8191)           // the first master's
	moved := nameInSlots(known, "restarted", 8192, 16383) // the second master's
	for _, name := range []string{kept, moved} {
		takeAndRelease(t, ctx, known.Acquire, name) // waits out the fresh servers' grace
	}
	if err := redistest.EachCluster(rcs, func(rc *redistest.RedisCluster) error {
		_, err := rc.RestartMaster(ctx, known.Keys(moved).Slot)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	fresh := newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
	for _, tc := range []struct {
		who string
		c   *redlock.Client
	}{{"the client that saw the restart", known}, {"a fresh client", fresh}} {
		_, refused := tc.c.TryAcquire(ctx, moved)
		if !errors.Is(refused, redlock.ErrNoQuorum) || !errors.Is(refused, redlock.ErrNodeSittingOut) {
			t.Fatalf("%s, lock %q on the restarted master: want no quorum, its nodes sitting out, got %v", tc.who, moved, refused)
		}
		l, err := tc.c.TryAcquire(ctx, kept)
		if err != nil {
			t.Fatalf("%s, lock %q on the master that kept running: %v", tc.who, kept, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The error groups the nodes and is capped: it names the restarted
		// master of one cluster at least, whichever comes first.
		var restarted []string
		named := false
		for _, rc := range rcs {
			restarted = append(restarted, rc.Shards[1].Master.Addr)
			named = named || strings.Contains(refused.Error(), rc.Shards[1].Master.Addr)
		}
		if !named {
			t.Fatalf("%s: the refusal names none of the restarted masters %v: %v", tc.who, restarted, refused)
		}
	}
}

// Resharding the lock's slot during a hold (MIGRATE moves the keys with
// it), in one of three clusters, loses nothing: the key is on the master
// the slot moved to, the holder extends, and another client is refused
// the lock. The master that took the slot is new to it: it sits out the
// grace for it, for the holder too, as it must had the keys not come along
// (TestClusterNodeSlotMovedEmptyGivesNoSecondHolder). A reshard of the
// lock's slot in a quorum of the nodes during a hold therefore costs the
// holder its extensions until the grace is over.
func TestClusterNodeSlotMovedDuringAHold(t *testing.T) {
	rcs := redistest.StartRedisClustersT(t, 3, 2, 0, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := redlock.Options{TTL: 5 * time.Second} // room for a slot move within the validity
	x := newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
	other := newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
	name := nameInSlots(x, "job", 0, 8191)
	// The fresh servers' grace over on every cluster, not only on the
	// quorum an Acquire waits for: the extension below needs the third
	// cluster once the moved slot's master sits out for X.
	allVote(t, x, "every cluster voting for X")
	held, err := x.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	if _, err := other.Acquire(ctx, nameInSlots(x, "warm", 8192, 16383)); err != nil { // the other client's grace too
		t.Fatal(err)
	}
	rc := rcs[0]
	if err := rc.MoveSlot(ctx, x.Keys(name).Slot, rc.Shards[1].Master); err != nil {
		t.Fatal(err)
	}
	if n, err := rc.Shards[1].Master.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 1 {
		t.Fatalf("the lock's key did not move with its slot (%d, %v)", n, err)
	}
	if err := held.Extend(ctx); err != nil {
		t.Fatalf("extend after the lock's slot moved in one cluster: %v", err)
	}
	_, err = other.TryAcquire(ctx, name)
	if !errors.Is(err, redlock.ErrLocked) {
		t.Fatalf("another client after the slot moved: %v, want ErrLocked", err)
	}
	if info := other.Nodes(ctx)[0]; info.Err != nil || info.Voting || !strings.Contains(info.SitOutReason, rc.Shards[1].Master.Addr) {
		t.Fatalf("the cluster whose slot moved, to the other client: %+v, want the master %s that took the slot sitting out", info, rc.Shards[1].Master.Addr)
	}
}

// A slot moved during a hold WITHOUT its keys (an operator's CLUSTER
// SETSLOT, a migration fixed by hand) to a master the clients already knew,
// in the clusters of a quorum of the nodes: a client that used the nodes
// before must not take the lock while X holds it. The master is not new
// (same address, same run_id, a long uptime), but it is new to the lock's
// slot: the guard must see it serving the slot and make it sit out the
// grace for it. (A client that meets the nodes only after the move cannot
// tell: nothing on the server dates when a master took a slot; see
// docs/PROTOCOL.md section 11.)
//
// Persistent masters change nothing (issue 25): persistence keeps a
// server's own writes across its own restart, not a slot's keys it never
// had.
func TestClusterNodeSlotMovedEmptyGivesNoSecondHolder(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		t.Run(fmt.Sprintf("persistence=%v", persistent), func(t *testing.T) { slotMovedEmptyGivesNoSecondHolder(t, persistent) })
	}
}

func slotMovedEmptyGivesNoSecondHolder(t *testing.T, persistent bool) {
	rcs := redistest.StartRedisClustersT(t, 3, 2, 0, redistest.Options{Persistence: persistent})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := redlock.Options{TTL: 5 * time.Second}
	x := newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
	before := newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
	name := nameInSlots(x, "job", 0, 8191) // the first master's
	// The fresh masters sit out the grace first: wait for it, the other
	// client on both masters (its guard saw the layout before the move).
	for _, warm := range []string{nameInSlots(x, "warm", 0, 8191), nameInSlots(x, "warm", 8192, 16383)} {
		takeAndRelease(t, ctx, before.Acquire, warm)
	}
	held := hold(t, ctx, x.Acquire, name)
	// The slot moves in a quorum of the clusters that hold X's key. (The
	// decision may come before a node's answer: a key still on its way
	// would follow the slot to its new master.)
	var lossy []*redistest.RedisCluster
	eventually(t, 5*time.Second, "X's key on a quorum of the clusters", func() bool {
		lossy = lossy[:0]
		for _, rc := range rcs {
			if n, err := rc.Shards[0].Master.Client().Exists(ctx, x.Keys(name).Lock).Result(); err == nil && n == 1 {
				lossy = append(lossy, rc)
			}
		}
		return len(lossy) >= x.Quorum()
	})
	lossy = lossy[:x.Quorum()]
	if err := redistest.EachCluster(lossy, func(rc *redistest.RedisCluster) error {
		return rc.MoveSlotEmpty(ctx, x.Keys(name).Slot, rc.Shards[1].Master)
	}); err != nil {
		t.Fatal(err)
	}
	for _, rc := range lossy {
		if n, err := rc.Shards[1].Master.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 0 {
			t.Fatalf("the lock's key moved with its slot (%d, %v): the move lost nothing", n, err)
		}
	}
	refusedWhileHeld(t, ctx, held, name, refusal{tries: 3, margin: 500 * time.Millisecond, is: sittingOut(true, ""), want: "no quorum, the masters new to the lock's slot sitting out"}, contender{"a client that used the nodes before", before})
}

// noSecondHolder has a client that used the nodes before and a fresh one
// try the lock that held holds, three times each, while more than margin of
// its validity is left: each must be refused for want of a quorum, with the
// nodes that lost its keys (whose) sitting out.
func noSecondHolder(t *testing.T, ctx context.Context, held *redlock.Lock, name string, margin time.Duration, whose string, before, fresh *redlock.Client) {
	t.Helper()
	refusedWhileHeld(t, ctx, held, name, refusal{tries: 3, margin: margin, is: sittingOut(true, ""), want: "no quorum, " + whose + " nodes sitting out"}, beforeAndFresh(before, fresh)...)
}

// failOverEach fails over, in parallel, the master serving slot in each of
// rcs, and checks each promoted replica with check.
func failOverEach(t *testing.T, ctx context.Context, rcs []*redistest.RedisCluster, slot int, check func(promoted *redistest.Server) error) {
	t.Helper()
	if err := redistest.EachCluster(rcs, func(rc *redistest.RedisCluster) error {
		p, err := rc.Failover(ctx, slot, false)
		if err != nil {
			return err
		}
		return check(p)
	}); err != nil {
		t.Fatal(err)
	}
}

// A Cluster master's clock that jumps alone sends the node to sit out once,
// for one largest TTL in use, and the node then votes again: each master's
// clock has a history of its own. (Kept in one history per node, the
// jumped master's replies and the other master's probe samples each looked
// like a jump against the other, and the nodes never voted again: the
// chaos scenario cluster-clock-jump-shard-majority's f:liveness.)
func TestClusterMasterClockJumpSitsOutOnceThenVotes(t *testing.T) {
	rcs := redistest.StartRedisClustersT(t, 3, 2, 0, redistest.Options{FakeTime: true})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	jumps := map[string]bool{}
	c, err := redlock.New(redistest.ClusterClientsT(t, rcs), redlock.Options{TTL: time.Second,
		Observer: observe.Func(func(e observe.Event) {
			if e.Kind == observe.NodeSitOut && e.Reason == redlock.SitOutClockJump {
				mu.Lock()
				jumps[e.Node] = true
				mu.Unlock()
			}
		})})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := nameInSlots(c, "job", 0, 8191)  // the first master's
	takeAndRelease(t, ctx, c.Acquire, name) // waits out the fresh servers' grace
	for _, rc := range rcs {
		if err := rc.Shards[0].Master.SetClockOffset(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// The jump shows in the next reply of the jumped masters; the nodes sit
	// out a second (the TTL) and then vote again, for the jumped master's
	// locks and the other master's alike.
	for _, lock := range []string{name, nameInSlots(c, "other", 8192, 16383), name} {
		wait, cancel := context.WithTimeout(ctx, 30*time.Second)
		l, err := c.Acquire(wait, lock)
		cancel()
		if err != nil {
			t.Fatalf("lock %q after one master's clock jumped in each node: the nodes did not vote again: %v", lock, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(jumps) < c.Quorum() {
		t.Fatalf("the clock jump sent only %d nodes to sit out (%v), want at least a quorum of %d", len(jumps), jumps, c.Quorum())
	}
}

// Issue 25: every event that may lose a granted key starts a new epoch of
// the server, which sits out the restart grace from it, and persistence
// excuses none of them but the server's own restart.

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
	return newClientOn(t, []redis.UniversalClient{en.plain.Servers[0].Client(), en.plain.Servers[1].Client(), cc}, opts)
}

// awaitCVoting waits until each of clients counts C's vote, past its
// master's start: persistence spares no start on a node that fails over (C's
// master may have been promoted before it).
func (en epochNodes) awaitCVoting(t *testing.T, ctx context.Context, clients ...*redlock.Client) {
	t.Helper()
	for _, c := range clients {
		eventually(t, 30*time.Second, "C votes, past its master's start", func() bool {
			info := c.Nodes(ctx)[2]
			return info.Err == nil && info.Voting
		})
	}
}

// votingPair makes two clients of opts and waits until both count C's
// vote.
func (en epochNodes) votingPair(t *testing.T, ctx context.Context, opts redlock.Options) (x, y *redlock.Client) {
	t.Helper()
	x, y = en.client(t, opts), en.client(t, opts)
	en.awaitCVoting(t, ctx, x, y)
	return x, y
}

// takeThenPromoteCsReplica cuts C's replication, has x take name on P0 and C
// (takeOnP0AndC), and promotes C's replica by force: a promoted replica
// without X's key.
func (en epochNodes) takeThenPromoteCsReplica(t *testing.T, ctx context.Context, x *redlock.Client, name string) (held *redlock.Lock, promoted *redistest.Server) {
	t.Helper()
	if err := redistest.CutReplication(ctx, en.rc.Shards[0].Replicas[0]); err != nil {
		t.Fatal(err)
	}
	held = en.takeOnP0AndC(t, ctx, x, name)
	promoted, err := en.rc.Failover(ctx, x.Keys(name).Slot, true)
	if err != nil {
		t.Fatal(err)
	}
	return held, promoted
}

// takeOnP0AndC has x take name while P1 is down, so that its key is on P0
// and on C's master only; P1 then comes back with its data.
func (en epochNodes) takeOnP0AndC(t *testing.T, ctx context.Context, x *redlock.Client, name string) *redlock.Lock {
	t.Helper()
	p1 := en.plain.Servers[1]
	if err := p1.Kill(); err != nil {
		t.Fatal(err)
	}
	held := hold(t, ctx, x.TryAcquire, name)
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
	x, before := en.votingPair(t, ctx, opts)
	const name = "job"
	held, promoted := en.takeThenPromoteCsReplica(t, ctx, x, name)
	if n, err := promoted.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 0 {
		t.Fatalf("the promoted replica has X's key (%d, %v): the failover lost nothing", n, err)
	}
	fresh := en.client(t, opts)
	epochRefusedWhileHeld(t, ctx, en.plain.Servers[1], held, name, beforeAndFresh(before, fresh)...)
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
	x, y := en.votingPair(t, ctx, opts)
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
	epochRefusedWhileHeld(t, ctx, en.plain.Servers[1], held, name, beforeAndFresh(y, fresh)...)
	info, err := y.NodesFor(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if c := info[2]; c.Voting || !strings.Contains(c.SitOutReason, a.Addr) || !strings.Contains(c.SitOutReason, "replication id") {
		t.Fatalf("the Cluster node to the client that knew it: %+v, want its master %s sitting out for its new replication id", c, a.Addr)
	}
}

// epochRefusedWhileHeld tries the lock that held holds, three times from
// each of contenders (a client that used the nodes before, a fresh one),
// while X's validity lasts: each must be refused, with C sitting out. Each attempt's
// key on P1 (which X does not hold) is awaited gone before the next: left
// there, it would make the next attempt stop at ErrLocked on P0 and P1
// before C answered, which happened on a loaded machine.
func epochRefusedWhileHeld(t *testing.T, ctx context.Context, p1 *redistest.Server, held *redlock.Lock, name string, contenders ...contender) {
	t.Helper()
	refusedWhileHeld(t, ctx, held, name, refusal{
		tries: 3, margin: 500 * time.Millisecond,
		is:   sittingOut(false, "ClusterClient#3: redlock: node is sitting out"),
		want: "a refusal with C sitting out",
		then: func(c *redlock.Client) { awaitNoKey(t, ctx, p1, c.Keys(name).Lock) },
	}, contenders...)
}
