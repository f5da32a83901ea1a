package chaos

// Lock nodes that are Redis Clusters: each of the N nodes is a cluster of
// its own (ClusterSpec.ClusterMasters masters without persistence, each
// with ClusterSpec.ClusterReplicas replicas), reached through a
// *redis.ClusterClient. Most faults act on the master that serves the
// lock's slot in a node: it restarts empty keeping its slots, the slot
// moves to the other master (with or without its keys), its clock jumps.
// Others act on the master of the library's TTL register (its replication
// is cut, it fails over), or on every server of a node (all hung, then
// killed and started again empty).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// ClusterNode is a lock node that is a Redis Cluster. Every method that
// names a key acts on the master serving the key's slot at the time of
// the call.
type ClusterNode interface {
	// Name is "n0", "n1", ...
	Name() string
	// Seeds are the addresses a ClusterClient of the node starts from.
	// The addresses the servers announce (CLUSTER SLOTS, MOVED) are
	// reachable from this process too.
	Seeds() []string
	// RestartMasterOf kills the master serving key's slot and starts it
	// again without its keys but with its nodes.conf: the same cluster
	// node, serving the same slots, empty. It returns once the cluster is
	// ok again, with the master's address.
	RestartMasterOf(ctx context.Context, key string) (string, error)
	// MoveSlotOf gives key's slot to another master, with its keys
	// (MIGRATE, as redis-cli --cluster reshard does) or without them (the
	// keys of the slot are lost). It returns the old and the new master's
	// addresses once every server agrees.
	MoveSlotOf(ctx context.Context, key string, withKeys bool) (from, to string, err error)
	// MoveMasterClockOf moves the wall clock of the master serving key's
	// slot by d (the cluster must have been started with FakeTime) and
	// returns the master's address.
	MoveMasterClockOf(ctx context.Context, key string, d time.Duration) (string, error)
	// CutReplicaOf cuts the replication link of the replica of the master
	// serving key's slot and keeps it cut (a wrong masterauth: its
	// reconnections are refused), so that the master's writes from then on
	// never reach it. It returns the replica's address once its link is
	// down. RestoreReplicas mends every link cut so far.
	CutReplicaOf(ctx context.Context, key string) (string, error)
	RestoreReplicas(ctx context.Context) error
	// FailoverMasterOf promotes the replica of the master serving key's
	// slot with CLUSTER FAILOVER TAKEOVER (no catching up, no vote of the
	// other masters: what the replica lacks is lost) and returns the old
	// and the new master's addresses once every running server agrees.
	FailoverMasterOf(ctx context.Context, key string) (from, to string, err error)
	// Freeze stops every server of the node (SIGSTOP, docker pause): it
	// answers nothing, and keeps its ports, so that no other server of
	// this machine takes them meanwhile (the backends may run side by
	// side). Revive kills them all and starts them again, empty but with
	// their nodes.conf (what was sent to them while frozen dies with
	// them), and returns once every master serves its slots again (the
	// replicas may still be syncing).
	Freeze(ctx context.Context) error
	Revive(ctx context.Context) error
}

// clusterNodeClient is a client of a Cluster lock node, set up like
// nodeClient: the context's deadline bounds every socket read and write,
// and failed commands are not retried (MOVED is still followed: that is
// routing, not a retry).
func clusterNodeClient(seeds []string) *redis.ClusterClient {
	opts := nodeOptions(seeds, nil)
	opts.DisableIdentity = true
	return redis.NewClusterClient(opts.Cluster())
}

// clusterSeeds are the seeds of each Cluster lock node, nil for a cluster
// of plain nodes.
func (c *Cluster) clusterSeeds() [][]string {
	if c.ClusterNodes == nil {
		return nil
	}
	seeds := make([][]string, len(c.ClusterNodes))
	for i, n := range c.ClusterNodes {
		seeds[i] = n.Seeds()
	}
	return seeds
}

// lockNodeAddrs are the addresses the scheme's clients get for the first
// n lock nodes: the proxies. Cluster lock nodes are not behind proxies
// (their clients follow the servers' own addresses), so there are none.
func lockNodeAddrs(c *Cluster, nw *Net, n int) []string {
	if c.ClusterNodes != nil {
		return nil
	}
	return nw.Addrs()[:n]
}

// nodeClients are the clients of a scheme's locker, one per lock node: a
// ClusterClient over each Cluster node's seeds, else a client of each
// address.
func (env SchemeEnv) nodeClients() ([]redis.UniversalClient, error) {
	if env.ClusterSeeds != nil {
		if env.TLSConfig != nil {
			return nil, errors.New("chaos: Cluster lock nodes over TLS are not supported")
		}
		clients := make([]redis.UniversalClient, len(env.ClusterSeeds))
		for i, seeds := range env.ClusterSeeds {
			clients[i] = clusterNodeClient(seeds)
		}
		return clients, nil
	}
	clients := make([]redis.UniversalClient, len(env.Addrs))
	for i, a := range env.Addrs {
		clients[i] = nodeClient(a, env.TLSConfig)
	}
	return clients, nil
}

// scanNode is a lock node as the key scans reach it, bypassing any proxy.
type scanNode struct {
	name string
	open func() redis.UniversalClient
}

// clusterScanNodes are Cluster lock nodes as the key scans reach them,
// through a ClusterClient each.
func clusterScanNodes(nodes []ClusterNode) []scanNode {
	var out []scanNode
	for _, n := range nodes {
		out = append(out, scanNode{n.Name(), func() redis.UniversalClient { return clusterNodeClient(n.Seeds()) }})
	}
	return out
}

// scanNodes are the lock nodes for the key scans: each server, or each
// Cluster node through a ClusterClient (which finds the lock's keys on the
// master that serves their slot now).
func scanNodes(c *Cluster) []scanNode {
	out := clusterScanNodes(c.ClusterNodes)
	for _, n := range c.Nodes {
		out = append(out, scanNode{n.Name(), func() redis.UniversalClient { return directClient(n) }})
	}
	return out
}

// checkClusterSpec refuses what Cluster lock nodes are not started with,
// on either backend.
func checkClusterSpec(spec ClusterSpec) error {
	if spec.TLS || spec.Persistence {
		return fmt.Errorf("chaos: Cluster lock nodes are started without TLS and without persistence (asked: TLS %v, persistence %v)", spec.TLS, spec.Persistence)
	}
	return nil
}

// clusterArgs are the extra arguments of the servers of Cluster lock
// nodes: a replica's full sync starts at once (the default waits 5s for
// more replicas to share it, and each master here has one), at the start
// and after a restart alike.
var clusterArgs = []string{"--repl-diskless-sync-delay", "0"}

// startProcessClusterNodes starts spec.Nodes Redis Clusters of
// spec.ClusterMasters masters each, in parallel, plus the resource server.
func startProcessClusterNodes(spec ClusterSpec) (*Cluster, error) {
	if err := checkClusterSpec(spec); err != nil {
		return nil, err
	}
	rcs := make([]*redistest.RedisCluster, spec.Nodes)
	errs := make([]error, spec.Nodes+1)
	var res *redistest.Cluster
	var wg sync.WaitGroup
	for i := range rcs {
		wg.Go(func() {
			rcs[i], errs[i] = redistest.StartRedisCluster(spec.ClusterMasters, spec.ClusterReplicas, redistest.Options{FakeTime: spec.FakeTime, Args: clusterArgs})
		})
	}
	wg.Go(func() { res, errs[spec.Nodes] = redistest.Start(1, redistest.Options{}) })
	wg.Wait()
	stop := func() error {
		var errs []error
		for _, rc := range rcs {
			if rc != nil {
				errs = append(errs, rc.Stop())
			}
		}
		if res != nil {
			errs = append(errs, res.Stop())
		}
		return errors.Join(errs...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, stop())
	}
	c := &Cluster{Backend: "process", HostIP: "127.0.0.1", Resource: processNode{"res", res.Servers[0], false, nil}, stop: stop}
	for i, rc := range rcs {
		c.ClusterNodes = append(c.ClusterNodes, &processClusterNode{name: fmt.Sprintf("n%d", i), rc: rc})
	}
	return c, nil
}

// cutReplicas are the replicas whose link a Cluster node's CutReplicaOf
// cut, for RestoreReplicas to mend. The zero value is ready.
type cutReplicas[S any] struct {
	mu  sync.Mutex
	cut []S
}

func (c *cutReplicas[S]) add(s S) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = append(c.cut, s)
}

// take returns the replicas cut so far and forgets them.
func (c *cutReplicas[S]) take() []S {
	c.mu.Lock()
	defer c.mu.Unlock()
	cut := c.cut
	c.cut = nil
	return cut
}

// processClusterNode is a Redis Cluster of local redis-server processes.
type processClusterNode struct {
	name string
	rc   *redistest.RedisCluster

	clocks clockOffsets[*redistest.Server] // each master's
	cut    cutReplicas[*redistest.Server]
}

func (n *processClusterNode) Name() string    { return n.name }
func (n *processClusterNode) Seeds() []string { return n.rc.Addrs() }

// masterOfKey is key's slot and the master that serves it now.
func (n *processClusterNode) masterOfKey(ctx context.Context, key string) (int, *redistest.Server, error) {
	slot, err := n.slotOf(ctx, key)
	if err != nil {
		return 0, nil, err
	}
	m, err := n.rc.MasterFor(ctx, slot)
	return slot, m, err
}

// slotOf asks a running server for key's slot.
func (n *processClusterNode) slotOf(ctx context.Context, key string) (int, error) {
	var last error
	for _, s := range n.rc.Servers {
		if !s.Running() {
			continue
		}
		slot, err := s.Client().ClusterKeySlot(ctx, key).Result()
		if err == nil {
			return int(slot), nil
		}
		last = err
	}
	return 0, fmt.Errorf("chaos: %s: no server tells the slot of %q: %v", n.name, key, last)
}

func (n *processClusterNode) RestartMasterOf(ctx context.Context, key string) (string, error) {
	slot, err := n.slotOf(ctx, key)
	if err != nil {
		return "", err
	}
	m, err := n.rc.RestartMaster(ctx, slot)
	if err != nil {
		return "", fmt.Errorf("chaos: %s: %w", n.name, err)
	}
	return m.Addr, nil
}

func (n *processClusterNode) MoveSlotOf(ctx context.Context, key string, withKeys bool) (string, string, error) {
	slot, from, err := n.masterOfKey(ctx, key)
	if err != nil {
		return "", "", err
	}
	var to *redistest.Server
	for _, sh := range n.rc.Shards {
		if sh.Master != from {
			to = sh.Master
			break
		}
	}
	if to == nil {
		return "", "", fmt.Errorf("chaos: %s: a cluster of %d master(s) has no other master to move slot %d to", n.name, len(n.rc.Shards), slot)
	}
	move := n.rc.MoveSlot
	if !withKeys {
		move = n.rc.MoveSlotEmpty
	}
	if err := move(ctx, slot, to); err != nil {
		return "", "", fmt.Errorf("chaos: %s: %w", n.name, err)
	}
	return from.Addr, to.Addr, nil
}

func (n *processClusterNode) MoveMasterClockOf(ctx context.Context, key string, d time.Duration) (string, error) {
	_, m, err := n.masterOfKey(ctx, key)
	if err != nil {
		return "", err
	}
	if err := n.clocks.move(m, d, m.SetClockOffset); err != nil {
		return "", fmt.Errorf("chaos: %s: %w", n.name, err)
	}
	return m.Addr, nil
}

func (n *processClusterNode) CutReplicaOf(ctx context.Context, key string) (string, error) {
	slot, m, err := n.masterOfKey(ctx, key)
	if err != nil {
		return "", err
	}
	reps, err := n.rc.ReplicasOf(ctx, m)
	if err != nil || len(reps) == 0 {
		return "", fmt.Errorf("chaos: %s: the master %s of slot %d has no replica to cut off (%v)", n.name, m.Addr, slot, err)
	}
	n.cut.add(reps[0])
	if err := redistest.CutReplication(ctx, reps[0]); err != nil {
		return "", fmt.Errorf("chaos: %s: %w", n.name, err)
	}
	return reps[0].Addr, nil
}

func (n *processClusterNode) RestoreReplicas(ctx context.Context) error {
	var errs []error
	for _, s := range n.cut.take() {
		errs = append(errs, redistest.RestoreReplication(ctx, s))
	}
	return errors.Join(errs...)
}

func (n *processClusterNode) FailoverMasterOf(ctx context.Context, key string) (string, string, error) {
	slot, from, err := n.masterOfKey(ctx, key)
	if err != nil {
		return "", "", err
	}
	to, err := n.rc.Failover(ctx, slot, true)
	if err != nil {
		return "", "", fmt.Errorf("chaos: %s: %w", n.name, err)
	}
	return from.Addr, to.Addr, nil
}

func (n *processClusterNode) Freeze(context.Context) error {
	var errs []error
	for _, s := range n.rc.Servers {
		errs = append(errs, s.Pause())
	}
	return errors.Join(errs...)
}

func (n *processClusterNode) Revive(ctx context.Context) error {
	errs := make([]error, len(n.rc.Servers))
	var wg sync.WaitGroup
	for i, s := range n.rc.Servers {
		// SIGKILL ends a stopped process too; without persistence the
		// data dir keeps nodes.conf only.
		wg.Go(func() { errs[i] = s.Restart(true) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("chaos: %s: %w", n.name, err)
	}
	clients := make([]*redis.Client, len(n.rc.Servers))
	for i, s := range n.rc.Servers {
		clients[i] = s.Client()
	}
	return awaitClusterOK(ctx, n.name, clients)
}

// awaitClusterOK waits until every server of servers reports cluster
// state ok with every slot served: the masters of a node that started
// again refuse writes for their first two seconds.
func awaitClusterOK(ctx context.Context, node string, servers []*redis.Client) error {
	return redistest.Await(ctx, node+": cluster ok", clusterSettleTimeout, func(ctx context.Context) (bool, error) {
		for _, c := range servers {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return false, err
			}
			state, slotsOK := infoField(info, "cluster_state"), infoField(info, "cluster_slots_ok")
			if state != "ok" || slotsOK != strconv.Itoa(hashSlots) {
				return false, fmt.Errorf("%s: cluster_state %q, cluster_slots_ok %q", c.Options().Addr, state, slotsOK)
			}
		}
		return true, nil
	})
}

// clusterNode returns Cluster lock node i or an error naming the bad index.
func (e *Env) clusterNode(i int) (ClusterNode, error) {
	if i < 0 || i >= len(e.Cluster.ClusterNodes) {
		return nil, fmt.Errorf("chaos: fault names Cluster node %d; the scenario has %d (a scenario of Cluster nodes sets ClusterMasters)", i, len(e.Cluster.ClusterNodes))
	}
	return e.Cluster.ClusterNodes[i], nil
}

// onClusterNodes runs op on each of the Cluster nodes at once (a fault in
// several deployments at the same time, as a rack or a bad deploy would
// cause) and notes what each did.
func (e *Env) onClusterNodes(nodes Nodes, op func(n ClusterNode) (string, error)) error {
	for _, i := range nodes { // all named right before any is acted on
		if _, err := e.clusterNode(i); err != nil {
			return err
		}
	}
	return nodes.atOnce(e, func(i int) (string, error) { return op(e.Cluster.ClusterNodes[i]) })
}

// clusterFault is a fault that acts on Cluster lock nodes, and the only
// kind a scenario of Cluster nodes may apply (their clients do not go
// through the proxies, and Nodes is empty).
type clusterFault interface {
	Fault
	onClusterNodes()
}

func (ShardRestart) onClusterNodes()           {}
func (SlotMove) onClusterNodes()               {}
func (ShardClockJump) onClusterNodes()         {}
func (RegisterReplicationCut) onClusterNodes() {}
func (RegisterFailover) onClusterNodes()       {}
func (ClusterDown) onClusterNodes()            {}

// lockKey is the key of the lock under test (the first of ScanKeys): the
// Cluster faults act on the master serving its slot.
func (e *Env) lockKey() string { return e.ScanKeys[0] }

// ShardRestart restarts, in each of the Cluster nodes Nodes, the master
// serving the lock's slot, empty but keeping its nodes.conf: it comes back
// as the same cluster node serving the same slots, without the lock's
// keys. The restart is done when Apply returns; Heal does nothing.
type ShardRestart struct{ Nodes }

// Name says what the fault does and to which nodes.
func (f ShardRestart) Name() string {
	return fmt.Sprintf("shard-restart-empty(%s: the lock's master)", f.Nodes.list())
}

// Apply restarts the masters.
func (f ShardRestart) Apply(ctx context.Context, env *Env) error {
	return env.onClusterNodes(f.Nodes, func(n ClusterNode) (string, error) {
		addr, err := n.RestartMasterOf(ctx, env.lockKey())
		return "the lock's master " + addr + " restarted empty, keeping its slots", err
	})
}

// Heal does nothing: the masters are back when Apply returns.
func (ShardRestart) Heal(context.Context, *Env) error { return nil }

// SlotMove moves the lock's slot, in each of the Cluster nodes Nodes, to
// the other master: with its keys (WithKeys: MIGRATE, a reshard) or
// without (the keys are lost). Heal does nothing: the slot stays where it
// went.
type SlotMove struct {
	Nodes
	WithKeys bool
}

// Name says what the fault does and to which nodes.
func (f SlotMove) Name() string {
	how := "with its keys"
	if !f.WithKeys {
		how = "without its keys"
	}
	return fmt.Sprintf("reshard(%s: the lock's slot, %s)", f.Nodes.list(), how)
}

// Apply moves the slot.
func (f SlotMove) Apply(ctx context.Context, env *Env) error {
	return env.onClusterNodes(f.Nodes, func(n ClusterNode) (string, error) {
		from, to, err := n.MoveSlotOf(ctx, env.lockKey(), f.WithKeys)
		return fmt.Sprintf("the lock's slot moved from %s to %s", from, to), err
	})
}

// Heal does nothing: the slot stays with its new master.
func (SlotMove) Heal(context.Context, *Env) error { return nil }

// ShardClockJump moves the wall clock of the master serving the lock's
// slot, in each of the Cluster nodes Nodes, forward By at once; Heal does
// not move it back (as ClockJump).
type ShardClockJump struct {
	Nodes
	By time.Duration
}

// Name says what the fault does and to which nodes.
func (f ShardClockJump) Name() string {
	return fmt.Sprintf("shard-clock-jump(%s: the lock's master +%s)", f.Nodes.list(), f.By)
}

// Apply moves the clocks.
func (f ShardClockJump) Apply(ctx context.Context, env *Env) error {
	return env.onClusterNodes(f.Nodes, func(n ClusterNode) (string, error) {
		addr, err := n.MoveMasterClockOf(ctx, env.lockKey(), f.By)
		return fmt.Sprintf("the clock of the lock's master %s moved +%s", addr, f.By), err
	})
}

// Heal does nothing: a clock that jumped stays where it is.
func (ShardClockJump) Heal(context.Context, *Env) error { return nil }

// clusterScenarios run the mutex on five nodes that are each a Redis
// Cluster of two masters. The holder takes the lock on all five; the
// other client is parked while, in some of the clusters, the master that
// serves the lock's slot loses the lock's key or its clock jumps; then it
// goes for 1.5s while the holder still holds. In a majority of the
// clusters that is a quorum that does not know the lock unless the guards,
// which follow the lock's master, keep those nodes out; the controls
// without the guard show that the fault does bite.
func clusterScenarios() []Scenario {
	// The holder's validity must outlast a master's restart (the cluster
	// refuses writes for 2s after a start) and the challenger's turn.
	const ttl = 8 * time.Second
	rl := RedlockScheme{}
	safe := Expect{Verdict: VerdictSafe}
	byDesign := Expect{Verdict: VerdictUnsafeByDesign}
	majority, all := []int{0, 1, 2}, []int{0, 1, 2, 3, 4}
	during := func(f Fault) []Step {
		return []Step{AwaitHold(AnyClient), HoldBack(), Apply(f), Heal(f), Resume(), Contend(1500 * time.Millisecond), Unpin()}
	}
	cluster := func(name, about string, expect Expect, f Fault) Scenario {
		return Scenario{Name: name, About: about, Scheme: rl, Expect: expect, TTL: ttl, Clients: 2, ClusterMasters: 2, Schedule: during(f)}
	}
	jump := 2 * ttl
	noGrace := cluster("cluster-shard-restart-empty-no-grace",
		"Cluster nodes: as cluster-shard-restart-empty, without the restart grace: the restarted masters vote at once, two holders",
		byDesign, ShardRestart{majority})
	noGrace.RestartGrace = redlock.NoRestartGrace
	movedNoGrace := cluster("cluster-reshard-empty-no-grace",
		"Cluster nodes: as cluster-reshard-empty, without the restart grace: the masters that took the slot vote at once, two holders",
		byDesign, SlotMove{majority, false})
	movedNoGrace.RestartGrace = redlock.NoRestartGrace
	noGuard := cluster("cluster-clock-jump-shard-majority-no-guard",
		"Cluster nodes: as cluster-clock-jump-shard-majority, clock guard off: two holders",
		byDesign, ShardClockJump{majority, jump})
	noGuard.NoClockGuard = true
	return append([]Scenario{
		cluster("cluster-shard-restart-empty",
			"Cluster nodes: in three of five, the master serving the lock's slot restarts empty during a hold, keeping its slots; the guard sees a new master for the slot, which sits out the grace",
			safe, ShardRestart{majority}),
		cluster("cluster-shard-restart-empty-all",
			"Cluster nodes: as cluster-shard-restart-empty, in all five",
			safe, ShardRestart{all}),
		noGrace,
		cluster("cluster-reshard",
			"Cluster nodes: in three of five, the lock's slot moves with its keys (MIGRATE) to the other master during a hold; the new master for the slot sits out the grace",
			safe, SlotMove{majority, true}),
		cluster("cluster-reshard-empty",
			"Cluster nodes: in three of five, the lock's slot moves to the other master without its keys during a hold; the new master for the slot sits out the grace",
			safe, SlotMove{majority, false}),
		movedNoGrace,
		cluster("cluster-clock-jump-shard-majority",
			"Cluster nodes: in three of five, the clock of the master serving the lock's slot jumps 2 TTL during a hold; the clock guard sees it in the next reply",
			safe, ShardClockJump{majority, jump}),
		noGuard,
	}, registerFailoverScenarios()...)
}
