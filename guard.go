package redlock

// The node guards (DESIGN §3, §7) in one room: everything that decides
// whether a node's vote counts. A probe (probe.go) reads the servers;
// refresh turns what it read into a guard, dating each server's epoch by
// the one rule of epoch.go, checking replicas, duplicates and eviction,
// and comparing clocks (one history per server, so a Cluster master's
// jump is its own); ready, guardsPass and recheck judge each vote by it on
// the hot path.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/observe"
)

// The reasons a node sits out (observe.Event.Reason).
const (
	sitOutClockJump = "clock-jump" // its clock moved against ours by more than the threshold
	sitOutClockSkew = "clock-skew" // its clock disagrees with a quorum of the other nodes'
	sitOutRestart   = "restart"    // it restarted without persistence: it votes again after the restart grace
)

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
	// unconfirmedAt is node.unconfirmed read before the probe that made
	// the guard was sent; fsynced tells that the guard counted the node,
	// one server, as persistent through the fsyncs WAITAOF confirms
	// (FsyncedVotes; a Cluster's masters: shardGuard.fsynced). A
	// vote counted unconfirmed since then undoes that persistence:
	// unconfirmedSince.
	unconfirmedAt int64
	fsynced       bool
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

// withoutWriteRefusals is g without the marker errors of the servers that
// refused every write when probed (serverEpoch.markerRefusedWrites); g
// itself if there are none.
func (g *nodeGuard) withoutWriteRefusals() *nodeGuard {
	if !g.server.markerRefusedWrites() && !slices.ContainsFunc(g.shards, func(sh shardGuard) bool { return sh.markerRefusedWrites() }) {
		return g
	}
	c := *g
	if c.server.markerRefusedWrites() {
		c.server.markerErr = nil
	}
	c.shards = slices.Clone(g.shards)
	for i := range c.shards {
		if c.shards[i].markerRefusedWrites() {
			c.shards[i].markerErr = nil
		}
	}
	return &c
}

// shardGuard is what a Cluster node's guard knows of one of its masters.
type shardGuard struct {
	serverEpoch // its address, run_id, slots (served or importing, in its own view at the probe) and epoch
	// replicas are the replicas CLUSTER NODES lists for it, connected or
	// not (at least those connected): a durable vote on it needs that many
	// acknowledgements. waitAOF as node.waitAOF.
	replicas int
	waitAOF  bool
	// aofView is what the probe saw of its AOF, as node.aofView. fsynced:
	// it counts as persistent through WAITAOF (unconfirmedSince).
	aofView aofView
	fsynced bool
}

// serves tells whether the master took (or was importing) slot at the probe.
func (sg *shardGuard) serves(slot int) bool { return inRanges(sg.slots, slot) }

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
// errLossBeingDated is the vote of a node whose probe saw it lose data
// (a restart, a promotion, an eviction, a flush...) while that probe still
// learns how long it sits out: the guard in force does not know the loss.
var errLossBeingDated = fmt.Errorf("%w: a probe saw it lose data and is learning the largest TTL in use from the other nodes", ErrNodeSittingOut)

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
	if _, cluster := n.rdb.(*redis.ClusterClient); cluster && c.opts.FsyncedVotes {
		// The same on a Cluster node for the master's fsync: the
		// register's key sits on its own master, where no vote's WAITAOF
		// covers a raise the probe made. The raise a vote relies on goes
		// through the node's pipe, with a WAITAOF of its own (withWait).
		raise = 0
	}
	// Before the probe: a vote counted unconfirmed from now on may be
	// missed by its barrier (fsyncBarrier).
	unconfirmedAt := n.unconfirmed.Load()
	n.stale.Store(false)
	res, err := c.probe(ctx, n, raise, !unconfirmedSince(n.guard.Load(), unconfirmedAt).fsyncedAll())
	if err != nil {
		n.stale.Store(true) // try again next time
		return res, err
	}
	lastAnswer := c.base.Add(time.Duration(n.lastAnswer.Swap(int64(res.sent.Sub(c.base)))))
	old := unconfirmedSince(n.guard.Load(), n.unconfirmed.Load())
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
		n.learning.Add(1)
		defer n.learning.Add(-1) // after the new guard is installed, below
		c.learnFleetTTL(ctx, n)
	}

	c.guardMu.Lock()
	defer c.guardMu.Unlock()
	old = unconfirmedSince(n.guard.Load(), n.unconfirmed.Load()) // another probe may have installed one meanwhile
	if old != nil && res.sent.Before(old.probed) {
		// A probe sent before the guard in force was answered: what it
		// read is older than that guard, which stays. (Installed, it would
		// undo what only the newer probe saw, a marker it could not read:
		// serverEpoch.markerErr.)
		return res, nil
	}
	g := epochsOf(old, res, lastAnswer)
	g.runID, g.servers, g.role, g.cluster, g.probed = res.runID, res.servers, res.role, res.cluster, res.recv
	g.unconfirmedAt = unconfirmedAt
	if res.shards == nil {
		g.fsynced = res.fsyncMode && res.persistent()
		n.aofView.Store(uint32(viewOf(res)))
	}
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
		c.emit(observe.Event{Kind: observe.NodeRestarted, Node: n.name})
	}
	if old != nil && g.lostSince(old) && g.grace >= 0 {
		if err := g.voteErr(c.clock.Now(), g.grace, ""); errors.Is(err, ErrNodeSittingOut) {
			c.emit(observe.Event{Kind: observe.NodeSitOut, Node: n.name, Reason: sitOutRestart, Err: err})
		}
	}
	if res.role != "master" {
		g.excluded = replicaRefusal(n, res)
	}
	if n.pipes != nil && res.shards != nil {
		n.pipes.sharded.Store(res.spublish && !classicWakeups.Load())
	}
	if n.pipes != nil {
		n.pipes.native.Store(uint32(res.native))
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
	if res.markerErr != nil || slices.ContainsFunc(res.shards, func(r probeResult) bool { return r.markerErr != nil }) {
		// No vote on a guard that read nothing of the marker
		// (serverEpoch.markerErr): the next attempt probes again.
		n.stale.Store(true)
	}
	if res.shards != nil {
		c.waiters.relayout(n.index) // a master may have lost the slot a waiter listens on
	}
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
		g.shards[i] = shardGuard{serverEpoch: nextEpoch(prev, m, lastAnswer, old != nil), replicas: r.replicas, waitAOF: r.waitAOF,
			aofView: viewOf(r), fsynced: r.fsyncMode && r.persistent()}
	}
	return g
}

// unconfirmedSince is g as the next probe must judge it, given the node's
// count of votes answered without a confirmed fsync (node.unconfirmed): a
// guard that counted its servers as persistent through WAITAOF
// (FsyncedVotes) no longer does if a vote was counted unconfirmed since
// its probe was sent. Such a vote was perhaps never fsynced (it was sent
// before the node was known to be persistent, or its master stopped
// confirming fsyncs), so a restart seen next is one without persistence
// (epoch.go). A guard without that persistence is g itself.
func unconfirmedSince(g *nodeGuard, unconfirmed int64) *nodeGuard {
	if g == nil || g.unconfirmedAt == unconfirmed {
		return g
	}
	c := *g
	if c.fsynced {
		c.server.persistent, c.fsynced = false, false
	}
	c.shards = slices.Clone(g.shards)
	for i := range c.shards {
		if sh := &c.shards[i]; sh.fsynced {
			sh.persistent, sh.fsynced = false, false
		}
	}
	return &c
}

// fsyncedAll tells whether g counted every server of the node as
// persistent through WAITAOF: a probe then needs no barrier, as every
// vote counted since carried its own confirmation (or moved
// node.unconfirmed, which undoes g's persistence: unconfirmedSince).
func (g *nodeGuard) fsyncedAll() bool {
	if g == nil {
		return false
	}
	if g.shards == nil {
		return g.fsynced
	}
	for _, sh := range g.shards {
		if !sh.fsynced {
			return false
		}
	}
	return true
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
// included, and hand the lock to a second holder. A server that evicts no
// more but evicted since its start is refused too: the evictions may have
// taken the TTL registers with the lock keys. Read at every probe, so
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
		who := "its server"
		if r.addr != "" {
			who = "its master " + r.addr
		}
		switch {
		case r.evicting():
			return &ConfigError{Field: "node", Value: n.name,
				Reason: fmt.Sprintf("may evict lock keys: %s has maxmemory %d bytes and maxmemory-policy %s, and every lock key has a TTL; set maxmemory-policy noeviction, or give the locks a Redis of its own, or set Options.AllowEvictingNodes to accept that (an eviction then makes the node sit out the restart grace)",
					who, r.maxMemory, r.policy),
				Err: ErrEvictingNode}
		case r.evicted > 0:
			// It evicts no more, but it did: the evictions may have
			// taken lock keys, and with them the TTL registers that tell
			// how long a node that lost keys must sit out, on every node
			// the same cache filled. Only a RestartGrace the caller
			// declared (which AllowEvictingNodes requires) still knows.
			return &ConfigError{Field: "node", Value: n.name,
				Reason: fmt.Sprintf("has evicted %d keys since it started (evicted_keys; maxmemory-policy is now %s): they may include lock keys and the TTL registers that date the restart grace; set Options.AllowEvictingNodes (with a RestartGrace of at least the largest TTL in use) to accept that, or CONFIG RESETSTAT %s once the largest TTL in use has passed since its last eviction",
					r.evicted, r.policy, who),
				Err: ErrEvictingNode}
		}
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
	c.sitOutLocked(n, recv, sitOutClockJump, fmt.Sprintf("%s jumped by %v against ours", who, jump.Round(time.Microsecond)))
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
			c.sitOutLocked(n, c.clock.Now(), sitOutClockSkew, fmt.Sprintf("master %s's clock is %v off master %s's (more than %v)",
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
	c.emit(observe.Event{Kind: observe.NodeSitOut, Node: n.name, Reason: kind, Err: fmt.Errorf("%w: %s; sits out for %v", ErrNodeSittingOut, reason, hold)})
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
	c.sitOutLocked(n, now, sitOutClockSkew, fmt.Sprintf("clock is %v off the other nodes' (only %d of %d agree within %v)",
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
func (c *Client) recheck(ctx context.Context, n *node, key string, sec, usec int64, sent, recv time.Time, extending bool) error {
	if n.rdb == nil {
		return nil
	}
	jumped := false
	if addr, ok := n.masterFor(key); ok {
		jumped = c.observeClock(n, addr, time.Unix(sec, usec*1000), sent, recv)
	}
	if jumped || n.stale.Load() {
		if extending {
			return c.readyToExtend(ctx, n, key)
		}
		return c.ready(ctx, n, key)
	}
	// Another call's probe may have cleared the stale mark since this
	// call's reply came from a new server (a restart, the master a
	// ClusterClient was redirected to), and installed its guard: judge the
	// vote by the guard in force now, not by the one checked before the
	// call.
	// (No I/O: the node is not stale, and has a guard.)
	if err := c.guardsPassAged(ctx, n, key, false, extending); err != nil {
		return err
	}
	n.lastAnswer.Store(int64(sent.Sub(c.base)))
	return nil
}

// ready makes sure n has been probed since its last new connection and
// tells whether its vote counts now.
func (c *Client) ready(ctx context.Context, n *node, key string) error {
	if c.down(n) {
		return ErrNodeDown
	}
	return c.guardsPass(ctx, n, key)
}

// readyToExtend is ready for an extension, which a server that refused the
// data-kept marker's write for want of memory (or refused every write) still
// takes (guardsPassAged).
func (c *Client) readyToExtend(ctx context.Context, n *node, key string) error {
	if c.down(n) {
		return ErrNodeDown
	}
	return c.guardsPassAged(ctx, n, key, false, true)
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
	return c.guardsPassAged(ctx, n, key, false, false)
}

// renewalGuardsPass is guardsPass for a renewal round, which reads a guard
// past guardMaxAge again in the background and judges its votes by the
// guard in force: a round has its node timeout to answer, and a probe (a
// few round trips, on a busy client) must not cost a held lock its
// renewal. Renewals fall due every third of a validity, so the next round
// has the new guard.
func (c *Client) renewalGuardsPass(ctx context.Context, n *node, key string) error {
	return c.guardsPassAged(ctx, n, key, true, true)
}

// guardsPassAged is guardsPass; background: a guard past guardMaxAge is
// read again in the background (renewalGuardsPass); extending: the vote
// is an extension's.
func (c *Client) guardsPassAged(ctx context.Context, n *node, key string, background, extending bool) error {
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
	if n.learning.Load() > 0 {
		return errLossBeingDated
	}
	if g.clockUnchecked {
		c.guardMu.Lock()
		c.compareClocksLocked(n)
		c.guardMu.Unlock()
		g = n.guard.Load()
	}
	if extending {
		// An extension: a server that refused every write when probed
		// (full, say) still takes it (PEXPIRE needs no memory), and no
		// acquire could have taken the key there meanwhile. Once it
		// takes writes again, a probe reads the marker and dates any
		// flush.
		g = g.withoutWriteRefusals()
	}
	err := g.voteErr(c.clock.Now(), c.graceFor(), key)
	if err == errSlotUnclaimed {
		n.stale.Store(true) // slots moved since the probe: look again
	}
	return err
}

// replicaRefusal refuses n if its probe res shows a replica; nil otherwise.
func replicaRefusal(n *node, res probeResult) error {
	if res.role == "" || res.role == "master" {
		return nil
	}
	what := "is a " + res.role
	if res.master != "" {
		what += " of " + res.master // which may be another of the nodes, refused then for its replica
	}
	return &ConfigError{Field: "node", Value: n.name, Reason: what + ", not a master: Redlock needs independent masters", Err: ErrNotIndependent}
}

// sameServerRefusal refuses n, the same server (run_id id) as other.
func sameServerRefusal(n, other *node, id string) error {
	return &ConfigError{Field: "node", Value: n.name, Reason: "is the same server as node " + other.name + " (same run_id " + id + ")", Err: ErrNotIndependent}
}
