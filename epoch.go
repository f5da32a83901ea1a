package redlock

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The node guards ask one question of every server that holds a lock's
// keys (DESIGN §7): since when may it have forgotten a key it granted? The
// answer is an epoch: a server's data may have been lost at its start; a
// vote counts only once the whole restart grace (the largest TTL in use)
// has passed since the last event that may have lost keys, when every key
// it may have forgotten would have expired anyway. Every such event starts
// a new epoch, and nextEpoch below is the one place that says which events
// those are, for a node that is one server (standalone, or the master a
// Sentinel names) and for each master of a Cluster node alike:
//
//   - a start without persistence (appendonly yes, appendfsync always;
//     with FsyncedVotes and WAITAOF, everysec too: probe.go, persistent),
//     or of a server that was not persistent at the last probe (a setting
//     changed at run time is undone by a restart that reads the config
//     file, and the AOF it loads lacks what it did not log or fsync), or
//     any start on a node that may fail over (a promotion before the start
//     no longer shows after it): dated at the start;
//   - a promotion from replica (second_repl_offset set) of a server not met
//     before, and any change of master_replid of a server met before (a
//     fail-back: a master that was a replica in between and resynced from
//     another master, even under the same address and run_id). Neither is
//     dated by the server: dated at the probe that sees it, the latest it
//     can have been;
//   - a master new to a Cluster node the client knew (a failover, a new
//     master), or one serving slots it did not serve at the last probe (a
//     reshard, with or without its keys), or one that stopped migrating a
//     slot it still serves (a migration closed without the slot moving:
//     the keys MIGRATEd out stay on the importing master): dated at the
//     probe;
//   - an eviction: evicted_keys changed since the last probe, or is not 0
//     when the client first meets the server: dated at the probe;
//   - a flush, or any loss of the dataset: the data-kept marker (below) is
//     gone, or not the one the client saw: dated at the probe.
//
// Persistence answers one question only: did this server keep its own
// writes across its own restart? It dates no event but a restart, and it
// never excuses a promotion, a slot gained, an eviction or a flush, before
// the restart or after it: an epoch goes on across a restart.

// serverEpoch is what a guard knows of one server that holds a node's keys.
type serverEpoch struct {
	addr, runID string
	replID      string // master_replid at the last probe
	evicted     int64  // evicted_keys at the last probe
	evicting    bool   // it could evict at the last probe (maxmemory and a policy other than noeviction)
	persistent  bool   // it was persistent at the last probe (probeResult.persistent)
	marker      string // the data-kept marker's value after the last probe; "" if unknown
	// markerErr is why the last probe could not read the marker, nil if
	// it read it. Such a probe cannot see a flush: a full server (OOM) is
	// often freed by a FLUSHALL whose memory an asynchronous flush gives
	// back only later, so the probe just after it is refused too; a
	// server loading, refusing writes (MISCONF, READONLY), or a marker
	// command lost to a timeout, hides a flush the same way. The server
	// votes again once a probe reads the marker.
	markerErr error
	slots     []SlotRange // a Cluster master's slots (served or importing), a ClusterClient's or one given as a node; nil for a server not in cluster mode
	migrating []SlotRange // a Cluster master's slots being migrated away (MIGRATING) at the last probe
	// since is the start of the current epoch: the server may have lost
	// keys granted before it. Zero if it lost none since the client met
	// it, as far as the guard can tell.
	since time.Time
	// why names the event, for the sit-out reason.
	why string
}

// serverMarks are what one probe read of one server for nextEpoch.
type serverMarks struct {
	addr, runID, replID string
	uptime              time.Duration
	persistent          bool
	notPersistent       string // why not, for the reason of a start without persistence
	promoted            bool   // second_repl_offset set: a replica turned master since it started
	// failover: the node may fail over (Sentinel's, or servers with
	// replicas now or before). A promotion before the server's last start
	// no longer shows in INFO (second_repl_offset is -1 again), so
	// persistence does not excuse its start.
	failover bool
	evicted  int64
	evicting bool // maxmemory set and a policy other than noeviction
	// markerWas is the marker's value the probe found ("" if none), and
	// markerIs the value it left; both "" if it could not be read.
	markerWas, markerIs string
	markerErr           error // why the marker could not be read; nil if it was
	claims              []SlotRange
	migrating           []SlotRange // the slots it serves but is migrating away
	sent, recv          time.Time
}

// nextEpoch is the guard's one rule: the epoch of the server a probe read
// as m, given what the guard knew of the server at the same address (old,
// nil if none), when the previous server there last answered (lastAnswer),
// and whether the client knew the node before (nodeKnown: a server met at
// the client's first contact has no history to compare with).
func nextEpoch(old *serverEpoch, m serverMarks, lastAnswer time.Time, nodeKnown bool) serverEpoch {
	e := serverEpoch{addr: m.addr, runID: m.runID, replID: m.replID, evicted: m.evicted, evicting: m.evicting, persistent: m.persistent, marker: m.markerIs, markerErr: m.markerErr, slots: m.claims, migrating: m.migrating}
	if m.markerIs == "" && old != nil {
		// A probe that could not read the marker (markerErr) learnt
		// nothing of it: keep the value seen before, so that the next
		// probe that reads it still compares.
		e.marker = old.marker
	}
	// lost records an event that may have lost keys: the epoch starts at
	// the latest one.
	lost := func(at time.Time, why string) {
		if e.since.IsZero() || at.After(e.since) {
			e.since, e.why = at, why
		}
	}
	same := old != nil && old.runID == m.runID
	if old != nil {
		// A restart gives back nothing the server lost before it: an
		// epoch begun before it goes on (a flush, a promotion, a slot
		// gained, then a persistent restart that reloads that state).
		e.since, e.why = old.since, old.why
	}
	if !same {
		what := "started"
		if old != nil || nodeKnown {
			what = "restarted"
		}
		switch start := dateStart(m, lastAnswer, old != nil); {
		case !m.persistent:
			why := m.notPersistent
			if why == "" {
				why = "it keeps its keys only with appendonly yes and appendfsync always"
			}
			lost(start, what+" without persistence ("+why+")")
		case old != nil && !old.persistent:
			// Persistent now, but not at the last probe: an AOF turned off
			// (or fsynced less often) with CONFIG SET is back on after a
			// restart that reads the config file, and what it loaded lacks
			// the writes it did not log (or fsync) meanwhile.
			lost(start, what+" persistent, but was not at the last probe (appendonly or appendfsync changed at run time, or an AOF rewrite ran, which may be the first of an AOF turned on at run time: the AOF it loaded may lack the writes since)")
		case m.evicting || old != nil && old.evicting:
			// INFO's counters restart at 0: evictions before the start
			// (since the last probe, or before we met it) are not
			// counted, only known to be older than the start. A server
			// that could evict at the last probe may have evicted since,
			// even if it cannot now: a maxmemory or policy set with
			// CONFIG SET is undone by a restart that reads the file.
			lost(start, what+" and may evict keys (evicted_keys restarts at 0, so evictions before the start are not counted)")
		case m.failover && !m.promoted:
			// Persistence kept the server's own writes, but it may have
			// been a replica promoted without a lock's key before this
			// start: after a start INFO no longer shows a promotion. (A
			// promotion it shows is dated below, with its own reason.)
			lost(start, what+" on a node that fails over (it may have been promoted from replica before that start, which INFO no longer shows; persistence keeps only its own writes)")
		}
	}
	switch {
	case !same && m.promoted:
		lost(m.recv, "was promoted from replica since it started (a promotion is not dated: counted from this probe)")
	case same && m.replID != old.replID:
		lost(m.recv, "changed its replication id since the last probe (a failover or fail-back, a resync from another master): counted from this probe")
	}
	if old == nil && nodeKnown && m.claims != nil {
		lost(m.recv, "is new to the node (a failover, a new master, or one met after the others): counted from this probe")
	}
	if old != nil && slotsGained(old.slots, m.claims) {
		// Nothing on the server dates the move.
		lost(m.recv, "serves slots it did not serve at the last probe (a reshard may move a slot without its keys): counted from this probe")
	}
	if old != nil && migrationAbandoned(old.migrating, m.migrating, m.claims) {
		// The keys MIGRATEd out while the slot was open stay on the
		// importing master, which no command of the slot reaches once
		// the migration is closed: lost to this master as to a flush,
		// though it served the slot throughout (no slot gained). Nothing
		// dates the close either.
		lost(m.recv, "stopped migrating a slot it still serves (a migration closed by hand, SETSLOT STABLE or NODE back to it: keys moved out meanwhile stay on the importing master): counted from this probe")
	}
	switch {
	case same && m.evicted != old.evicted:
		lost(m.recv, fmt.Sprintf("evicted keys since the last probe (evicted_keys %d, was %d): counted from this probe", m.evicted, old.evicted))
	case !same && m.evicted > 0:
		lost(m.recv, fmt.Sprintf("has evicted %d keys since it started (evictions are not dated: counted from this probe)", m.evicted))
	}
	if old != nil && old.marker != "" && m.markerIs != "" && m.markerWas != old.marker {
		// Another client may have written a marker again since: a value
		// other than the one we saw shows the loss as well as none.
		lost(m.recv, "lost its data since the last probe (its data-kept marker key is gone: a flush, or a reload without persistence): counted from this probe")
	}
	if old != nil && old.marker == "" && old.markerErr != nil && m.markerIs != "" {
		// Met only while the marker could not be read: the server may
		// have held data then (a full one did), and lost it since. The
		// first read tells nothing of that, whatever it finds: no marker,
		// or one that another client wrote again after the loss. Counted
		// as a loss, at the cost of a grace.
		lost(m.recv, "its data-kept marker was first read at this probe, and every probe before could not read it (a flush may have come between): counted from this probe")
	}
	return e
}

// dateStart dates a server's start from a probe, never earlier than the
// server truly started: a start dated too early would end the restart
// grace too soon.
//
// INFO's uptime_in_seconds is the difference of two wall-clock readings
// truncated to whole seconds, so it reads 1 a few milliseconds after the
// start: the true uptime is only known to exceed the reported one minus a
// second, counted in the node's seconds, which may run up to driftRate fast.
// The node read it no later than we received the reply.
//
// A server with a run_id we had not met at that address started after the
// previous server there last answered us (lastAnswer, the send of that
// call), which bounds the start when the uptime is misleading (a node whose
// wall clock jumped reports a jumped uptime).
func dateStart(m serverMarks, lastAnswer time.Time, newServer bool) time.Time {
	up := max(m.uptime-time.Second, 0)
	up -= time.Duration(float64(up) * driftRate)
	start := m.recv.Add(-up)
	if newServer && lastAnswer.After(start) {
		start = lastAnswer
	}
	return start
}

// voteErr tells why a vote of the server does not count at now, with the
// restart grace grace; nil if it counts. who names the server in the
// reason ("" for a node that is one server).
func (e *serverEpoch) voteErr(now time.Time, grace time.Duration, who string) error {
	if e.markerErr != nil {
		whose := "its"
		if who != "" {
			whose = strings.TrimSpace(who) + "'s" // "its master ADDR's"
		}
		why := e.markerErr.Error()
		if redis.HasErrorPrefix(e.markerErr, "OOM") {
			why = "the server refused the write for want of memory: " + why
		}
		return fmt.Errorf("%w: %s data-kept marker could not be read at the last probe (%s), so a flush would go unseen; it votes again once a probe reads the marker", ErrNodeSittingOut, whose, why)
	}
	if e.since.IsZero() || !now.Before(e.since.Add(grace)) {
		return nil
	}
	// The epoch starts as late as the event may have been, so the time
	// left is an upper bound; the grace may come from another client's
	// longer TTL, through the nodes' register.
	return &graceError{What: who + e.why, Grace: grace, Left: e.since.Add(grace).Sub(now).Round(time.Millisecond)}
}

// The data-kept marker: a key without a TTL, under the key prefix, that
// every probe sets if it is missing (SET NX GET, one command) and reads.
// A server that lost it lost its data since: a FLUSHALL or FLUSHDB, a
// reload or restart that kept nothing. Each write of it is a new random
// value, so a client that finds another value than the one it saw knows
// that the marker was lost and written again (by another client's probe)
// meanwhile. It is a few dozen bytes per server, and a client that meets a
// server for the first time learns nothing from it (a missing marker may
// be a new server); docs/PROTOCOL.md §11 states the limits.

// markerKey is the marker's key for a node that is one server: in the hash
// slot of the register of the largest TTL in use (its key is the marker's
// hash tag), which a server in cluster mode must serve anyway.
func (c *Client) markerKey() string {
	return c.opts.KeyPrefix + "data-kept{" + c.registerKey() + "}"
}

// markerKeyIn is a marker key in the first hash slot of slots, for one
// master of a Cluster node; "" if slots is empty.
func (c *Client) markerKeyIn(slots []SlotRange) string {
	if len(slots) == 0 {
		return ""
	}
	return c.opts.KeyPrefix + "data-kept{" + slotTags()[slots[0].First] + "}"
}

// slotTags maps every hash slot to a short hash tag in it, found once.
var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, slotCount)
	for i, left := 0, slotCount; left > 0; i++ {
		tag := strconv.Itoa(i)
		if s := keySlot(tag); tags[s] == "" {
			tags[s] = tag
			left--
		}
	}
	return tags
})

// markerValue is a new value of the marker.
func markerValue() string {
	return "redlock data-kept marker, do not delete: " + rand.Text()
}

// markerCmd queues the marker's SET NX GET in a probe's pipeline.
func markerCmd(ctx context.Context, pipe redis.Pipeliner, key, value string) *redis.StatusCmd {
	return pipe.SetArgs(ctx, key, value, redis.SetArgs{Mode: "NX", Get: true})
}

// markerReply reads the marker's reply into was and is; both "" when the
// marker could not be read or set, and err then says why.
func markerReply(cmd *redis.StatusCmd, value string) (was, is string, err error) {
	switch v, err := cmd.Result(); {
	case err == redis.Nil:
		return "", value, nil
	case err != nil:
		return "", "", err
	default:
		return v, v, nil
	}
}

// markerRefusedWrites tells whether the marker could not be read because
// the server refused every write then: for want of memory (OOM), a
// replica quorum (NOREPLICAS), a failed save (MISCONF), as a replica
// (READONLY), or loading its data (LOADING). No acquire could have taken
// a key there meanwhile, so an extension still counts there
// (guardsPassAged); a refusal of another kind (a timeout, an ACL that
// leaves the marker out) does not say so.
func (e *serverEpoch) markerRefusedWrites() bool {
	if e.markerErr == nil {
		return false
	}
	return slices.ContainsFunc([]string{"OOM", "NOREPLICAS", "MISCONF", "READONLY", "LOADING"}, func(p string) bool {
		return redis.HasErrorPrefix(e.markerErr, p)
	})
}
