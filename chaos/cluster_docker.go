package chaos

// Cluster lock nodes on the Docker backend: each master is a container of
// the node image on the host's network, listening on 127.0.0.1 and a free
// port, with its cluster bus on another free port. The masters and this
// process then reach every master at the address it announces (MOVED,
// CLUSTER SLOTS), as with the process backend's servers; a bridge network
// would need announced addresses both sides reach. The faults act as on
// processes: a restart kills the container and starts it again (its
// writable layer keeps nodes.conf, no persistence keeps the keys), a slot
// moves with the same CLUSTER SETSLOT steps as redistest's, and the clock
// is the container's libfaketime file.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/quorumlabs/redlock/redistest"
	"github.com/redis/go-redis/v9"
)

const (
	// clusterNodeTimeout is the masters' cluster-node-timeout, as
	// redistest.NodeTimeout on processes.
	clusterNodeTimeout = time.Second
	// clusterSettleTimeout bounds every wait for a cluster to agree.
	clusterSettleTimeout = 20 * time.Second
	// hashSlots is the number of hash slots of Redis Cluster.
	hashSlots = 16384
)

// startClusterNodes starts spec.Nodes Redis Clusters of
// spec.ClusterMasters master containers each, plus the resource server
// (on the bridge, as for plain nodes), all in parallel.
func (b *DockerBackend) startClusterNodes(ctx context.Context, spec ClusterSpec) (*Cluster, error) {
	if err := checkClusterSpec(spec); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "redlock-chaos-docker-cluster-")
	if err != nil {
		return nil, err
	}
	nodes := make([]*dockerClusterNode, spec.Nodes)
	var res *dockerNode
	errs := make([]error, spec.Nodes+1)
	var wg sync.WaitGroup
	for i := range nodes {
		n := &dockerClusterNode{name: fmt.Sprintf("n%d", i), masters: make([]*dockerClusterMaster, spec.ClusterMasters),
			replicas: make([]*dockerClusterMaster, spec.ClusterMasters*spec.ClusterReplicas)}
		nodes[i] = n
		wg.Go(func() { errs[i] = b.startClusterNode(ctx, n, filepath.Join(tmp, n.name), spec.FakeTime) })
	}
	wg.Go(func() {
		res, errs[spec.Nodes] = b.startNode(ctx, "res", filepath.Join(tmp, "res"), false, "", false, nil, nil)
	})
	wg.Wait()
	stop := func() error {
		var errs []error
		for _, n := range nodes {
			for _, m := range n.servers() {
				if m != nil {
					errs = append(errs, m.stop())
				}
			}
		}
		if res != nil {
			errs = append(errs, res.terminate())
		}
		errs = append(errs, os.RemoveAll(tmp))
		return errors.Join(errs...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, stop())
	}
	c := &Cluster{Backend: b.Name(), HostIP: "127.0.0.1", Resource: res, stop: stop}
	for _, n := range nodes {
		c.ClusterNodes = append(c.ClusterNodes, n)
	}
	return c, nil
}

// startClusterNode starts n's masters and replicas and forms the
// cluster: the slots shared evenly among the masters, every server
// meeting the first, each replica following its master, the cluster ok
// everywhere.
func (b *DockerBackend) startClusterNode(ctx context.Context, n *dockerClusterNode, dir string, fake bool) error {
	errs := make([]error, len(n.masters)+len(n.replicas))
	var wg sync.WaitGroup
	for i := range n.masters {
		name := fmt.Sprintf("%s-m%d", n.name, i)
		wg.Go(func() { n.masters[i], errs[i] = b.startClusterMaster(ctx, name, filepath.Join(dir, name), fake) })
	}
	for i := range n.replicas {
		name := fmt.Sprintf("%s-r%d", n.name, i)
		wg.Go(func() {
			n.replicas[i], errs[len(n.masters)+i] = b.startClusterMaster(ctx, name, filepath.Join(dir, name), fake)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return n.form(ctx)
}

// startClusterMaster starts one master container on the host's network,
// trying other ports when one was taken meanwhile.
func (b *DockerBackend) startClusterMaster(ctx context.Context, name, dir string, fake bool) (*dockerClusterMaster, error) {
	for attempt := 1; ; attempt++ {
		m, err := b.startClusterMasterOnFreePorts(ctx, name, dir, fake)
		if err == nil {
			return m, nil
		}
		taken := m != nil && m.ctr != nil && m.exitedOnTakenPort(ctx)
		if m != nil {
			err = errors.Join(err, m.stop())
		}
		if attempt == portAttempts || !taken {
			return nil, err
		}
	}
}

func (b *DockerBackend) startClusterMasterOnFreePorts(ctx context.Context, name, dir string, fake bool) (*dockerClusterMaster, error) {
	port, err := redistest.FreePort()
	if err != nil {
		return nil, err
	}
	busPort, err := redistest.FreePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	m := &dockerClusterMaster{
		dockerNode: &dockerNode{backend: b, name: name, addr: addr},
		port:       port,
		busPort:    busPort,
		rdb:        redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialTimeout: time.Second, ReadTimeout: 2 * time.Second}),
	}
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no", "--dir", "/data"}, redisArgs(false, "")...)
	args = append(args, clusterArgs...)
	args = append(args, "--cluster-enabled", "yes", "--cluster-require-full-coverage", "no",
		"--cluster-port", strconv.Itoa(busPort), "--cluster-announce-ip", "127.0.0.1",
		"--cluster-node-timeout", strconv.Itoa(int(clusterNodeTimeout.Milliseconds())))
	env := map[string]string{}
	var binds []string
	if fake {
		bind, err := m.fakeClock(dir, env)
		if err != nil {
			return m, err
		}
		binds = append(binds, bind)
	}
	m.ctr, err = b.runServer(ctx, name, args, env, binds, func(hc *container.HostConfig) { hc.NetworkMode = "host" })
	if err != nil {
		return m, err
	}
	if err := waitPing(ctx, m.addr, nil, 20*time.Second); err != nil {
		return m, err
	}
	return m, nil
}

// exitedOnTakenPort tells whether the master's container stopped because
// one of its ports was taken before redis-server bound it (on the host's
// network Docker binds nothing: redis-server says so and exits).
func (m *dockerClusterMaster) exitedOnTakenPort(ctx context.Context) bool {
	inspect, err := m.ctr.Inspect(ctx)
	if err != nil || inspect.State == nil || inspect.State.Running {
		return false
	}
	logs, err := m.ctr.Logs(ctx)
	if err != nil {
		return false
	}
	defer logs.Close()
	out, _ := io.ReadAll(logs) // what was read before an error is enough to tell
	return bytes.Contains(out, []byte("Address already in use"))
}

// dockerClusterMaster is one server container of a Cluster lock node: a
// master, or a replica (which a failover may make a master).
type dockerClusterMaster struct {
	*dockerNode
	port, busPort int
	rdb           *redis.Client // for setup and faults, as directClient
}

// stop removes the container and closes the client.
func (m *dockerClusterMaster) stop() error {
	return errors.Join(m.terminate(), m.rdb.Close())
}

// dockerClusterNode is a Redis Cluster of server containers.
type dockerClusterNode struct {
	name    string
	masters []*dockerClusterMaster // as started
	// replicas are the replicas as started, len(replicas)/len(masters)
	// per master, in the masters' order.
	replicas []*dockerClusterMaster

	clocks clockOffsets[*dockerClusterMaster] // each master's
	cut    cutReplicas[*dockerClusterMaster]
}

// servers are every server of the node, masters first.
func (n *dockerClusterNode) servers() []*dockerClusterMaster {
	return append(append([]*dockerClusterMaster(nil), n.masters...), n.replicas...)
}

func (n *dockerClusterNode) Name() string { return n.name }

func (n *dockerClusterNode) Seeds() []string {
	seeds := make([]string, len(n.masters))
	for i, m := range n.masters {
		seeds[i] = m.addr
	}
	return seeds
}

// do runs one command on a master.
func (m *dockerClusterMaster) do(ctx context.Context, args ...any) *redis.Cmd {
	return m.rdb.Do(ctx, args...)
}

// form gives master i the i-th share of the slots with config epoch i+1
// (distinct epochs: no collision to settle), makes every other master
// meet the first on its bus port, and waits until every master knows
// every other and the cluster is ok.
func (n *dockerClusterNode) form(ctx context.Context) error {
	k := len(n.masters)
	for i, m := range n.masters {
		first, last := i*hashSlots/k, (i+1)*hashSlots/k-1
		if err := redistest.SetConfigEpoch(ctx, m.rdb, i+1); err != nil {
			return fmt.Errorf("chaos: %s: CLUSTER SET-CONFIG-EPOCH: %w", m.name, err)
		}
		if err := m.do(ctx, "cluster", "addslotsrange", first, last).Err(); err != nil {
			return fmt.Errorf("chaos: %s: CLUSTER ADDSLOTSRANGE %d %d: %w", m.name, first, last, err)
		}
	}
	seed, all := n.masters[0], n.servers()
	for _, m := range all[1:] {
		if err := m.do(ctx, "cluster", "meet", "127.0.0.1", seed.port, seed.busPort).Err(); err != nil {
			return fmt.Errorf("chaos: %s: CLUSTER MEET %s: %w", m.name, seed.addr, err)
		}
	}
	if err := n.await(ctx, "every server knows every other", func(ctx context.Context) (bool, error) {
		for _, m := range all {
			nodes, err := m.do(ctx, "cluster", "nodes").Text()
			if err != nil {
				return false, err
			}
			if known := strings.Count(strings.TrimSpace(nodes), "\n") + 1; known != len(all) || strings.Contains(nodes, "handshake") || strings.Contains(nodes, "noaddr") {
				return false, fmt.Errorf("%s knows %d of %d servers:\n%s", m.name, known, len(all), nodes)
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	if len(n.replicas) > 0 {
		per := len(n.replicas) / k
		for i, r := range n.replicas {
			id, err := n.masters[i/per].do(ctx, "cluster", "myid").Text()
			if err != nil {
				return fmt.Errorf("chaos: %s: CLUSTER MYID: %w", n.masters[i/per].name, err)
			}
			if err := r.do(ctx, "cluster", "replicate", id).Err(); err != nil {
				return fmt.Errorf("chaos: %s: CLUSTER REPLICATE %s: %w", r.name, id, err)
			}
		}
	}
	return n.awaitHealthy(ctx)
}

// await polls cond until it holds, ctx is done or clusterSettleTimeout
// passes: cluster state changes in the servers' cron and gossip, which
// tell nobody.
func (n *dockerClusterNode) await(ctx context.Context, what string, cond func(ctx context.Context) (bool, error)) error {
	return redistest.Await(ctx, n.name+": "+what, clusterSettleTimeout, cond)
}

// awaitHealthy waits until every server is in cluster state ok with every
// slot assigned, and every replica's link to its master is up.
func (n *dockerClusterNode) awaitHealthy(ctx context.Context) error {
	return n.await(ctx, "cluster healthy", func(ctx context.Context) (bool, error) {
		for _, m := range n.servers() {
			info, err := m.do(ctx, "cluster", "info").Text()
			if err != nil {
				return false, err
			}
			state, slotsOK := infoField(info, "cluster_state"), infoField(info, "cluster_slots_ok")
			if state != "ok" || slotsOK != strconv.Itoa(hashSlots) {
				return false, fmt.Errorf("%s: cluster_state %q, cluster_slots_ok %q", m.name, state, slotsOK)
			}
			repl, err := m.do(ctx, "info", "replication").Text()
			if err != nil {
				return false, err
			}
			if infoField(repl, "role") == "slave" && infoField(repl, "master_link_status") != "up" {
				return false, fmt.Errorf("%s: replica, link to its master %s", m.name, infoField(repl, "master_link_status"))
			}
		}
		return true, nil
	})
}

// infoField is the value of field in an INFO-style reply, or "".
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v
		}
	}
	return ""
}

// masterOfKey is key's slot and the master that serves it now.
func (n *dockerClusterNode) masterOfKey(ctx context.Context, key string) (int, *dockerClusterMaster, error) {
	slot, err := n.slotOf(ctx, key)
	if err != nil {
		return 0, nil, err
	}
	m, err := n.masterFor(ctx, slot)
	return slot, m, err
}

// slotOf asks a master for key's slot.
func (n *dockerClusterNode) slotOf(ctx context.Context, key string) (int, error) {
	var last error
	for _, m := range n.masters {
		slot, err := m.do(ctx, "cluster", "keyslot", key).Int()
		if err == nil {
			return slot, nil
		}
		last = err
	}
	return 0, fmt.Errorf("chaos: %s: no master tells the slot of %q: %v", n.name, key, last)
}

// servingAddr is the address that serves slot in m's CLUSTER SLOTS, or "".
func (m *dockerClusterMaster) servingAddr(ctx context.Context, slot int) (string, error) {
	slots, err := m.rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, r := range slots {
		if int(r.Start) <= slot && slot <= int(r.End) && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr, nil
		}
	}
	return "", nil
}

// masterFor is the master that serves slot now, as the first master that
// answers sees it.
func (n *dockerClusterNode) masterFor(ctx context.Context, slot int) (*dockerClusterMaster, error) {
	var last error
	for _, m := range n.masters {
		addr, err := m.servingAddr(ctx, slot)
		if err != nil {
			last = err
			continue
		}
		for _, s := range n.servers() {
			if s.addr == addr {
				return s, nil
			}
		}
		last = fmt.Errorf("%s: slot %d served by %q, not a server of the node", m.name, slot, addr)
	}
	return nil, fmt.Errorf("chaos: %s: no master tells who serves slot %d: %v", n.name, slot, last)
}

// awaitMaster waits until want says it is a master and every master
// agrees that want serves slot.
func (n *dockerClusterNode) awaitMaster(ctx context.Context, slot int, want *dockerClusterMaster) error {
	return n.await(ctx, fmt.Sprintf("%s serving slot %d", want.addr, slot), func(ctx context.Context) (bool, error) {
		role, err := want.do(ctx, "role").Slice()
		if err != nil || len(role) == 0 || role[0] != "master" {
			return false, err
		}
		for _, m := range n.servers() {
			addr, err := m.servingAddr(ctx, slot)
			if err != nil || addr != want.addr {
				return false, err
			}
		}
		return true, nil
	})
}

func (n *dockerClusterNode) RestartMasterOf(ctx context.Context, key string) (string, error) {
	slot, m, err := n.masterOfKey(ctx, key)
	if err != nil {
		return "", err
	}
	// The container's writable layer keeps /data/nodes.conf; nothing else
	// is written there without persistence: the master comes back as the
	// same cluster node, empty.
	if err := m.Kill(ctx); err != nil {
		return "", err
	}
	if err := m.Restart(ctx); err != nil {
		return "", err
	}
	if err := n.awaitMaster(ctx, slot, m); err != nil {
		return "", err
	}
	return m.addr, n.awaitHealthy(ctx)
}

func (n *dockerClusterNode) MoveSlotOf(ctx context.Context, key string, withKeys bool) (string, string, error) {
	slot, from, err := n.masterOfKey(ctx, key)
	if err != nil {
		return "", "", err
	}
	var to *dockerClusterMaster
	for _, m := range n.masters {
		if m != from {
			to = m
			break
		}
	}
	if to == nil {
		return "", "", fmt.Errorf("chaos: %s: a cluster of %d master(s) has no other master to move slot %d to", n.name, len(n.masters), slot)
	}
	move := n.moveSlot
	if !withKeys {
		move = n.moveSlotEmpty
	}
	if err := move(ctx, slot, from, to); err != nil {
		return "", "", fmt.Errorf("chaos: %s: %w", n.name, err)
	}
	return from.addr, to.addr, nil
}

// moveSlot migrates slot with its keys, as redis-cli --cluster reshard
// does (redistest.RedisCluster.MoveSlot on processes).
func (n *dockerClusterNode) moveSlot(ctx context.Context, slot int, from, to *dockerClusterMaster) error {
	toID, err := importSlot(ctx, slot, from, to)
	if err != nil {
		return err
	}
	if err := from.do(ctx, "cluster", "setslot", slot, "migrating", toID).Err(); err != nil {
		return fmt.Errorf("SETSLOT MIGRATING on %s: %w", from.addr, err)
	}
	for {
		keys, err := from.do(ctx, "cluster", "getkeysinslot", slot, 100).Slice()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			break
		}
		args := append([]any{"migrate", "127.0.0.1", to.port, "", 0, 5000, "keys"}, keys...)
		if err := from.do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("MIGRATE from %s: %w", from.addr, err)
		}
	}
	for _, m := range []*dockerClusterMaster{to, from} {
		if err := m.do(ctx, "cluster", "setslot", slot, "node", toID).Err(); err != nil {
			return fmt.Errorf("SETSLOT NODE on %s: %w", m.addr, err)
		}
	}
	return n.awaitMaster(ctx, slot, to)
}

// moveSlotEmpty gives slot to another master without its keys: to claims
// it (SETSLOT IMPORTING, then SETSLOT NODE to itself, bumping its epoch),
// and the old master drops its keys of the slot when the gossip tells it
// (redistest.RedisCluster.MoveSlotEmpty on processes).
func (n *dockerClusterNode) moveSlotEmpty(ctx context.Context, slot int, from, to *dockerClusterMaster) error {
	toID, err := importSlot(ctx, slot, from, to)
	if err != nil {
		return err
	}
	if err := to.do(ctx, "cluster", "setslot", slot, "node", toID).Err(); err != nil {
		return fmt.Errorf("SETSLOT NODE on %s: %w", to.addr, err)
	}
	if err := n.awaitMaster(ctx, slot, to); err != nil {
		return err
	}
	return n.await(ctx, fmt.Sprintf("%s dropping its keys of slot %d", from.addr, slot), func(ctx context.Context) (bool, error) {
		k, err := from.do(ctx, "cluster", "countkeysinslot", slot).Int()
		return err == nil && k == 0, err
	})
}

// importSlot marks slot IMPORTING from the master from on the master to,
// the first step of moving it with or without its keys, and returns to's
// node ID.
func importSlot(ctx context.Context, slot int, from, to *dockerClusterMaster) (toID string, err error) {
	fromID, err := from.do(ctx, "cluster", "myid").Text()
	if err != nil {
		return "", fmt.Errorf("CLUSTER MYID on %s: %w", from.addr, err)
	}
	toID, err = to.do(ctx, "cluster", "myid").Text()
	if err != nil {
		return "", fmt.Errorf("CLUSTER MYID on %s: %w", to.addr, err)
	}
	if err := to.do(ctx, "cluster", "setslot", slot, "importing", fromID).Err(); err != nil {
		return "", fmt.Errorf("SETSLOT IMPORTING on %s: %w", to.addr, err)
	}
	return toID, nil
}

func (n *dockerClusterNode) MoveMasterClockOf(ctx context.Context, key string, d time.Duration) (string, error) {
	_, m, err := n.masterOfKey(ctx, key)
	if err != nil {
		return "", err
	}
	err = n.clocks.move(m, d, func(offset time.Duration) error { return m.SetClockOffset(ctx, offset) })
	if err != nil {
		return "", fmt.Errorf("chaos: %s: %w", n.name, err)
	}
	return m.addr, nil
}

// replicasOf lists the servers of the node that CLUSTER NODES, as m sees
// it, shows replicating m and not failed.
func (n *dockerClusterNode) replicasOf(ctx context.Context, m *dockerClusterMaster) ([]*dockerClusterMaster, error) {
	id, err := m.do(ctx, "cluster", "myid").Text()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER MYID on %s: %w", m.addr, err)
	}
	nodes, err := m.do(ctx, "cluster", "nodes").Text()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", m.addr, err)
	}
	var out []*dockerClusterMaster
	for _, addr := range redistest.ReplicaAddrs(nodes, id) {
		for _, s := range n.servers() {
			if s.addr == addr {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// replicaOfKey is the first replica of the master serving key's slot.
func (n *dockerClusterNode) replicaOfKey(ctx context.Context, key string) (slot int, m, r *dockerClusterMaster, err error) {
	if slot, m, err = n.masterOfKey(ctx, key); err != nil {
		return 0, nil, nil, err
	}
	reps, err := n.replicasOf(ctx, m)
	if err != nil || len(reps) == 0 {
		return 0, nil, nil, fmt.Errorf("chaos: %s: the master %s of slot %d has no replica (%v)", n.name, m.addr, slot, err)
	}
	return slot, m, reps[0], nil
}

// CutReplicaOf cuts the link as redistest.CutReplication does on
// processes.
func (n *dockerClusterNode) CutReplicaOf(ctx context.Context, key string) (string, error) {
	_, _, r, err := n.replicaOfKey(ctx, key)
	if err != nil {
		return "", err
	}
	n.cut.add(r)
	if err := r.rdb.ConfigSet(ctx, "masterauth", "chaos-wrong-password").Err(); err != nil {
		return "", fmt.Errorf("chaos: CONFIG SET masterauth on %s: %w", r.addr, err)
	}
	if err := r.do(ctx, "client", "kill", "type", "master").Err(); err != nil {
		return "", fmt.Errorf("chaos: CLIENT KILL TYPE master on %s: %w", r.addr, err)
	}
	return r.addr, n.await(ctx, "replication of "+r.addr+" cut", func(ctx context.Context) (bool, error) {
		info, err := r.do(ctx, "info", "replication").Text()
		return err == nil && infoField(info, "master_link_status") == "down", err
	})
}

func (n *dockerClusterNode) RestoreReplicas(ctx context.Context) error {
	var errs []error
	for _, r := range n.cut.take() {
		if err := r.rdb.ConfigSet(ctx, "masterauth", "").Err(); err != nil {
			errs = append(errs, fmt.Errorf("chaos: CONFIG SET masterauth on %s: %w", r.addr, err))
			continue
		}
		errs = append(errs, n.await(ctx, "replication of "+r.addr+" restored", func(ctx context.Context) (bool, error) {
			info, err := r.do(ctx, "info", "replication").Text()
			return err == nil && (infoField(info, "role") == "master" || infoField(info, "master_link_status") == "up"), err
		}))
	}
	return errors.Join(errs...)
}

func (n *dockerClusterNode) FailoverMasterOf(ctx context.Context, key string) (string, string, error) {
	slot, m, r, err := n.replicaOfKey(ctx, key)
	if err != nil {
		return "", "", err
	}
	if err := r.do(ctx, "cluster", "failover", "takeover").Err(); err != nil {
		return "", "", fmt.Errorf("chaos: %s: CLUSTER FAILOVER TAKEOVER on %s: %w", n.name, r.addr, err)
	}
	if err := n.awaitMaster(ctx, slot, r); err != nil {
		return "", "", err
	}
	return m.addr, r.addr, nil
}

func (n *dockerClusterNode) Freeze(ctx context.Context) error {
	all := n.servers()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, s := range all {
		wg.Go(func() { errs[i] = s.Pause(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Revive kills the containers (a paused one must be thawed first: what
// it then serves in the moment before the kill dies with it) and starts
// them again: their writable layers keep nodes.conf, and without
// persistence nothing else.
func (n *dockerClusterNode) Revive(ctx context.Context) error {
	all := n.servers()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, s := range all {
		wg.Go(func() {
			if errs[i] = s.Resume(ctx); errs[i] == nil {
				if errs[i] = s.Kill(ctx); errs[i] == nil {
					errs[i] = s.Restart(ctx)
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	clients := make([]*redis.Client, len(all))
	for i, s := range all {
		clients[i] = s.rdb
	}
	return awaitClusterOK(ctx, n.name, clients)
}
