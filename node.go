package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// node is one Redis master as the quorum sees it, with the guards of
// DESIGN §3: it votes only while it is known to be an independent master
// that has been up longer than the restart grace and whose clock did not
// jump.
type node struct {
	index int
	name  string // redacted address, safe to log
	run   scriptRunner
	rdb   redis.UniversalClient // nil for test fakes
	pipes *nodePipes            // the ordered streams run writes to; nil for test fakes

	// stale is set whenever go-redis dials a new connection to the node. A
	// restart always breaks every connection, so a node that restarted is
	// always stale before we talk to it again: we probe it before trusting
	// its vote.
	stale atomic.Bool

	guard atomic.Pointer[nodeGuard] // nil until the first probe

	// clock is the clock of a node that is one server. A Cluster node's
	// masters each keep their own, in masterClocks by address: their
	// clocks are apart, and one may jump alone. Fed into one history, the
	// replies of a jumped master and of one that did not would each look
	// like a jump against the other, and the node would sit out for ever.
	clock        nodeClock
	masterClocks sync.Map // address -> *nodeClock

	// downUntil is when the node is asked again after a failure, in
	// nanoseconds of the client's clock since Client.base; 0 if up.
	downUntil atomic.Int64

	// lastAnswer is the send of the last call the node answered, in
	// nanoseconds since Client.base: a server we meet there under a new
	// run_id started after it (dateStart).
	lastAnswer atomic.Int64

	// watched holds the per-server clients inside a *redis.ClusterClient
	// that carry dialWatch: the ClusterClient's own hooks do not run on
	// its servers' dials.
	watched sync.Map // *redis.Client -> struct{}

	// replicas is the most replicas the node's master (a node that is one
	// server, or a Sentinel's) reported connected since this client met
	// it: how many acknowledgements a durable vote needs (durable.go).
	// waitAOF: the master has WAITAOF and its AOF on, so votes wait for
	// fsyncs rather than for receipt.
	replicas atomic.Int64
	waitAOF  atomic.Bool

	tls       atomic.Pointer[nodeTLS]         // what the last connection showed of TLS (tls.go); nil before one
	reg       atomic.Pointer[ttlRegistration] // the node's register of the largest TTL in use (ttlregister.go)
	raising   atomic.Bool                     // a background raise of the register is under way
	reprobing atomic.Bool                     // a probe of a guard past guardMaxAge is under way
}

// downHoldoff is how long a failed node is left out: long enough that a
// dead node costs one node timeout now and then rather than on every
// contended attempt, short enough that a node back up is soon used again.
func downHoldoff(nodeTimeout time.Duration) time.Duration {
	return min(5*nodeTimeout, time.Second)
}

// failed records err from a call to n and marks the node down if the error
// is evidence that the node cannot be reached: the connection failed, or it
// left a call unanswered (see timedOut). A node that answered with an error
// is up; a call that waited in our own queue says nothing about the node.
func (c *Client) failed(n *node, err error, nodeTimeout time.Duration) {
	if errors.Is(err, errNotSent) {
		return
	}
	var netErr net.Error
	switch {
	case isTimeout(err):
		c.timedOut(n, nodeTimeout)
	case errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		c.markDown(n, nodeTimeout)
	}
}

// timedOut marks n down after a call to it got no answer within the node
// timeout, if the node is to blame: it left a write unanswered for at least
// half that time while another node answered a write sent after it. A
// client starved of CPU, or whose own link is cut, sees every node late at
// once, and that is no reason to stop asking any of them.
func (c *Client) timedOut(n *node, nodeTimeout time.Duration) {
	if n.pipes == nil { // a test fake: no evidence to weigh
		c.markDown(n, nodeTimeout)
		return
	}
	since := n.pipes.stuckSince()
	if since == 0 || sinceEpoch()-time.Duration(since) < nodeTimeout/2 {
		return // it answered meanwhile, or had little time
	}
	for _, m := range c.nodes {
		if m != n && m.pipes != nil && m.pipes.lastAnswered() > since {
			c.markDown(n, nodeTimeout)
			return
		}
	}
}

// markDown leaves n out for the down hold-off, unless that would leave
// fewer than a quorum of nodes up: with that many nodes failing at once the
// fault is more likely ours, and a node left out could cost every extension
// its quorum.
func (c *Client) markDown(n *node, nodeTimeout time.Duration) {
	up := 0
	for _, m := range c.nodes {
		if m != n && !c.down(m) {
			up++
		}
	}
	if up < c.quorum() && !c.down(n) {
		return
	}
	n.downUntil.Store(int64(c.clock.Now().Sub(c.base) + downHoldoff(nodeTimeout)))
}

// nodeGuard is what the last probe learned, plus sit-outs decided since.
// It is replaced, never changed, so the hot path reads it without locking.
type nodeGuard struct {
	// runID identifies the server, or for a Cluster node every master
	// with its address: "addr=run_id,..." (probeCluster). A change is a
	// new server for the guard.
	runID string
	// servers are the run_ids of every server behind the node, for the
	// duplicate check: no server may serve two nodes.
	servers []string
	// shards are a Cluster node's masters at the last probe, each dated
	// on its own: a lock's vote follows the master of its slot (nil for a
	// node that is one server).
	shards []shardGuard
	// server is the epoch of a node that is one server (epoch.go); a
	// Cluster node keeps one per master, in shards.
	server   serverEpoch
	role     string
	probed   time.Time     // our clock when the probe that made the guard was answered
	grace    time.Duration // the restart grace learned when the server was probed
	sitOut   time.Time     // no vote before this instant (clock jump, or a clock unlike the others')
	reason   string        // why it sits out, for reports
	excluded error         // permanent: replica or duplicate (ErrNotIndependent), cluster node without slots, evicting node
	cluster  *ClusterInfo  // nil unless the node runs in cluster mode
	// clockUnchecked: too few nodes had answered to compare the node's
	// clock with a majority's; it does not vote until they have.
	clockUnchecked bool
	// clockVetted: the node's clock was compared with the others' once
	// (and sat out if it disagreed). From then on the node's own history
	// of samples shows any jump.
	clockVetted bool
}

// voteErr tells why the node's vote does not count at now, or nil. grace
// is the restart grace in force now; the larger of it and the grace learned
// at the probe applies.
func (g *nodeGuard) voteErr(now time.Time, grace time.Duration, key string) error {
	switch {
	case g.excluded != nil:
		return g.excluded
	case now.Before(g.sitOut):
		return fmt.Errorf("%w: %s", ErrNodeSittingOut, g.reason)
	case g.clockUnchecked:
		return fmt.Errorf("%w: its clock is not yet compared with enough of the other nodes' (too few of them answered)", ErrNodeSittingOut)
	}
	if grace < 0 {
		return nil // the guard is off
	}
	// Persistence is no shortcut here: it only dated the epochs (epoch.go).
	grace = max(grace, g.grace)
	if g.shards != nil {
		return g.shardsVoteErr(now, grace, key)
	}
	return g.server.voteErr(now, grace, "")
}

// shardGuard is what a Cluster node's guard knows of one of its masters.
type shardGuard struct {
	serverEpoch // its address, run_id, slots (served or importing, in its own view at the probe) and epoch
	// replicas are the replicas CLUSTER NODES lists for it, connected or
	// not (at least those connected): a durable vote on it needs that many
	// acknowledgements. waitAOF as node.waitAOF.
	replicas int
	waitAOF  bool
}

// serves tells whether the master took (or was importing) slot at the probe.
func (sg *shardGuard) serves(slot int) bool {
	for _, r := range sg.slots {
		if r.First <= slot && slot <= r.Last {
			return true
		}
	}
	return false
}

// slotsGained tells whether now has a slot that before has not.
func slotsGained(before, now []SlotRange) bool {
	for _, r := range now {
		for slot := r.First; slot <= r.Last; {
			i := slices.IndexFunc(before, func(b SlotRange) bool { return b.First <= slot && slot <= b.Last })
			if i < 0 {
				return true
			}
			slot = before[i].Last + 1
		}
	}
	return false
}

// errSlotUnclaimed: no master of a Cluster node served the lock's slot at
// the last probe; the node is probed again.
var errSlotUnclaimed = fmt.Errorf("%w: no master of the cluster served the lock's hash slot at the last probe", ErrNodeSittingOut)

// shardsVoteErr is voteErr's restart grace for a Cluster node: the vote on
// key counts once every master that served (or imported) its slot at the
// last probe is past the grace. key "" asks for every master: a node whose
// keys are not known (Nodes, a batch of extensions) votes only when none of
// its masters sits out.
func (g *nodeGuard) shardsVoteErr(now time.Time, grace time.Duration, key string) error {
	slot := -1
	if key != "" {
		slot = keySlot(key)
	}
	claimed := false
	for i := range g.shards {
		sh := &g.shards[i]
		if slot >= 0 && !sh.serves(slot) {
			continue
		}
		claimed = true
		if err := sh.voteErr(now, grace, "its master "+sh.addr+" "); err != nil {
			return err
		}
	}
	if !claimed {
		return errSlotUnclaimed
	}
	return nil
}

// dialWatch is a go-redis hook that marks the node stale on every new
// connection. It works on clients the user built too, unlike OnConnect.
type dialWatch struct{ n *node }

func (h dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err == nil {
			h.n.stale.Store(true)
		}
		return conn, err
	}
}

func (dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// serverWatch is dialWatch for one server of a Cluster node, which also
// marks the node stale when a script ran on a server that was not among
// its masters at the last probe. After a failover the ClusterClient
// follows MOVED to the promoted replica, often on a connection it already
// had (it reads the cluster's layout from replicas too): no dial shows the
// new master, but the reply came from it, and the recheck after every
// reply probes the node again before its vote counts.
type serverWatch struct {
	dialWatch
	addr string
}

func (h serverWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.ran(cmd)
		return err
	}
}

func (h serverWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.ran(cmd)
		}
		return err
	}
}

// ran marks the node stale if cmd was a script and this server is not one
// of the masters the node's guard knows, or did not serve the slot of the
// script's keys at the last probe: a slot moved to a master the guard
// knew (a reshard) may have come without its keys.
func (h serverWatch) ran(cmd redis.Cmder) {
	switch cmd.Name() {
	case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall":
	default:
		return
	}
	g := h.n.guard.Load()
	if g == nil {
		return
	}
	sh := g.shard(h.addr)
	if sh == nil {
		h.n.stale.Store(true)
		return
	}
	// Not judged by the reply: in a ClusterClient's pipeline the hook runs
	// before the replies are read, and a MOVED reply only costs a probe.
	if key := scriptKey(cmd.Args()); key != "" && !sh.serves(keySlot(key)) {
		h.n.stale.Store(true)
	}
}

// probeResult is what one probe round trip tells about a node.
type probeResult struct {
	runID       string
	role        string
	uptime      time.Duration
	appendOnly  bool
	appendFsync string        // "" if CONFIG GET is not allowed
	fleetTTL    time.Duration // the node's register of the largest TTL in use
	registerErr error         // why the register could not be read or raised
	cluster     *ClusterInfo  // nil unless the node runs in cluster mode
	addr        string        // a Cluster node's master: its address
	claims      []SlotRange   // and the slots it serves or imports
	shards      []probeResult // a Cluster node's masters, by address
	promoted    bool          // a master promoted from replica since it started: dated as started now
	replicas    int           // replicas connected to the master(s); for a Cluster's master, listed for it
	links       []ReplicaInfo // the master's replicas, as its INFO replication lists them
	waitAOF     bool          // the server has WAITAOF (7.2+) and its AOF on
	servers     []string      // the run_ids behind the node (one, or a Cluster's masters)
	master      string        // a replica's master, host:port as its INFO replication tells, for the refusal
	replID      string        // master_replid: changes at every promotion, resync from another master and restart
	maxMemory   int64         // maxmemory in bytes, 0: no limit
	policy      string        // maxmemory_policy
	evicted     int64         // evicted_keys since the start (or CONFIG RESETSTAT)
	// markerWas and markerIs are the data-kept marker's value before and
	// after the probe (epoch.go): "" and a new value if it was missing,
	// both "" if it could not be read.
	markerWas, markerIs string
	// failover: the node may fail over (Sentinel names its master, or its
	// servers have or had replicas), so a server there may have been
	// promoted before its last start, which INFO no longer shows after it.
	failover   bool
	nodeTime   time.Time
	sent, recv time.Time // the pipelined round trip that read INFO and the register
	// timeSent and timeRecv bracket the TIME call that read nodeTime.
	timeSent, timeRecv time.Time
}

// persistent tells whether the node keeps every acknowledged write across
// a restart: the lock keys and the fence registers survive, and the node
// needs no restart grace (DESIGN §3).
func (r probeResult) persistent() bool { return r.appendOnly && r.appendFsync == "always" }

// evicting tells whether the server may evict keys: a maxmemory and any
// policy but noeviction. Every lock key has a TTL, so the volatile-*
// policies may evict them as well as the allkeys-* ones.
func (r probeResult) evicting() bool { return r.maxMemory > 0 && r.policy != "noeviction" }

// marks are what nextEpoch reads of the server the probe read.
func (r probeResult) marks() serverMarks {
	return serverMarks{addr: r.addr, runID: r.runID, replID: r.replID, uptime: r.uptime,
		persistent: r.persistent(), promoted: r.promoted, failover: r.failover, evicted: r.evicted, evicting: r.evicting(),
		markerWas: r.markerWas, markerIs: r.markerIs, claims: r.claims, sent: r.sent, recv: r.recv}
}

// probe asks the node who it is, how long it has been up, its role, its
// persistence and its register of the largest TTL in use, in one
// pipelined round trip, then its time, timed on a warm connection. raise, if positive, raises that register first (see
// ttlRegister).
func (c *Client) probe(ctx context.Context, n *node, raise time.Duration) (probeResult, error) {
	if cc, ok := n.rdb.(*redis.ClusterClient); ok {
		return c.probeCluster(ctx, n, cc, raise)
	}
	res, err := c.probeServer(ctx, n.rdb, raise, true)
	res.servers = []string{res.runID}
	return res, err
}

// probeServer probes one server; with register, it also reads (and
// raises) the register of the largest TTL in use there.
func (c *Client) probeServer(ctx context.Context, rdb redis.UniversalClient, raise time.Duration, register bool) (probeResult, error) {
	var res probeResult
	pipe := rdb.Pipeline()
	info := pipe.Info(ctx, "server", "replication", "persistence", "cluster", "memory", "stats")
	fsync := pipe.ConfigGet(ctx, "appendfsync")
	var reg *redis.Cmd
	var marker *redis.StatusCmd
	value := markerValue()
	if register {
		reg = c.registerCmd(ctx, pipe, raise)
		marker = markerCmd(ctx, pipe, c.markerKey(), value)
	}
	learnScripts := loadScripts(ctx, pipe)
	var waitAOFInfo *redis.Cmd
	if c.opts.DurableVotes {
		waitAOFInfo = pipe.Do(ctx, "command", "info", "waitaof")
	}
	res.sent = c.clock.Now()
	_, execErr := pipe.Exec(ctx)
	res.recv = c.clock.Now()
	learnScripts()
	// CONFIG may be refused (an ACL user without it): the node then does
	// not count as persistent, which only costs a grace. The register may
	// be refused too (a replica is read-only): what the node is still
	// counts, and an acquire raises the register itself before its vote.
	if err := info.Err(); err != nil {
		return res, err
	}
	fields := parseInfo(info.Val())
	res.runID = fields["run_id"]
	res.role = fields["role"]
	if h, p := fields["master_host"], fields["master_port"]; h != "" && p != "" {
		res.master = net.JoinHostPort(h, p)
	}
	secs, err := strconv.ParseInt(fields["uptime_in_seconds"], 10, 64)
	if res.runID == "" || res.role == "" || err != nil {
		if execErr != nil && info.Val() == "" {
			return res, execErr // the connection failed (a login refused when it was redialled, say), not INFO
		}
		return res, fmt.Errorf("redlock: node did not report run_id, role and uptime in INFO")
	}
	res.uptime = time.Duration(secs) * time.Second
	// A master that was promoted from replica since it started shows it in
	// its replication ids (the old one kept as master_replid2, up to
	// second_repl_offset), but not when. Its uptime is that of the
	// replica, which may have missed the last writes of the master it
	// replaced: it is dated as started now, the latest the promotion can
	// have been, so that it sits out a whole grace from our first sight.
	if off := fields["second_repl_offset"]; res.role == "master" && off != "" && off != "-1" {
		res.promoted, res.uptime = true, 0
	}
	res.replicas, _ = strconv.Atoi(fields["connected_slaves"])
	res.links = replicaLinks(fields)
	res.replID = fields["master_replid"]
	// The memory figures come from INFO, not CONFIG: managed services
	// often rename or refuse CONFIG.
	res.maxMemory, _ = strconv.ParseInt(fields["maxmemory"], 10, 64)
	res.policy = fields["maxmemory_policy"]
	res.evicted, _ = strconv.ParseInt(fields["evicted_keys"], 10, 64)
	if marker != nil {
		res.markerWas, res.markerIs = markerReply(marker, value)
	}
	// The clock sample is a TIME of its own, timed alone on a warm
	// connection: a bracket that included a dial (a TLS handshake far away
	// takes several round trips) would show half the dial as clock offset
	// and widen the clock guard's bracket for nothing. The PING before it
	// makes sure a connection is open: go-redis does not always pool the
	// connection it dialled for the pipeline. The node reads its clock
	// inside [timeSent, timeRecv], which is all the guard assumes.
	if err := rdb.Ping(ctx).Err(); err != nil {
		return res, err
	}
	res.timeSent = c.clock.Now()
	tm := rdb.Time(ctx)
	res.timeRecv = c.clock.Now()
	if err := tm.Err(); err != nil {
		return res, err
	}
	res.nodeTime = tm.Val()
	res.appendOnly = fields["aof_enabled"] == "1"
	if waitAOFInfo != nil {
		res.waitAOF = res.appendOnly && hasCommand(waitAOFInfo.Val())
	}
	if fsync.Err() == nil {
		res.appendFsync = fsync.Val()["appendfsync"]
	}
	switch {
	case reg == nil:
	case reg.Err() == nil:
		res.fleetTTL, res.registerErr = registerReply(reg.Val())
	default:
		res.registerErr = reg.Err()
	}
	// A node in cluster mode takes only keys of the hash slots it serves.
	// A ClusterClient given as one node routes every key to its slot's
	// master by itself, so its slots need no check.
	if _, routed := rdb.(*redis.ClusterClient); fields["cluster_enabled"] == "1" && !routed {
		res.cluster = probeCluster(ctx, rdb, c.registerKey())
	}
	return res, nil
}

// replicaLinks reads the replicas a master lists in INFO replication
// ("slave0:ip=10.0.0.2,port=6379,state=online,offset=1234,lag=0"), with how
// far each is behind the master's replication offset.
func replicaLinks(fields map[string]string) []ReplicaInfo {
	n, _ := strconv.Atoi(fields["connected_slaves"])
	master, _ := strconv.ParseInt(fields["master_repl_offset"], 10, 64)
	var out []ReplicaInfo
	for i := range n {
		line, ok := fields["slave"+strconv.Itoa(i)]
		if !ok {
			continue
		}
		kv := make(map[string]string)
		for _, part := range strings.Split(line, ",") {
			if k, v, ok := strings.Cut(part, "="); ok {
				kv[k] = v
			}
		}
		r := ReplicaInfo{Addr: net.JoinHostPort(kv["ip"], kv["port"]), State: kv["state"]}
		if off, err := strconv.ParseInt(kv["offset"], 10, 64); err == nil {
			r.Behind = max(master-off, 0)
		}
		if secs, err := strconv.ParseInt(kv["lag"], 10, 64); err == nil {
			r.LastAck = time.Duration(secs) * time.Second
		}
		out = append(out, r)
	}
	return out
}

func parseInfo(s string) map[string]string {
	fields := make(map[string]string)
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && !strings.HasPrefix(k, "#") {
			fields[k] = v
		}
	}
	return fields
}

// refresh probes n and installs its new guard. It reports a restart (a new
// run_id), refuses replicas and servers already reached through another
// node, compares the node's clock with the others', and, when the server is
// new to us, learns the largest TTL in use from every node: the server may
// have forgotten locks that the others' registers still account for.
func (c *Client) refresh(ctx context.Context, n *node, raise time.Duration) (probeResult, error) {
	if c.opts.DurableVotes {
		// The probe sends no WAIT (it is what learns how many replicas
		// to wait for), so a failover may lose its raise, and a vote
		// relying on it would rest on a register the promoted master
		// lacks. It only reads; the raise a vote relies on goes through
		// the node's pipe, with a WAIT on the register's own master
		// (registered, durable.go).
		raise = 0
	}
	n.stale.Store(false)
	res, err := c.probe(ctx, n, raise)
	if err != nil {
		n.stale.Store(true) // try again next time
		return res, err
	}
	lastAnswer := c.base.Add(time.Duration(n.lastAnswer.Swap(int64(res.sent.Sub(c.base)))))
	old := n.guard.Load()
	res.failover = isFailoverClient(n.rdb) || res.replicas > 0 || n.replicas.Load() > 0 || old.hadReplicas()
	// Any event that may have lost keys may have lost the node's register
	// of the largest TTL in use too.
	lostData := epochsOf(old, res, lastAnswer).lostSince(old)
	if lostData {
		n.forgetRegistration()
	}
	if res.registerErr == nil {
		c.heard(n, res.sent, raise, res.fleetTTL)
	}
	newMasters := c.observeProbeClocks(n, res)
	// A server that may have lost keys after the first contact (a restart
	// while we were away, a failover, an eviction...): learn the largest
	// TTL in use from the others now, as what was read of them earlier may
	// have decayed. (At first contact every node is probed, and read, at
	// once.)
	if lostData && (old != nil || c.probed.Load()) && c.opts.RestartGrace >= 0 {
		c.learnFleetTTL(ctx, n)
	}

	c.guardMu.Lock()
	defer c.guardMu.Unlock()
	old = n.guard.Load() // another probe may have installed one meanwhile
	g := epochsOf(old, res, lastAnswer)
	g.runID, g.servers, g.role, g.cluster, g.probed = res.runID, res.servers, res.role, res.cluster, res.recv
	g.grace = c.graceFor()
	if old != nil {
		g.sitOut, g.reason, g.clockVetted = old.sitOut, old.reason, old.clockVetted
		if !g.lostSince(old) {
			g.grace = old.grace
		} else {
			g.grace = max(g.grace, old.grace)
		}
	}
	if old != nil && old.runID != res.runID {
		c.logger.Warn("redlock: node restarted", "node", n.name, "uptime", res.uptime, "grace", g.grace)
		c.emit(Event{Kind: EventNodeRestarted, Node: n.name})
	}
	if old != nil && g.lostSince(old) && g.grace >= 0 {
		if err := g.voteErr(c.clock.Now(), g.grace, ""); errors.Is(err, ErrNodeSittingOut) {
			c.emit(Event{Kind: EventNodeSitOut, Node: n.name, Reason: SitOutRestart, Err: err})
		}
	}
	if res.role != "master" {
		g.excluded = replicaRefusal(n, res)
	}
	if res.shards == nil {
		// A node that is one server (a standalone master, or Sentinel's):
		// the most replicas seen since we met it, so that a replica whose
		// link is down still counts against a durable vote. (A
		// FailoverClient does not tell its Sentinels' addresses, so
		// SENTINEL REPLICAS cannot be asked; a replica never seen
		// connected is the stated limit, docs/PROTOCOL.md §11.)
		for {
			seen := n.replicas.Load()
			if int64(res.replicas) <= seen || n.replicas.CompareAndSwap(seen, int64(res.replicas)) {
				break
			}
		}
		n.waitAOF.Store(res.waitAOF)
	}
	if replicas := max(res.replicas, int(n.replicas.Load())); g.excluded == nil && replicas > 0 && !c.opts.DurableVotes && !c.opts.AllowFailoverNodes {
		what := fmt.Sprintf("is a master with %d replicas", replicas)
		if _, isCluster := n.rdb.(*redis.ClusterClient); isCluster {
			what = fmt.Sprintf("is a Redis Cluster whose masters have %d replicas", replicas)
		}
		g.excluded = &ConfigError{Field: "node", Value: n.name,
			Reason: what + ": a failover may promote a replica that lacks a lock's key; set Options.DurableVotes to make votes wait for the replicas, or Options.AllowFailoverNodes to accept that",
			Err:    ErrFailoverNode}
	}
	if err := c.evictionErr(n, res); g.excluded == nil && err != nil {
		g.excluded = err
	}
	// A node in cluster mode that serves no slot, or not the register's,
	// can take no lock at all: refused like a replica. (A cluster that is
	// down, or slots that could not be read, may come right: each acquire
	// judges those.)
	if ci := res.cluster; g.excluded == nil && ci != nil && ci.Err == nil && (len(ci.Slots) == 0 || !ci.has(keySlot(ci.Register))) {
		err := ci.servesRegister()
		g.excluded = &ConfigError{Field: "node", Value: n.name,
			Reason: strings.TrimPrefix(err.Error(), ErrSlotNotServed.Error()+": ") + ": no lock can be taken on it", Err: err}
	}
	for _, other := range c.nodes {
		og := other.guard.Load()
		if other == n || og == nil || og.excluded != nil {
			continue
		}
		for _, id := range res.servers {
			if slices.Contains(og.servers, id) {
				g.excluded = sameServerRefusal(n, other, id)
			}
		}
	}
	if g.excluded != nil && (old == nil || old.excluded == nil) {
		c.logger.Error("redlock: node refused", "node", n.name, "err", g.excluded)
	}
	n.guard.Store(g)
	c.compareMastersLocked(n, res, newMasters)
	c.compareClocksLocked(n)
	return res, nil
}

// epochsOf is a guard holding only the epochs of the servers res read,
// each judged by nextEpoch against what old knew of it.
func epochsOf(old *nodeGuard, res probeResult, lastAnswer time.Time) *nodeGuard {
	g := &nodeGuard{}
	if res.shards == nil {
		var prev *serverEpoch
		if old != nil && old.shards == nil {
			prev = &old.server
		}
		g.server = nextEpoch(prev, res.marks(), lastAnswer, old != nil)
		return g
	}
	g.shards = make([]shardGuard, len(res.shards))
	for i, r := range res.shards {
		var prev *serverEpoch
		if o := old.shard(r.addr); o != nil {
			prev = &o.serverEpoch
		}
		m := r.marks()
		m.failover = res.failover // the node's: a promoted master may have no replica left
		g.shards[i] = shardGuard{serverEpoch: nextEpoch(prev, m, lastAnswer, old != nil), replicas: r.replicas, waitAOF: r.waitAOF}
	}
	return g
}

// hadReplicas tells whether a Cluster node's guard listed a replica for
// any of its masters.
func (g *nodeGuard) hadReplicas() bool {
	if g == nil {
		return false
	}
	for _, sh := range g.shards {
		if sh.replicas > 0 {
			return true
		}
	}
	return false
}

// lostSince tells whether g holds an epoch that old did not: an event that
// may have lost keys since old's probe, or a server old did not know.
func (g *nodeGuard) lostSince(old *nodeGuard) bool {
	if old == nil {
		return true
	}
	if g.shards == nil {
		return old.shards != nil || !g.server.since.Equal(old.server.since)
	}
	for _, sh := range g.shards {
		o := old.shard(sh.addr)
		if o == nil || !sh.since.Equal(o.since) {
			return true
		}
	}
	return false
}

// evictionErr refuses a node whose server (or one of whose Cluster
// masters) may evict keys, unless Options.AllowEvictingNodes: every lock
// key has a TTL, so any policy but noeviction may evict it, volatile-*
// included, and hand the lock to a second holder. Read at every probe, so
// a policy changed at run time is seen at the next one.
func (c *Client) evictionErr(n *node, res probeResult) error {
	if c.opts.AllowEvictingNodes {
		return nil
	}
	servers := res.shards
	if servers == nil {
		servers = []probeResult{res}
	}
	for _, r := range servers {
		if !r.evicting() {
			continue
		}
		who := "its server"
		if r.addr != "" {
			who = "its master " + r.addr
		}
		return &ConfigError{Field: "node", Value: n.name,
			Reason: fmt.Sprintf("may evict lock keys: %s has maxmemory %d bytes and maxmemory-policy %s, and every lock key has a TTL; set maxmemory-policy noeviction, or give the locks a Redis of its own, or set Options.AllowEvictingNodes to accept that (an eviction then makes the node sit out the restart grace)",
				who, r.maxMemory, r.policy),
			Err: ErrEvictingNode}
	}
	return nil
}

// shard finds the master at addr among a Cluster node's masters at the
// last probe; nil if there is none, or no guard.
func (g *nodeGuard) shard(addr string) *shardGuard {
	if g == nil {
		return nil
	}
	for i := range g.shards {
		if g.shards[i].addr == addr {
			return &g.shards[i]
		}
	}
	return nil
}

// clockThreshold is how far a node's clock may move against ours, or
// disagree with the other nodes', before the node sits out; negative when
// the clock guard is off. By default it is the drift allowance of the
// shortest TTL this client uses: the strictest of its locks' budgets.
func (c *Client) clockThreshold() time.Duration {
	switch t := c.opts.ClockJumpThreshold; {
	case t != 0:
		return t
	}
	return driftAllowance(time.Duration(c.minTTL.Load()), c.opts.DriftFactor)
}

// clockHold is how long a node whose clock jumped sits out: one largest TTL
// in use, after which every key it held before the jump expired anyway.
func (c *Client) clockHold() time.Duration {
	return max(c.opts.RestartGrace, c.fleetTTL())
}

// clockOf is the clock of n's server at addr: n.clock for a node that is
// one server (addr ""), else the Cluster master's own.
func (n *node) clockOf(addr string) *nodeClock {
	if addr == "" {
		return &n.clock
	}
	nc, _ := n.masterClocks.LoadOrStore(addr, &nodeClock{})
	return nc.(*nodeClock)
}

// peerClock is the clock the other nodes' clocks are compared with: a
// Cluster node's first master (by address) at the last probe, whose
// clock compareMastersLocked holds the other masters' to.
func (n *node) peerClock() *nodeClock {
	if g := n.guard.Load(); g != nil && len(g.shards) > 0 {
		return n.clockOf(g.shards[0].addr)
	}
	return &n.clock
}

// masterFor is the address of the Cluster master that served key's slot
// at the last probe, whose clock a script reply on key read; "" for a node
// that is one server. ok is false when no master is known to serve it: the
// reply's clock is then not told apart, and not fed to any history (the
// next probe reads every master's).
func (n *node) masterFor(key string) (addr string, ok bool) {
	g := n.guard.Load()
	if g == nil || g.shards == nil {
		return "", true
	}
	if key == "" {
		return "", false
	}
	slot := keySlot(key)
	for i := range g.shards {
		if g.shards[i].serves(slot) {
			return g.shards[i].addr, true
		}
	}
	return "", false
}

// observeClock feeds a time sample of n's server at addr to the clock-jump
// guard and sends the node to sit out for one largest TTL in use if that
// clock jumped.
func (c *Client) observeClock(n *node, addr string, nodeTime, sent, recv time.Time) bool {
	threshold := c.clockThreshold()
	if threshold < 0 {
		return false
	}
	jump, jumped := n.clockOf(addr).observe(nodeTime, sent, recv, c.base, threshold)
	if !jumped {
		return false
	}
	who := "clock"
	if addr != "" {
		who = "master " + addr + "'s clock"
	}
	c.guardMu.Lock()
	defer c.guardMu.Unlock()
	c.sitOutLocked(n, recv, SitOutClockJump, fmt.Sprintf("%s jumped by %v against ours", who, jump.Round(time.Microsecond)))
	return true
}

// observeProbeClocks feeds the probe's clock samples to the guard: one
// for a node that is one server, one per master of a Cluster node. It
// returns the masters whose clocks it saw for the first time.
func (c *Client) observeProbeClocks(n *node, res probeResult) (newMasters []string) {
	if res.shards == nil {
		c.observeClock(n, "", res.nodeTime, res.timeSent, res.timeRecv)
		return nil
	}
	for _, r := range res.shards {
		if _, seen := n.clockOf(r.addr).sample(); !seen {
			newMasters = append(newMasters, r.addr)
		}
		c.observeClock(n, r.addr, r.nodeTime, r.timeSent, r.timeRecv)
	}
	return newMasters
}

// compareMastersLocked holds the masters of a Cluster node that this
// client met in res to its first master's clock, read in the same probe:
// a master's own history cannot show a jump from before we met it, and the
// other nodes are compared with the first master only (peerClock). A
// master more than the clock threshold off it sits the node out one
// largest TTL in use, as compareClocksLocked does for a node. The caller
// holds guardMu.
func (c *Client) compareMastersLocked(n *node, res probeResult, newMasters []string) {
	threshold := c.clockThreshold()
	if len(res.shards) < 2 || len(newMasters) == 0 || threshold < 0 {
		return
	}
	first := res.shards[0]
	ref := n.clockOf(first.addr)
	for _, addr := range newMasters {
		if addr == first.addr {
			continue
		}
		skew, off := ref.apart(n.clockOf(addr), threshold)
		if off {
			c.sitOutLocked(n, c.clock.Now(), SitOutClockSkew, fmt.Sprintf("master %s's clock is %v off master %s's (more than %v)",
				addr, skew.Round(time.Microsecond), first.addr, threshold))
			return
		}
	}
}

// sitOutLocked keeps n from voting for one largest TTL in use from now, for
// reason. The caller holds guardMu.
func (c *Client) sitOutLocked(n *node, now time.Time, kind, reason string) {
	hold := c.clockHold()
	c.logger.Warn("redlock: node sits out", "node", n.name, "reason", reason, "for", hold)
	c.emit(Event{Kind: EventNodeSitOut, Node: n.name, Reason: kind, Err: fmt.Errorf("%w: %s; sits out for %v", ErrNodeSittingOut, reason, hold)})
	g := &nodeGuard{}
	if old := n.guard.Load(); old != nil {
		*g = *old
	}
	g.sitOut, g.reason = now.Add(hold), reason
	n.guard.Store(g)
}

// compareClocksLocked compares n's clock with the other nodes' the first
// time this client can: if fewer than a quorum of the nodes, n itself
// included, agree with it within the clock threshold, its clock jumped
// before we met it, and it sits out one largest TTL in use, the time for
// every key it may have dropped early to have expired anyway. (A clock that
// stays off by a constant amount expires keys on time, so the sit-out is
// not repeated; a later jump shows in the node's own samples.) Until a
// quorum agrees with it or every node has a sample, n stays unchecked and
// does not vote: ready judges it again. The caller holds guardMu.
func (c *Client) compareClocksLocked(n *node) {
	g := n.guard.Load()
	threshold := c.clockThreshold()
	if g == nil || g.clockVetted || threshold < 0 {
		return
	}
	samples, have := c.clockSamples()
	now := c.clock.Now()
	agree, known := clockPeers(samples, have, n.index, now, threshold)
	ng := *g
	// Judged only on a quorum that agrees with it, or on every node's
	// sample: a node compared with a bare quorum that includes the one
	// whose clock jumped would be blamed for it.
	ng.clockVetted = agree >= c.quorum() || known == len(c.nodes)
	ng.clockUnchecked = !ng.clockVetted
	n.guard.Store(&ng)
	if !ng.clockVetted || agree >= c.quorum() {
		return
	}
	skew, _ := clockSkew(samples, have, n.index)
	c.sitOutLocked(n, now, SitOutClockSkew, fmt.Sprintf("clock is %v off the other nodes' (only %d of %d agree within %v)",
		skew.Round(time.Microsecond), agree, known, threshold))
}

// clockSamples gathers every node's last clock sample.
func (c *Client) clockSamples() ([]clockSample, []bool) {
	samples := make([]clockSample, len(c.nodes))
	have := make([]bool, len(c.nodes))
	for i, n := range c.nodes {
		samples[i], have[i] = n.peerClock().sample()
	}
	return samples, have
}

// fleetTTL is the largest TTL in use on these nodes as far as this client
// knows: its own, and the registers it read that cannot have expired yet.
func (c *Client) fleetTTL() time.Duration {
	ttl := time.Duration(c.maxTTL.Load())
	now := c.clock.Now()
	for _, n := range c.nodes {
		if r := n.reg.Load(); r != nil && now.Before(r.fleetUntil) {
			ttl = max(ttl, r.fleet)
		}
	}
	return ttl
}

// graceFor is the restart grace in force: the option, but never less than
// the largest TTL in use by any client of these nodes (a node that
// restarted empty must not vote while a lock it forgot may still be valid,
// whoever holds it). NoRestartGrace if the guard is off.
func (c *Client) graceFor() time.Duration {
	if c.opts.RestartGrace < 0 {
		return NoRestartGrace
	}
	return max(c.opts.RestartGrace, c.fleetTTL())
}

// recheck runs after a node answered, with the node's TIME from the reply:
// if the node's clock jumped, or go-redis opened a new connection during
// the call (it retries on a broken one, and the server may have restarted
// empty), the vote must pass the guards again.
func (c *Client) recheck(ctx context.Context, n *node, key string, sec, usec int64, sent, recv time.Time) error {
	if n.rdb == nil {
		return nil
	}
	jumped := false
	if addr, ok := n.masterFor(key); ok {
		jumped = c.observeClock(n, addr, time.Unix(sec, usec*1000), sent, recv)
	}
	if jumped || n.stale.Load() {
		return c.ready(ctx, n, key)
	}
	// Another call's probe may have cleared the stale mark since this
	// call's reply came from a new server (a restart, the master a
	// ClusterClient was redirected to), and installed its guard: judge the
	// vote by the guard in force now, not by the one checked before the
	// call.
	// (No I/O: the node is not stale, and has a guard.)
	if err := c.guardsPass(ctx, n, key); err != nil {
		return err
	}
	n.lastAnswer.Store(int64(sent.Sub(c.base)))
	return nil
}

// scriptKey is the first key of a script command built by script.args (or
// in its layout): the lock's keys share its hash slot, which a Cluster
// node's guard follows. "" if there is none.
func scriptKey(args []any) string {
	if len(args) > 3 {
		if k, ok := args[3].(string); ok {
			return k
		}
	}
	return ""
}

// slotted tells whether the keys of one script call to n must share a hash
// slot: n is a Redis Cluster, through a ClusterClient or as one server in
// cluster mode (CROSSSLOT otherwise).
func (n *node) slotted() bool {
	if _, ok := n.rdb.(*redis.ClusterClient); ok {
		return true
	}
	g := n.guard.Load()
	return g != nil && g.cluster != nil
}

// down tells whether n is in its hold-off after a failure.
func (c *Client) down(n *node) bool {
	until := n.downUntil.Load()
	return until != 0 && int64(c.clock.Now().Sub(c.base)) < until
}

// ready makes sure n has been probed since its last new connection and
// tells whether its vote counts now.
func (c *Client) ready(ctx context.Context, n *node, key string) error {
	if c.down(n) {
		return ErrNodeDown
	}
	return c.guardsPass(ctx, n, key)
}

// guardMaxAge is the age past which a node's guard is read again before
// its next vote. Events that lose keys without breaking a connection (an
// eviction, a flush, a fail-back under the same run_id) show only in a
// probe: a vote counts on a guard at most this old plus one probe's round
// trips, the window docs/PROTOCOL.md §11 states (for an extension, one
// renewal round more: renewalGuardsPass). A probe a second per node is a
// few small replies; an idle client probes only when it is used.
const guardMaxAge = time.Second

// guardsPass is ready without the down hold-off, which only spares a
// contended acquire the wait for a node that failed a moment ago: a renewal
// asks every node, since a node skipped may cost it its quorum.
func (c *Client) guardsPass(ctx context.Context, n *node, key string) error {
	return c.guardsPassAged(ctx, n, key, false)
}

// renewalGuardsPass is guardsPass for a renewal round, which reads a guard
// past guardMaxAge again in the background and judges its votes by the
// guard in force: a round has its node timeout to answer, and a probe (a
// few round trips, on a busy client) must not cost a held lock its
// renewal. Renewals fall due every third of a validity, so the next round
// has the new guard.
func (c *Client) renewalGuardsPass(ctx context.Context, n *node, key string) error {
	return c.guardsPassAged(ctx, n, key, true)
}

func (c *Client) guardsPassAged(ctx context.Context, n *node, key string, background bool) error {
	if n.rdb != nil {
		g := n.guard.Load()
		if n.stale.Load() || g == nil {
			if _, err := c.refresh(ctx, n, time.Duration(c.maxTTL.Load())); err != nil {
				return err
			}
		} else if c.clock.Now().Sub(g.probed) > guardMaxAge && n.reprobing.CompareAndSwap(false, true) {
			// One caller probes again; the others go on with the guard
			// in force, a probe's round trips older than the bound.
			if background {
				c.bg.add()
				go func() {
					defer c.bg.done()
					defer n.reprobing.Store(false)
					ctx, cancel := context.WithTimeout(context.Background(), c.releaseTimeout())
					defer cancel()
					_, _ = c.refresh(ctx, n, time.Duration(c.maxTTL.Load()))
				}()
			} else {
				_, err := c.refresh(ctx, n, time.Duration(c.maxTTL.Load()))
				n.reprobing.Store(false)
				if err != nil {
					return err
				}
			}
		}
	}
	g := n.guard.Load()
	if g == nil {
		return nil // a test fake without guard
	}
	if g.clockUnchecked {
		c.guardMu.Lock()
		c.compareClocksLocked(n)
		c.guardMu.Unlock()
		g = n.guard.Load()
	}
	err := g.voteErr(c.clock.Now(), c.graceFor(), key)
	if err == errSlotUnclaimed {
		n.stale.Store(true) // slots moved since the probe: look again
	}
	return err
}

// probeCluster probes a node that is a Redis Cluster (DESIGN §6). A keyless
// command sent through the ClusterClient (INFO, TIME) reaches an arbitrary
// master, so a restart of the master that serves a lock's slot could go
// unseen: every master is probed directly instead, and the node is one
// server for the guards whose identity is every master's address and
// run_id. A new master for any slot (a restart, a failover, a slot moved
// to a master not seen before, or to a known master that did not serve it:
// slotsGained) is then a new server: the node sits out the
// grace, for every lock. That is stricter than a guard per slot's master,
// which would let the node keep voting for the locks of the other slots:
// it costs availability, never safety.
//
// The register of the largest TTL in use is read through the
// ClusterClient, on the master that serves its key's slot.
func (c *Client) probeCluster(ctx context.Context, n *node, cc *redis.ClusterClient, raise time.Duration) (probeResult, error) {
	var res probeResult
	pipe := cc.Pipeline()
	reg := c.registerCmd(ctx, pipe, raise)
	res.sent = c.clock.Now()
	_, _ = pipe.Exec(ctx)
	var mu sync.Mutex
	var shards []probeResult
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n.watch(m)
		r, err := c.probeServer(ctx, m, 0, false)
		r.addr = m.Options().Addr
		if err == nil {
			var nodes string
			if nodes, err = m.ClusterNodes(ctx).Result(); err == nil {
				r.claims, err = ownSlots(nodes, true)
				r.replicas = max(r.replicas, replicasInView(nodes))
				// The marker in a slot the master serves (not one it
				// is importing, which it would answer with MOVED).
				if served, _ := ownSlots(nodes, false); err == nil && len(served) > 0 {
					value := markerValue()
					pipe := m.Pipeline()
					cmd := markerCmd(ctx, pipe, c.markerKeyIn(served), value)
					_, _ = pipe.Exec(ctx)
					r.markerWas, r.markerIs = markerReply(cmd, value)
				}
			}
		}
		mu.Lock()
		shards = append(shards, r)
		mu.Unlock()
		if err != nil {
			return fmt.Errorf("master %s: %w", r.addr, err)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	if len(shards) == 0 {
		return res, errors.New("redlock: the cluster has no master")
	}
	slices.SortFunc(shards, func(a, b probeResult) int { return strings.Compare(a.addr, b.addr) })
	ids := make([]string, len(shards))
	first := shards[0]
	res.role, res.uptime, res.appendOnly, res.appendFsync = "master", first.uptime, true, "always"
	res.shards = shards
	for i, r := range shards {
		ids[i] = r.addr + "=" + r.runID
		res.servers = append(res.servers, r.runID)
		if r.role != "master" {
			// The layout said master, the server says not: a failover
			// the layout has not caught up with. Probe again later.
			return res, fmt.Errorf("redlock: %s is a %s, not a master, in a stale view of the cluster", r.addr, r.role)
		}
		// The youngest master dates the node, read at the latest reply:
		// a start dated no earlier than any master's.
		res.uptime = min(res.uptime, r.uptime)
		if r.recv.After(res.recv) {
			res.recv = r.recv
		}
		res.promoted = res.promoted || r.promoted
		res.evicted += r.evicted
		if r.evicting() || res.policy == "" {
			res.maxMemory, res.policy = r.maxMemory, r.policy
		}
		res.replicas += r.replicas
		if !r.persistent() {
			res.appendOnly, res.appendFsync = r.appendOnly, r.appendFsync
		}
	}
	res.runID = strings.Join(ids, ",")
	if err := reg.Err(); err == nil {
		res.fleetTTL, res.registerErr = registerReply(reg.Val())
	} else {
		res.registerErr = err
	}
	return res, nil
}

// watch makes the node stale whenever m, one server of a Cluster node,
// dials a new connection, as dialWatch does for a node that is one server.
func (n *node) watch(m *redis.Client) {
	if _, seen := n.watched.LoadOrStore(m, struct{}{}); !seen {
		m.AddHook(serverWatch{dialWatch{n}, m.Options().Addr})
	}
}
