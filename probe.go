package redlock

// The probe: one pipelined round trip per server that reads what the
// guards (guard.go) judge: INFO (start, role, replication, persistence,
// memory and evictions), TIME, the data-kept marker and the TTL register;
// on a Cluster node, every master directly.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// probeResult is what one probe round trip tells about a node.
type probeResult struct {
	runID       string
	role        string
	uptime      time.Duration
	appendOnly  bool
	appendFsync string // "" if CONFIG GET is not allowed
	// aofRewriting: an AOF rewrite runs or is scheduled. INFO shows an AOF
	// turned on at run time exactly so, and until that first rewrite
	// ends the server logs its writes to a file no manifest names: a
	// crash loses them, though aof_enabled reads 1.
	aofRewriting bool
	fleetTTL     time.Duration // the node's register of the largest TTL in use
	registerErr  error         // why the register could not be read or raised
	cluster      *ClusterInfo  // nil unless the node runs in cluster mode
	addr         string        // a Cluster node's master: its address
	claims       []SlotRange   // and the slots it serves or imports
	migrating    []SlotRange   // and the slots it serves but is migrating away
	shards       []probeResult // a Cluster node's masters, by address
	promoted     bool          // a master promoted from replica since it started: dated as started now
	replicas     int           // replicas connected to the master(s); for a Cluster's master, listed for it
	links        []ReplicaInfo // the master's replicas, as its INFO replication lists them
	waitAOF      bool          // the server has WAITAOF (7.2+) and its AOF on
	noWaitAOF    bool          // COMMAND INFO answered that the server has no WAITAOF (not an error: a refusal tells nothing)
	spublish     bool          // a Cluster node whose masters all have SPUBLISH (sharded wake-ups)
	native       nativeCaps    // the native compare-and-act commands the server (every master of a Cluster node) has
	servers      []string      // the run_ids behind the node (one, or a Cluster's masters)
	master       string        // a replica's master, host:port as its INFO replication tells, for the refusal
	replID       string        // master_replid: changes at every promotion, resync from another master and restart
	maxMemory    int64         // maxmemory in bytes, 0: no limit
	policy       string        // maxmemory_policy
	evicted      int64         // evicted_keys since the start (or CONFIG RESETSTAT)
	// markerWas and markerIs are the data-kept marker's value before and
	// after the probe (epoch.go): "" and a new value if it was missing,
	// both "" if it could not be read.
	markerWas, markerIs string
	// markerErr: why the marker's SET NX GET failed (OOM at maxmemory
	// with noeviction, LOADING, MISCONF, a timeout), so that the probe
	// read nothing of it (serverEpoch.markerErr); nil if it read it.
	markerErr error
	// failover: the node may fail over (Sentinel names its master, or its
	// servers have or had replicas), so a server there may have been
	// promoted before its last start, which INFO no longer shows after it.
	failover   bool
	nodeTime   time.Time
	sent, recv time.Time // the pipelined round trip that read INFO and the register
	// timeSent and timeRecv bracket the TIME call that read nodeTime.
	timeSent, timeRecv time.Time
	// fsyncMode: Options.FsyncedVotes, waitAOF and fsyncTrusted: the
	// server's persistence is judged by the fsyncs WAITAOF confirms
	// (persistent). (With the option every vote on every server waits for
	// a WAITAOF whatever the probe saw, fsyncMode or not: durable.go,
	// masterWrite.) fsynced: the probe's barrier (a write and
	// a WAITAOF 1 0 behind it) confirmed that the server fsynced every
	// write it took before the probe, or no barrier was asked (see probe).
	fsyncMode, fsynced bool
	// build is the server's name and version as INFO server tells them
	// ("redis 8.6.3", "valkey 9.1.2"), for the reasons the guard gives.
	// fsyncTrusted: its WAITAOF confirms the local fsync only once the
	// fsync returned (fsyncTrustedBuild). fsyncUntrusted: with
	// Options.FsyncedVotes, a server with WAITAOF and its AOF on that is
	// not trusted so, which the reasons name.
	build                        string
	fsyncTrusted, fsyncUntrusted bool
}

// persistent tells whether the node keeps every acknowledged write across
// a restart: the lock keys and the fence registers survive, and the node
// needs no restart grace (DESIGN §3).
//
// Without Options.FsyncedVotes, or on a server whose WAITAOF is not
// trusted (none, or one that may confirm before it fsyncs:
// fsyncTrustedBuild), that takes appendfsync always: the server fsyncs
// every write before it answers. With them (fsyncMode), appendfsync
// everysec counts too, and always only so: every vote on the server is
// then followed by a WAITAOF and counts only once the server confirms its
// fsync (durable.go), and the probe confirmed that every write the server
// took before it is fsynced (fsynced), so that votes counted before the
// node was known to be persistent are covered too. appendfsync no never
// counts: that server leaves the fsync to the kernel, and its WAITAOF
// never confirms one. (A vote counted unconfirmed since the probe undoes
// it: unconfirmedSince.)
//
// That a vote never counts unconfirmed on a server with its AOF on, even
// while this client counts it as not persistent (a rewrite running,
// appendfsync no) or saw its AOF off, or could not ask, is what makes the
// rule hold across clients: another client with FsyncedVotes whose last
// probe saw the server persistent excuses its restart, and so relies on
// every vote counted there having been fsynced, whoever counted it. So
// every vote waits for a WAITAOF, and only the server's own answer that
// its AOF is off (as the probe saw) counts one unconfirmed
// (durable.go, fsyncVerdict).
//
// An AOF rewrite in progress or scheduled does not count: INFO cannot tell
// a routine rewrite (durable) from the first one of an AOF turned on at
// run time (not durable until it ends), so a probe that sees either takes
// the node as not persistent, and a restart after it as one without
// persistence. That costs a grace after a restart during a routine
// rewrite; docs/PROTOCOL.md §11 states what no probe can see.
func (r probeResult) persistent() bool {
	if r.fsyncMode {
		return r.fsynced && r.fsyncs()
	}
	return r.appendOnly && !r.aofRewriting && r.appendFsync == "always"
}

// notPersistent tells why persistent is false, for the reason a sit-out
// gives (epoch.go); "" if it is true.
func (r probeResult) notPersistent() string {
	switch {
	case r.persistent():
		return ""
	case r.fsyncMode && r.fsyncs():
		return "its AOF is on, but it did not confirm with WAITAOF that it fsynced the writes before the probe"
	case r.fsyncMode:
		return "it keeps its keys only with appendonly yes, appendfsync everysec or always, and no AOF rewrite running"
	case r.fsyncUntrusted && r.appendFsync == "everysec":
		return fmt.Sprintf("it keeps its keys only with appendonly yes and appendfsync always: FsyncedVotes counts everysec only on Redis 8.0 or later, and %s may confirm WAITAOF before it fsyncs (redis/redis#13793)", r.build)
	}
	return "it keeps its keys only with appendonly yes and appendfsync always"
}

// fsyncTrustedBuild tells whether a server's WAITAOF, by the fields of its
// INFO server, confirms the local fsync (numlocal 1) only once fsync
// returned for every write it covers. Redis 7.4 brought a bug in
// flushAppendOnlyFile: with everysec, a write made less than a second
// after the last fsync, found with the AOF buffer already written, moved
// the fsynced offset forward without an fsync, so WAITAOF 1 0 answered 1
// for a write only in the page cache; a power loss then loses a vote
// counted as fsynced. Redis 8.0 fixed it (redis/redis#13793). Valkey
// 9.1.2 still answers so (fsynced_powerloss_test.go traces it with strace),
// and no Valkey release is known to have fixed it: a Valkey server is not
// trusted, whatever its version. Nor is Redis before 8.0, nor a server
// that does not say what it is.
func fsyncTrustedBuild(fields map[string]string) bool {
	if fields["server_name"] != "" || fields["valkey_version"] != "" {
		return false // Valkey (server_name:valkey), or another fork naming itself
	}
	major, _, _ := strings.Cut(fields["redis_version"], ".")
	v, err := strconv.Atoi(major)
	return err == nil && v >= 8
}

// buildOf names the server by its INFO server fields: "valkey 9.1.2",
// "redis 8.6.3".
func buildOf(fields map[string]string) string {
	if v := fields["valkey_version"]; v != "" {
		return "valkey " + v
	}
	if name := fields["server_name"]; name != "" {
		return name + " " + fields["redis_version"]
	}
	return "redis " + fields["redis_version"]
}

// fsyncs tells whether the server's AOF settings let WAITAOF confirm an
// fsync soon: the AOF on, no rewrite (the first one of an AOF turned on at
// run time confirms nothing until it ends), and appendfsync everysec or
// always. A probe asks no barrier of a server that cannot confirm one, and
// its votes wait for none: it is not persistent either way.
func (r probeResult) fsyncs() bool {
	return r.appendOnly && !r.aofRewriting && (r.appendFsync == "always" || r.appendFsync == "everysec")
}

// evicting tells whether the server may evict keys: a maxmemory and any
// policy but noeviction. Every lock key has a TTL, so the volatile-*
// policies may evict them as well as the allkeys-* ones.
func (r probeResult) evicting() bool { return r.maxMemory > 0 && r.policy != "noeviction" }

// marks are what nextEpoch reads of the server the probe read.
func (r probeResult) marks() serverMarks {
	return serverMarks{addr: r.addr, runID: r.runID, replID: r.replID, uptime: r.uptime,
		persistent: r.persistent(), notPersistent: r.notPersistent(), promoted: r.promoted, failover: r.failover, evicted: r.evicted, evicting: r.evicting(),
		markerWas: r.markerWas, markerIs: r.markerIs, markerErr: r.markerErr, claims: r.claims, migrating: r.migrating, sent: r.sent, recv: r.recv}
}

// probe asks the node who it is, how long it has been up, its role, its
// persistence and its register of the largest TTL in use, in one
// pipelined round trip, then its time, timed on a warm connection. raise, if positive, raises that register first (see
// ttlRegister).
//
// barrier asks each server that counts as persistent through WAITAOF
// (FsyncedVotes) to confirm that every write it took before the probe is
// fsynced (fsyncBarrier): refresh asks it when the node's last guard did
// not count it so, as votes counted meanwhile carried no confirmation of
// their own. Without it such a server's fsynced stands on that guard.
func (c *Client) probe(ctx context.Context, n *node, raise time.Duration, barrier bool) (probeResult, error) {
	if cc, ok := n.rdb.(*redis.ClusterClient); ok {
		return c.probeCluster(ctx, n, cc, raise, barrier)
	}
	res, err := c.probeServer(ctx, n.rdb, raise, true, barrier)
	res.servers = []string{res.runID}
	return res, err
}

// probeServer probes one server; with register, it also reads (and
// raises) the register of the largest TTL in use there.
func (c *Client) probeServer(ctx context.Context, rdb redis.UniversalClient, raise time.Duration, register, barrier bool) (probeResult, error) {
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
	if c.opts.DurableVotes || c.opts.FsyncedVotes {
		waitAOFInfo = pipe.Do(ctx, "command", "info", "waitaof")
	}
	// Without register, rdb is a master of a Cluster node: does it have
	// SPUBLISH (Redis 7.0+, Valkey), to keep wake-ups in their shard?
	var spublishInfo *redis.Cmd
	if !register {
		spublishInfo = pipe.Do(ctx, "command", "info", "spublish")
	}
	// Which native compare-and-act commands the server has (native.go),
	// asked at every probe: a failover may have put an older server here.
	nativeInfo := pipe.Do(ctx, nativeCommands...)
	setInfo := pipe.Do(ctx, setDocs...)
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
		res.markerWas, res.markerIs, res.markerErr = markerReply(marker, value)
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
	res.aofRewriting = fields["aof_rewrite_in_progress"] == "1" || fields["aof_rewrite_scheduled"] == "1"
	if waitAOFInfo != nil {
		res.waitAOF = res.appendOnly && hasCommand(waitAOFInfo.Val())
		res.noWaitAOF = waitAOFInfo.Err() == nil && !hasCommand(waitAOFInfo.Val())
	}
	if spublishInfo != nil {
		res.spublish = hasCommand(spublishInfo.Val())
	}
	res.native = nativeCapsOf(nativeInfo) | setIfEqOf(setInfo)
	if fsync.Err() == nil {
		res.appendFsync = fsync.Val()["appendfsync"]
	}
	res.build, res.fsyncTrusted = buildOf(fields), fsyncTrustedBuild(fields)
	res.fsyncMode = c.opts.FsyncedVotes && res.waitAOF && res.fsyncTrusted
	res.fsyncUntrusted = c.opts.FsyncedVotes && res.waitAOF && !res.fsyncTrusted
	if res.fsyncMode {
		// A Cluster's master gets its barrier from probeCluster, in a
		// slot it serves.
		res.fsynced = !barrier || register && res.fsyncs() && fsyncBarrier(ctx, rdb, c.barrierKey(c.registerKey()))
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
		var nodes string
		res.cluster, nodes = probeCluster(ctx, rdb, c.registerKey())
		if res.cluster.Err == nil {
			// A Cluster master given as one node loses keys as a Cluster
			// node's masters do (a slot gained without its keys, a
			// migration closed by hand): nextEpoch judges its slots by
			// the same rules. (A probe that could not read them leaves
			// none, and the next one that can sees every slot gained: a
			// grace, never a loss unseen.)
			res.claims, _ = ownSlots(nodes, true)
			res.migrating = migratingSlots(nodes)
		}
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
func (c *Client) probeCluster(ctx context.Context, n *node, cc *redis.ClusterClient, raise time.Duration, barrier bool) (probeResult, error) {
	var res probeResult
	pipe := cc.Pipeline()
	reg := c.registerCmd(ctx, pipe, raise)
	res.sent = c.clock.Now()
	_, _ = pipe.Exec(ctx)
	var mu sync.Mutex
	var shards []probeResult
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n.watch(m)
		r, err := c.probeServer(ctx, m, 0, false, barrier)
		r.addr = m.Options().Addr
		if err == nil {
			var nodes string
			if nodes, err = m.ClusterNodes(ctx).Result(); err == nil {
				r.claims, err = ownSlots(nodes, true)
				r.migrating = migratingSlots(nodes)
				r.replicas = max(r.replicas, replicasInView(nodes))
				// The marker in a slot the master serves (not one it
				// is importing, which it would answer with MOVED).
				if served, _ := ownSlots(nodes, false); err == nil && len(served) > 0 {
					value := markerValue()
					pipe := m.Pipeline()
					cmd := markerCmd(ctx, pipe, c.markerKeyIn(served), value)
					_, _ = pipe.Exec(ctx)
					r.markerWas, r.markerIs, r.markerErr = markerReply(cmd, value)
					if r.fsyncMode && barrier && r.fsyncs() {
						r.fsynced = fsyncBarrier(ctx, m, c.barrierKey(slotTags()[served[0].First]))
					}
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
	res.spublish = true
	res.native = ^nativeCaps(0)
	for i, r := range shards {
		res.spublish = res.spublish && r.spublish
		res.native &= r.native // a lock's slot may be on any master
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
			res.appendOnly, res.appendFsync, res.aofRewriting = r.appendOnly, r.appendFsync, r.aofRewriting
			res.fsyncMode, res.fsynced = r.fsyncMode, r.fsynced
			res.build, res.fsyncTrusted, res.fsyncUntrusted = r.build, r.fsyncTrusted, r.fsyncUntrusted
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

// fsyncBarrier tells whether the server fsynced every write it took before
// now: it writes a key of its own (a counter under the key prefix, in the
// hash slot of tag) and asks WAITAOF 1 0 behind it, on the same
// connection. WAITAOF waits for the server's fsynced replication offset to
// reach the one its connection's last write left, and that offset counts
// every connection's writes: the barrier covers the votes any client's
// earlier writes made there, also those counted unconfirmed while the
// AOF was off (PROTOCOL §13, rule 1) and any client's writes that no
// WAITAOF of theirs confirmed.
//
// Any error fails it: without its own write (an INCR refused, NOPERM for
// an ACL user without +incr, or OOM) the WAITAOF covers only what the
// connection wrote before, or nothing (a WAITAOF on a connection that never
// wrote answers [1 0] at once), and proves nothing of the other clients'
// writes (TestBreak2BarrierWithoutIncr).
//
// Its WAITAOF, as a vote's, may confirm before the fsync when an AOF
// rewrite starts while it waits: the master's INFO persistence stats read
// before the INCR and after the WAITAOF must show none started
// (rewriteStarted, durable.go).
func fsyncBarrier(ctx context.Context, rdb redis.UniversalClient, key string) bool {
	pipe := rdb.Pipeline()
	before := pipe.Info(ctx, "persistence", "stats")
	incr := pipe.Incr(ctx, key)
	wait := pipe.Do(ctx, "waitaof", 1, 0, fsyncTimeout(ctx))
	after := pipe.Info(ctx, "persistence", "stats")
	if _, err := pipe.Exec(ctx); err != nil || incr.Err() != nil {
		return false
	}
	v, err := wait.Int64Slice()
	return err == nil && len(v) == 2 && v[0] >= 1 && rewriteStarted(before, after) == nil
}

// barrierKey is the key fsyncBarrier writes, in the hash slot of tag.
func (c *Client) barrierKey(tag string) string {
	return c.opts.KeyPrefix + "fsync-barrier{" + tag + "}"
}
