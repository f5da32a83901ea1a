package redistest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Deployments: Redis Cluster with replicas, and a master with replicas
// watched by Sentinels, with the faults that make a deployment lose keys
// (a master restarted empty, a failover, a slot moved, replication cut).

// topologyTimeout bounds every wait for a deployment to settle: a cluster
// to agree, a replica to sync, a failover to finish.
const topologyTimeout = 20 * time.Second

// NodeTimeout is the cluster-node-timeout and Sentinel's
// down-after-milliseconds of the deployments started here: how long a
// master must be unreachable before its replica is promoted.
const NodeTimeout = time.Second

// await polls cond until it holds, ctx is done or topologyTimeout passes.
// Cluster and Sentinel state changes in the servers' cron and gossip, which
// tell nobody: polling is the only way to see them.
func await(ctx context.Context, what string, cond func(ctx context.Context) (bool, error)) error {
	return Await(ctx, what, topologyTimeout, cond)
}

// Await polls cond every 25ms until it holds, ctx is done or timeout
// passes, and then names what it waited for and cond's last error.
func Await(ctx context.Context, what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: %s: not within %v (last error: %v)", what, timeout, last)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// RedisCluster is a Redis Cluster: masters that share the 16384 hash slots
// evenly, each with its replicas. Servers are started with ClusterMode,
// cluster-node-timeout NodeTimeout and cluster-replica-validity-factor 0
// (a replica may be promoted however long its link was down: the lossy
// failovers the tests need).
type RedisCluster struct {
	*Cluster // every server; Stop stops them all
	// Shards are the masters as started, each with its replicas. Faults
	// change who is master: ask MasterFor.
	Shards []Shard
}

// Shard is a master and its replicas, as started.
type Shard struct {
	Master   *Server
	Replicas []*Server
}

// StartRedisCluster starts a cluster of masters, each with replicas
// replicas, and waits until every server sees the whole cluster in state ok
// and every replica is in sync. On error nothing is left running.
func StartRedisCluster(masters, replicas int, opts Options) (*RedisCluster, error) {
	if masters < 1 || replicas < 0 {
		return nil, fmt.Errorf("redistest: cluster of %d masters with %d replicas each: need at least 1 master", masters, replicas)
	}
	opts.ClusterMode = true
	opts.Args = append(opts.Args[:len(opts.Args):len(opts.Args)],
		"--cluster-node-timeout", strconv.Itoa(int(NodeTimeout.Milliseconds())),
		"--cluster-replica-validity-factor", "0")
	all, err := Start(masters*(1+replicas), opts)
	if err != nil {
		return nil, err
	}
	rc := &RedisCluster{Cluster: all}
	if err := rc.form(masters, replicas); err != nil {
		return nil, errors.Join(err, all.Stop())
	}
	return rc, nil
}

// StartRedisClusterT is StartRedisCluster for tests.
func StartRedisClusterT(tb testing.TB, masters, replicas int, opts Options) *RedisCluster {
	tb.Helper()
	skipIfPinnedElsewhere(tb, opts)
	rc, err := StartRedisCluster(masters, replicas, opts)
	return stoppedAtEnd(tb, "redis cluster", rc, err)
}

// StartReplicatedT starts n masters with one replica each (a standalone
// server started with --replicaof, no Sentinel, no Cluster), waits for each
// replica's initial sync, and stops them all at cleanup.
func StartReplicatedT(tb testing.TB, n int, opts Options) (masters *Cluster, replicas []*Server) {
	tb.Helper()
	masters = StartT(tb, n, opts)
	for _, m := range masters.Servers {
		ropts := opts
		ropts.Args = append(slices.Clip(opts.Args), "--replicaof", "127.0.0.1", strconv.Itoa(m.Port))
		replicas = append(replicas, StartT(tb, 1, ropts).Servers[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range replicas {
		if err := RestoreReplication(ctx, r); err != nil { // awaits the sync
			tb.Fatal(err)
		}
	}
	return masters, replicas
}

// StartRedisClustersT starts n Redis Clusters of masters masters with
// replicas replicas each, in parallel (forming a cluster takes seconds), and
// stops them at cleanup: the nodes of a client whose every node is a Cluster.
func StartRedisClustersT(tb testing.TB, n, masters, replicas int, opts Options) []*RedisCluster {
	tb.Helper()
	skipIfPinnedElsewhere(tb, opts)
	return startEachT(tb, n, "redis cluster", func(int) (*RedisCluster, error) { return StartRedisCluster(masters, replicas, opts) })
}

// StartSentinelsT starts n Sentinel deployments, named locks-0 and on, of a
// master with replicas replicas each, in parallel, and stops them at
// cleanup: the nodes of a client whose every node fails over.
func StartSentinelsT(tb testing.TB, n, replicas int, opts Options) []*Sentinels {
	tb.Helper()
	skipIfPinnedElsewhere(tb, opts)
	return startEachT(tb, n, "sentinel deployment", func(i int) (*Sentinels, error) {
		return StartSentinel(fmt.Sprintf("locks-%d", i), replicas, opts)
	})
}

// startEachT runs start(i) for each i below n in parallel, stops at cleanup
// what started, and fails tb if any start failed.
func startEachT[T interface{ Stop() error }](tb testing.TB, n int, what string, start func(i int) (T, error)) []T {
	tb.Helper()
	out := make([]T, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i], errs[i] = start(i) })
	}
	wg.Wait()
	tb.Cleanup(func() {
		for i, x := range out {
			if errs[i] == nil {
				if err := x.Stop(); err != nil {
					tb.Errorf("stopping %s: %v", what, err)
				}
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	return out
}

// ClusterClientsT makes one ClusterClient per cluster, closed at cleanup:
// the nodes of a lock client of its own, as another process would have.
func ClusterClientsT(tb testing.TB, rcs []*RedisCluster) []redis.UniversalClient {
	tb.Helper()
	out := make([]redis.UniversalClient, len(rcs))
	for i, rc := range rcs {
		cc := rc.ClusterClient()
		tb.Cleanup(func() { _ = cc.Close() })
		out[i] = cc
	}
	return out
}

// EachCluster runs do on every cluster of rcs at once and joins their
// errors: a fault meant for several nodes during one hold lands on all of
// them within it, not one cluster's reconfiguration after another.
func EachCluster(rcs []*RedisCluster, do func(rc *RedisCluster) error) error {
	errs := make([]error, len(rcs))
	var wg sync.WaitGroup
	for i, rc := range rcs {
		wg.Go(func() { errs[i] = do(rc) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// SetConfigEpoch gives rdb, a fresh cluster server, its config epoch, which
// it takes only while it knows no other server. A server of another
// cluster may have met it first: one that still has a stopped server's
// address in its view (ports are reused, and the chaos suite runs clusters
// side by side) keeps trying it. A fresh server forgets such a stranger
// with CLUSTER RESET HARD (it holds no key) and is asked again, a few
// times. The Redis Clusters here and the chaos suite's Docker ones use it.
func SetConfigEpoch(ctx context.Context, rdb *redis.Client, epoch int) error {
	var err error
	for range 5 {
		err = rdb.Do(ctx, "cluster", "set-config-epoch", epoch).Err()
		if err == nil || !strings.Contains(err.Error(), "know any other node") {
			return err
		}
		if rerr := rdb.Do(ctx, "cluster", "reset", "hard").Err(); rerr != nil {
			return errors.Join(err, fmt.Errorf("CLUSTER RESET HARD: %w", rerr))
		}
	}
	return err
}

func (rc *RedisCluster) form(masters, replicas int) error {
	ctx := context.Background()
	for i := range masters {
		sh := Shard{Master: rc.Servers[i*(1+replicas)], Replicas: rc.Servers[i*(1+replicas)+1 : (i+1)*(1+replicas)]}
		rc.Shards = append(rc.Shards, sh)
		first, last := i*slotCount/masters, (i+1)*slotCount/masters-1
		m := sh.Master.Client()
		// Distinct epochs up front: no collision for the cluster to settle.
		if err := SetConfigEpoch(ctx, m, i+1); err != nil {
			return fmt.Errorf("redistest: CLUSTER SET-CONFIG-EPOCH on %s: %w", sh.Master.Addr, err)
		}
		if err := m.Do(ctx, "cluster", "addslotsrange", first, last).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER ADDSLOTSRANGE %d %d on %s: %w", first, last, sh.Master.Addr, err)
		}
	}
	seed := rc.Servers[0]
	// The seed's bus port is not Port+10000: a plain MEET would fail.
	for _, s := range rc.Servers[1:] {
		if err := s.Client().Do(ctx, "cluster", "meet", "127.0.0.1", seed.Port, seed.BusPort).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET from %s: %w", s.Addr, err)
		}
	}
	n := len(rc.Servers)
	if err := await(ctx, "every server knows every other", func(ctx context.Context) (bool, error) {
		for _, s := range rc.Servers {
			nodes, err := s.Client().ClusterNodes(ctx).Result()
			if err != nil {
				return false, err
			}
			if strings.Count(strings.TrimSpace(nodes), "\n")+1 != n || strings.Contains(nodes, "handshake") || strings.Contains(nodes, "noaddr") {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	for _, sh := range rc.Shards {
		id, err := sh.Master.ID(ctx)
		if err != nil {
			return err
		}
		for _, r := range sh.Replicas {
			if err := r.Client().Do(ctx, "cluster", "replicate", id).Err(); err != nil {
				return fmt.Errorf("redistest: CLUSTER REPLICATE %s on %s: %w", id, r.Addr, err)
			}
		}
	}
	return rc.AwaitHealthy(ctx)
}

// slotCount is the number of hash slots of Redis Cluster.
const slotCount = 16384

// ID is the node's cluster node id (CLUSTER MYID).
func (s *Server) ID(ctx context.Context) (string, error) {
	id, err := s.Client().Do(ctx, "cluster", "myid").Text()
	if err != nil {
		return "", fmt.Errorf("redistest: CLUSTER MYID on %s: %w", s.Addr, err)
	}
	return id, nil
}

// AwaitHealthy waits until every running server is in cluster state ok
// with every slot assigned, and every running replica is in sync with its
// master.
func (rc *RedisCluster) AwaitHealthy(ctx context.Context) error {
	return await(ctx, "cluster healthy", func(ctx context.Context) (bool, error) {
		for s := range running(rc.Servers) {
			info, err := s.Client().ClusterInfo(ctx).Result()
			if err != nil {
				return false, err
			}
			f := parseFields(info)
			if f["cluster_state"] != "ok" || f["cluster_slots_ok"] != strconv.Itoa(slotCount) {
				return false, fmt.Errorf("%s: %s, %s slots ok", s.Addr, f["cluster_state"], f["cluster_slots_ok"])
			}
			if ok, err := s.inSync(ctx); !ok {
				return false, err
			}
		}
		return true, nil
	})
}

// inSync tells whether s is a master, or a replica whose link to its
// master is up.
func (s *Server) inSync(ctx context.Context) (bool, error) {
	info, err := s.Client().Info(ctx, "replication").Result()
	if err != nil {
		return false, err
	}
	f := parseFields(info)
	if f["role"] == "slave" && f["master_link_status"] != "up" {
		return false, fmt.Errorf("%s: replica, link to its master %s", s.Addr, f["master_link_status"])
	}
	return true, nil
}

func parseFields(s string) map[string]string {
	fields := make(map[string]string)
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

// byPort finds the server of the deployment listening on port.
func (c *Cluster) byPort(port int) *Server {
	for _, s := range c.Servers {
		if s.Port == port {
			return s
		}
	}
	return nil
}

// running yields those of servers that run, each checked as the loop
// reaches it.
func running(servers []*Server) iter.Seq[*Server] {
	return func(yield func(*Server) bool) {
		for _, s := range servers {
			if s.Running() && !yield(s) {
				return
			}
		}
	}
}

// MasterFor is the server that serves slot now, as a running server other
// than the one asked about sees it (CLUSTER SHARDS would need 7.0.0+;
// CLUSTER SLOTS is older and enough).
func (rc *RedisCluster) MasterFor(ctx context.Context, slot int) (*Server, error) {
	var last error
	for s := range running(rc.Servers) {
		slots, err := s.Client().ClusterSlots(ctx).Result()
		if err != nil {
			last = err
			continue
		}
		for _, r := range slots {
			if r.Start <= slot && slot <= r.End && len(r.Nodes) > 0 {
				_, port, _ := strings.Cut(r.Nodes[0].Addr, ":")
				p, _ := strconv.Atoi(port)
				if m := rc.byPort(p); m != nil {
					return m, nil
				}
			}
		}
		last = fmt.Errorf("%s: slot %d unassigned", s.Addr, slot)
	}
	return nil, fmt.Errorf("redistest: no server tells who serves slot %d: %v", slot, last)
}

// ReplicaAddrs lists the addresses that CLUSTER NODES (its reply, nodes)
// shows replicating the node of ID masterID and not failed.
func ReplicaAddrs(nodes, masterID string) []string {
	var addrs []string
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || f[3] != masterID || strings.Contains(f[2], "fail") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		addrs = append(addrs, addr)
	}
	return addrs
}

// ReplicasOf lists the running servers that replicate master now.
func (rc *RedisCluster) ReplicasOf(ctx context.Context, master *Server) ([]*Server, error) {
	id, err := master.ID(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := master.Client().ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var out []*Server
	for _, addr := range ReplicaAddrs(nodes, id) {
		_, port, _ := strings.Cut(addr, ":")
		p, _ := strconv.Atoi(port)
		if s := rc.byPort(p); s != nil && s.Running() {
			out = append(out, s)
		}
	}
	return out, nil
}

// awaitMaster waits until every running server agrees that want serves
// slot, and want says it is a master.
func (rc *RedisCluster) awaitMaster(ctx context.Context, slot int, want *Server) error {
	return await(ctx, fmt.Sprintf("%s serving slot %d", want.Addr, slot), func(ctx context.Context) (bool, error) {
		role, err := want.Client().Do(ctx, "role").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			return false, err
		}
		for s := range running(rc.Servers) {
			slots, err := s.Client().ClusterSlots(ctx).Result()
			if err != nil {
				return false, err
			}
			found := false
			for _, r := range slots {
				if r.Start <= slot && slot <= r.End && len(r.Nodes) > 0 && r.Nodes[0].Addr == want.Addr {
					found = true
				}
			}
			if !found {
				return false, nil
			}
		}
		return true, nil
	})
}

// KillMaster kills the master serving slot (SIGKILL) and waits until one of
// its replicas was promoted in its place and the cluster is ok again. It
// returns the killed server and the new master.
func (rc *RedisCluster) KillMaster(ctx context.Context, slot int) (killed, promoted *Server, err error) {
	m, err := rc.MasterFor(ctx, slot)
	if err != nil {
		return nil, nil, err
	}
	reps, err := rc.ReplicasOf(ctx, m)
	if err != nil || len(reps) == 0 {
		return nil, nil, fmt.Errorf("redistest: KillMaster: %s has no replica to promote (%v)", m.Addr, err)
	}
	if err := m.Kill(); err != nil {
		return nil, nil, err
	}
	var p *Server
	err = await(ctx, "a replica promoted for slot "+strconv.Itoa(slot), func(ctx context.Context) (bool, error) {
		nm, err := rc.MasterFor(ctx, slot)
		if err != nil || nm == m {
			return false, err
		}
		p = nm
		return true, nil
	})
	if err == nil {
		err = rc.awaitMaster(ctx, slot, p)
	}
	return m, p, err
}

// Failover promotes a replica of the master serving slot with CLUSTER
// FAILOVER FORCE: it does not wait for the replica to catch up (nor, with
// takeover, for the other masters to agree), so writes the replica did not
// get are lost. It waits until every server sees the replica as the
// slot's master, and returns it.
func (rc *RedisCluster) Failover(ctx context.Context, slot int, takeover bool) (*Server, error) {
	m, err := rc.MasterFor(ctx, slot)
	if err != nil {
		return nil, err
	}
	reps, err := rc.ReplicasOf(ctx, m)
	if err != nil || len(reps) == 0 {
		return nil, fmt.Errorf("redistest: Failover: %s has no replica (%v)", m.Addr, err)
	}
	r := reps[0]
	mode := "force"
	if takeover {
		mode = "takeover"
	}
	if err := r.Client().Do(ctx, "cluster", "failover", mode).Err(); err != nil {
		return nil, fmt.Errorf("redistest: CLUSTER FAILOVER %s on %s: %w", strings.ToUpper(mode), r.Addr, err)
	}
	return r, rc.awaitMaster(ctx, slot, r)
}

// RestartMaster restarts the master serving slot without its data (there
// is none to keep without Persistence) but with its nodes.conf: it comes
// back empty, as the same cluster node serving the same slots, before its
// replicas could take over. It waits until the cluster is ok again and
// returns the server.
func (rc *RedisCluster) RestartMaster(ctx context.Context, slot int) (*Server, error) {
	m, err := rc.MasterFor(ctx, slot)
	if err != nil {
		return nil, err
	}
	if err := m.restartKeepingClusterConfig(); err != nil {
		return nil, err
	}
	if err := rc.awaitMaster(ctx, slot, m); err != nil {
		return nil, err
	}
	return m, rc.AwaitHealthy(ctx)
}

// restartKeepingClusterConfig restarts s keeping only nodes.conf (and the
// AOF, if Persistence keeps one).
func (s *Server) restartKeepingClusterConfig() error {
	if s.opts.Persistence {
		return s.Restart(true)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		return err
	}
	// Without persistence nothing but nodes.conf is in the data dir that
	// a start would read (RDB is off): the keys are gone.
	if err := s.startLocked(); err != nil {
		return fmt.Errorf("redistest: restarting %s: %w", s.Addr, err)
	}
	return nil
}

// MoveSlot migrates slot, with its keys, from the master serving it to the
// master to, the way redis-cli --cluster reshard does (IMPORTING,
// MIGRATING, MIGRATE, SETSLOT NODE everywhere), and waits until every
// server agrees.
func (rc *RedisCluster) MoveSlot(ctx context.Context, slot int, to *Server) error {
	from, err := rc.MasterFor(ctx, slot)
	if err != nil {
		return err
	}
	if from == to {
		return nil
	}
	toID, err := importSlot(ctx, slot, from, to)
	if err != nil {
		return err
	}
	if err := from.Client().Do(ctx, "cluster", "setslot", slot, "migrating", toID).Err(); err != nil {
		return fmt.Errorf("redistest: SETSLOT MIGRATING on %s: %w", from.Addr, err)
	}
	for {
		keys, err := from.Client().ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", "127.0.0.1", to.Port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := from.Client().Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("redistest: MIGRATE from %s: %w", from.Addr, err)
		}
	}
	for _, s := range []*Server{to, from} {
		if err := s.Client().Do(ctx, "cluster", "setslot", slot, "node", toID).Err(); err != nil {
			return fmt.Errorf("redistest: SETSLOT NODE on %s: %w", s.Addr, err)
		}
	}
	return rc.awaitMaster(ctx, slot, to)
}

// importSlot marks slot IMPORTING from the master from on the master to,
// the first step of moving it with or without its keys, and returns to's
// node ID.
func importSlot(ctx context.Context, slot int, from, to *Server) (toID string, err error) {
	fromID, err := from.ID(ctx)
	if err != nil {
		return "", err
	}
	toID, err = to.ID(ctx)
	if err != nil {
		return "", err
	}
	if err := to.Client().Do(ctx, "cluster", "setslot", slot, "importing", fromID).Err(); err != nil {
		return "", fmt.Errorf("redistest: SETSLOT IMPORTING on %s: %w", to.Addr, err)
	}
	return toID, nil
}

// MoveSlotEmpty gives slot to the master to without its keys: to claims
// it (SETSLOT IMPORTING, then SETSLOT NODE to itself, which bumps its
// config epoch without asking the others), and the master that served it
// learns from the gossip that a newer epoch owns the slot and deletes its
// keys there. This is a reshard gone wrong (an operator's CLUSTER SETSLOT,
// a failed migration fixed by hand): the slot's keys are lost. It waits
// until every server agrees that to serves slot and the old master holds
// no key of it.
func (rc *RedisCluster) MoveSlotEmpty(ctx context.Context, slot int, to *Server) error {
	from, err := rc.MasterFor(ctx, slot)
	if err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("redistest: MoveSlotEmpty: %s already serves slot %d", to.Addr, slot)
	}
	toID, err := importSlot(ctx, slot, from, to)
	if err != nil {
		return err
	}
	if err := to.Client().Do(ctx, "cluster", "setslot", slot, "node", toID).Err(); err != nil {
		return fmt.Errorf("redistest: SETSLOT NODE on %s: %w", to.Addr, err)
	}
	if err := rc.awaitMaster(ctx, slot, to); err != nil {
		return err
	}
	return await(ctx, fmt.Sprintf("%s dropping its keys of slot %d", from.Addr, slot), func(ctx context.Context) (bool, error) {
		n, err := from.Client().ClusterCountKeysInSlot(ctx, slot).Result()
		return err == nil && n == 0, err
	})
}

// CutReplication breaks the link of replica to its master and keeps it
// broken: the replica is given a wrong masterauth, so its reconnections
// are refused, and its master connection is killed. Writes to the master
// from now on are not on the replica; a failover to it loses them.
// RestoreReplication mends it.
func CutReplication(ctx context.Context, replica *Server) error {
	rdb := replica.Client()
	if err := rdb.ConfigSet(ctx, "masterauth", "redistest-wrong-password").Err(); err != nil {
		return fmt.Errorf("redistest: CONFIG SET masterauth on %s: %w", replica.Addr, err)
	}
	if err := rdb.Do(ctx, "client", "kill", "type", "master").Err(); err != nil {
		return fmt.Errorf("redistest: CLIENT KILL TYPE master on %s: %w", replica.Addr, err)
	}
	return await(ctx, "replication of "+replica.Addr+" cut", func(ctx context.Context) (bool, error) {
		info, err := rdb.Info(ctx, "replication").Result()
		return err == nil && parseFields(info)["master_link_status"] == "down", err
	})
}

// RestoreReplication undoes CutReplication and waits until the replica is
// in sync again.
func RestoreReplication(ctx context.Context, replica *Server) error {
	if err := replica.Client().ConfigSet(ctx, "masterauth", "").Err(); err != nil {
		return fmt.Errorf("redistest: CONFIG SET masterauth on %s: %w", replica.Addr, err)
	}
	return await(ctx, "replication of "+replica.Addr+" restored", replica.inSync)
}

// ClusterClient is a go-redis client of the whole cluster, seeded with
// every server's address. It shows faults as Server.Client does. The
// caller closes it.
func (rc *RedisCluster) ClusterClient() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 rc.Addrs(),
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
		DisableIdentity:       true,
	})
}

// Sentinels is a master with replicas, watched by three Sentinels
// (redis-server --sentinel) that promote a replica when the master is down
// for NodeTimeout.
type Sentinels struct {
	*Cluster  // every server, Sentinels included; Stop stops them all
	Name      string
	Master    *Server   // as started; after a failover ask CurrentMaster
	Replicas  []*Server // as started
	Sentinels []*Server
}

// StartSentinel starts a master named name with replicas replicas and three
// Sentinels, and waits until every Sentinel knows every replica and the
// other Sentinels.
func StartSentinel(name string, replicas int, opts Options) (*Sentinels, error) {
	if replicas < 1 {
		return nil, fmt.Errorf("redistest: Sentinel with %d replicas: need at least 1", replicas)
	}
	if opts.ClusterMode {
		return nil, errors.New("redistest: Sentinel watches masters without ClusterMode")
	}
	data, err := Start(1+replicas, opts)
	if err != nil {
		return nil, err
	}
	ss := &Sentinels{Cluster: data, Name: name, Master: data.Servers[0], Replicas: data.Servers[1:]}
	if err := ss.start(opts); err != nil {
		return nil, errors.Join(err, ss.Stop())
	}
	return ss, nil
}

// StartSentinelT is StartSentinel for tests.
func StartSentinelT(tb testing.TB, name string, replicas int, opts Options) *Sentinels {
	tb.Helper()
	skipIfPinnedElsewhere(tb, opts)
	ss, err := StartSentinel(name, replicas, opts)
	return stoppedAtEnd(tb, "sentinel deployment", ss, err)
}

// StartDeploymentsT starts the two kinds of node that are deployments: a
// Redis Cluster of two masters with replicas replicas each, and a master
// named "locks" with one replica watched by Sentinels; both stop at
// cleanup. It returns once the cluster is healthy (AwaitHealthy, bounded by
// ctx).
func StartDeploymentsT(tb testing.TB, ctx context.Context, replicas int) (*RedisCluster, *Sentinels) {
	tb.Helper()
	rc := StartRedisClusterT(tb, 2, replicas, Options{})
	ss := StartSentinelT(tb, "locks", 1, Options{})
	if err := rc.AwaitHealthy(ctx); err != nil {
		tb.Fatal(err)
	}
	return rc, ss
}

func (ss *Sentinels) start(opts Options) error {
	ctx := context.Background()
	for _, r := range ss.Replicas {
		if err := r.Client().ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(ss.Master.Port)).Err(); err != nil {
			return fmt.Errorf("redistest: REPLICAOF on %s: %w", r.Addr, err)
		}
	}
	for _, r := range ss.Replicas {
		if err := await(ctx, r.Addr+" in sync", r.inSync); err != nil {
			return err
		}
	}
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 5000\n",
		ss.Name, ss.Master.Port, ss.Name, NodeTimeout.Milliseconds(), ss.Name)
	// The Sentinels are the data nodes' build: Valkey's Sentinel watches
	// Valkey, Redis' Redis.
	so := Options{sentinelConf: conf}
	for i := range 3 {
		s, err := startServer(ss.Build, filepath.Join(ss.root, fmt.Sprintf("sentinel%d", i)), so)
		if err != nil {
			return fmt.Errorf("redistest: sentinel %d: %w", i, err)
		}
		ss.Sentinels = append(ss.Sentinels, s)
		ss.Servers = append(ss.Servers, s)
	}
	return await(ctx, "sentinels know the deployment", func(ctx context.Context) (bool, error) {
		for _, s := range ss.Sentinels {
			reps, err := s.Client().Do(ctx, "sentinel", "replicas", ss.Name).Slice()
			if err != nil || len(reps) < len(ss.Replicas) {
				return false, err
			}
			sens, err := s.Client().Do(ctx, "sentinel", "sentinels", ss.Name).Slice()
			if err != nil || len(sens) < len(ss.Sentinels)-1 {
				return false, err
			}
		}
		return true, nil
	})
}

// startSentinelLocked runs the server as a Sentinel. s.mu must be held.
func (s *Server) startSentinelLocked() error {
	return s.runLocked(append([]string{s.sentinel, "--sentinel"}, s.processArgs()...))
}

// FailoverClient is a go-redis client of the deployment's master, found
// through its Sentinels (redis.NewFailoverClient), as an application
// would have. The caller closes it.
func (ss *Sentinels) FailoverClient() *redis.Client {
	return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: ss.Name, SentinelAddrs: ss.SentinelAddrs(), ContextTimeoutEnabled: true})
}

// SentinelAddrs are the Sentinels' addresses.
func (ss *Sentinels) SentinelAddrs() []string {
	addrs := make([]string, len(ss.Sentinels))
	for i, s := range ss.Sentinels {
		addrs[i] = s.Addr
	}
	return addrs
}

// CurrentMaster is the master every Sentinel names now.
func (ss *Sentinels) CurrentMaster(ctx context.Context) (*Server, error) {
	var m *Server
	for s := range running(ss.Sentinels) {
		addr, err := s.Client().Do(ctx, "sentinel", "get-master-addr-by-name", ss.Name).StringSlice()
		if err != nil || len(addr) != 2 {
			return nil, fmt.Errorf("redistest: SENTINEL GET-MASTER-ADDR-BY-NAME on %s: %v %v", s.Addr, addr, err)
		}
		p, _ := strconv.Atoi(addr[1])
		got := ss.byPort(p)
		if got == nil || (m != nil && got != m) {
			return nil, fmt.Errorf("redistest: the Sentinels disagree on the master of %s", ss.Name)
		}
		m = got
	}
	return m, nil
}

// awaitNewMaster waits until every Sentinel names a master other than old,
// and that server says it is a master.
func (ss *Sentinels) awaitNewMaster(ctx context.Context, old *Server) (*Server, error) {
	var m *Server
	err := await(ctx, "a new master of "+ss.Name, func(ctx context.Context) (bool, error) {
		cur, err := ss.CurrentMaster(ctx)
		if err != nil || cur == old {
			return false, err
		}
		role, err := cur.Client().Do(ctx, "role").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			return false, err
		}
		m = cur
		return true, nil
	})
	return m, err
}

// Failover forces a failover (SENTINEL FAILOVER: no agreement asked, the
// master is not even down) and waits until a replica is the new master.
func (ss *Sentinels) Failover(ctx context.Context) (*Server, error) {
	old, err := ss.CurrentMaster(ctx)
	if err != nil {
		return nil, err
	}
	if err := ss.Sentinels[0].Client().Do(ctx, "sentinel", "failover", ss.Name).Err(); err != nil {
		return nil, fmt.Errorf("redistest: SENTINEL FAILOVER %s: %w", ss.Name, err)
	}
	return ss.awaitNewMaster(ctx, old)
}

// KillMaster kills the current master and waits until the Sentinels
// promoted a replica. It returns the killed server and the new master.
func (ss *Sentinels) KillMaster(ctx context.Context) (killed, promoted *Server, err error) {
	old, err := ss.CurrentMaster(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := old.Kill(); err != nil {
		return nil, nil, err
	}
	m, err := ss.awaitNewMaster(ctx, old)
	return old, m, err
}

// RestartMaster restarts the current master empty (no persistence: the
// keys are gone) before the Sentinels notice, and waits until it answers.
// Its replicas then resync from it and lose the keys too.
func (ss *Sentinels) RestartMaster(ctx context.Context) (*Server, error) {
	m, err := ss.CurrentMaster(ctx)
	if err != nil {
		return nil, err
	}
	return m, m.Restart(true)
}
