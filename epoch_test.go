package redlock

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Every event that may lose a granted key starts a new epoch, dated no
// earlier than it can have been, and persistence excuses none of them but
// the server's own restart (DESIGN §7).
func TestEveryEventThatMayLoseKeysStartsAnEpoch(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	later := t0.Add(time.Minute)
	base := serverMarks{addr: "m:1", runID: "r1", replID: "id1", uptime: time.Hour, persistent: true,
		markerWas: "v1", markerIs: "v1", claims: []SlotRange{{0, 100}}, sent: t0, recv: t0}
	first := nextEpoch(nil, base, time.Time{}, false)
	if !first.since.IsZero() {
		t.Fatalf("a persistent server met at first contact, long up, nothing else: epoch from %v (%s), want none", first.since, first.why)
	}
	again := base
	again.sent, again.recv = later, later
	for _, tc := range []struct {
		name   string
		change func(m *serverMarks)
		want   string // in the reason; "" for no new epoch
	}{
		{"nothing changed", func(*serverMarks) {}, ""},
		{"a fail-back under the same run_id", func(m *serverMarks) { m.replID, m.promoted = "id2", true }, "replication id"},
		{"a resync from another master, not promoted", func(m *serverMarks) { m.replID = "id2" }, "replication id"},
		{"a slot gained", func(m *serverMarks) { m.claims = []SlotRange{{0, 101}} }, "serves slots"},
		{"an eviction", func(m *serverMarks) { m.evicted = 1 }, "evicted keys since the last probe (evicted_keys 1, was 0)"},
		{"a flush, the marker written again by another client", func(m *serverMarks) { m.markerWas, m.markerIs = "v2", "v2" }, "data-kept marker"},
		{"a flush, the marker written again by this probe", func(m *serverMarks) { m.markerWas, m.markerIs = "", "v3" }, "data-kept marker"},
		{"the marker unreadable: no signal", func(m *serverMarks) { m.markerWas, m.markerIs = "", "" }, ""},
		{"a persistent restart", func(m *serverMarks) { m.runID, m.uptime = "r2", time.Second }, ""},
		{"a restart without persistence", func(m *serverMarks) { m.runID, m.uptime, m.persistent = "r2", time.Second, false }, "restarted without persistence"},
		{"a persistent restart of a server that evicts", func(m *serverMarks) { m.runID, m.uptime, m.evicting = "r2", time.Second, true }, "restarted and may evict keys"},
		{"a persistent promoted replica in its place", func(m *serverMarks) { m.runID, m.promoted = "r3", true }, "promoted"},
		{"a persistent server whose evictions predate the restart", func(m *serverMarks) { m.runID, m.evicted = "r2", 5 }, "has evicted 5 keys"},
	} {
		m := again
		tc.change(&m)
		e := nextEpoch(&first, m, t0, true)
		switch {
		case tc.want == "" && !e.since.IsZero():
			t.Errorf("%s: a new epoch from %v (%s), want none", tc.name, e.since, e.why)
		case tc.want != "" && (e.since.IsZero() || !strings.Contains(e.why, tc.want)):
			t.Errorf("%s: epoch from %v (%s), want one whose reason says %q", tc.name, e.since, e.why, tc.want)
		case tc.want != "" && !strings.Contains(tc.name, "restart") && !e.since.Equal(later):
			t.Errorf("%s: epoch from %v, want from the probe that saw it (%v): the event is not dated", tc.name, e.since, later)
		}
		// And the vote waits the grace from it, persistence or not.
		g := nodeGuard{server: e}
		err := g.voteErr(later.Add(time.Second), 10*time.Second, "")
		if (tc.want != "") != errors.Is(err, ErrNodeSittingOut) {
			t.Errorf("%s: vote error %v", tc.name, err)
		}
	}

	// At first contact: a promotion or evictions since the start are not
	// dated, a missing marker may be a new server.
	for _, tc := range []struct {
		name   string
		change func(m *serverMarks)
		want   string
	}{
		{"promoted", func(m *serverMarks) { m.promoted = true }, "promoted"},
		{"evicted before", func(m *serverMarks) { m.evicted = 3 }, "has evicted 3 keys"},
		{"no marker", func(m *serverMarks) { m.markerWas = "" }, ""},
	} {
		m := base
		tc.change(&m)
		e := nextEpoch(nil, m, time.Time{}, false)
		if got := !e.since.IsZero() && strings.Contains(e.why, tc.want); got != (tc.want != "") {
			t.Errorf("first contact, %s: epoch from %v (%s), want a new one: %v", tc.name, e.since, e.why, tc.want != "")
		}
	}

	// A master new to a Cluster node the client knew is new from the probe
	// that meets it, however long it has been up and whatever it persists.
	if e := nextEpoch(nil, again, t0, true); !e.since.Equal(later) || !strings.Contains(e.why, "new to the node") {
		t.Errorf("a master new to a known Cluster node: epoch from %v (%s)", e.since, e.why)
	}
	// A slot being migrated away at the last probe: closed while the
	// master still serves it, the keys MIGRATEd out are lost to it; moved
	// away, or still open, nothing is.
	open := base
	open.migrating = []SlotRange{{50, 50}}
	opened := nextEpoch(&first, open, t0, true)
	for _, tc := range []struct {
		name   string
		change func(m *serverMarks)
		want   bool
	}{
		{"still migrating", func(m *serverMarks) { m.migrating = []SlotRange{{50, 50}} }, false},
		{"the migration closed, the slot still served", func(*serverMarks) {}, true},
		{"the slot moved away", func(m *serverMarks) { m.claims = []SlotRange{{0, 49}, {51, 100}} }, false},
	} {
		m := again
		tc.change(&m)
		e := nextEpoch(&opened, m, t0, true)
		if got := e.since.Equal(later) && strings.Contains(e.why, "stopped migrating"); got != tc.want || !tc.want && !e.since.IsZero() {
			t.Errorf("%s: epoch from %v (%s), want a new one: %v", tc.name, e.since, e.why, tc.want)
		}
	}
	// An epoch never moves back: a later probe with nothing new keeps it.
	m := again
	m.evicted = 1
	e := nextEpoch(&first, m, t0, true)
	m.sent, m.recv = later.Add(time.Minute), later.Add(time.Minute)
	if e2 := nextEpoch(&e, m, t0, true); !e2.since.Equal(e.since) {
		t.Errorf("nothing new: epoch moved from %v to %v", e.since, e2.since)
	}
}

// Every hash slot has a marker tag in it, and the marker of a Cluster
// master lands in the first slot it serves.
func TestMarkerTagsCoverEverySlot(t *testing.T) {
	tags := slotTags()
	for slot, tag := range tags {
		if tag == "" || keySlot(tag) != slot {
			t.Fatalf("slot %d: tag %q (slot %d)", slot, tag, keySlot(tag))
		}
	}
	c := &Client{opts: Options{KeyPrefix: "p:"}}
	if k := c.markerKeyIn([]SlotRange{{5000, 6000}}); keySlot(k) != 5000 || !strings.HasPrefix(k, "p:") {
		t.Fatalf("marker key %q in slot %d, want 5000 under the prefix", k, keySlot(k))
	}
	if k := c.markerKey(); keySlot(k) != keySlot(c.registerKey()) || !strings.HasPrefix(k, "p:") {
		t.Fatalf("marker key %q: slot %d, want the register's %d, under the prefix", k, keySlot(k), keySlot(c.registerKey()))
	}
}

// A probe that cannot read the data-kept marker (a full node refuses its
// SET with OOM) keeps the value seen before: a flush after it is still seen
// by the next probe that reads the marker.
func TestAnUnreadableMarkerIsNotForgotten(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	m := serverMarks{addr: "m:1", runID: "r1", replID: "id1", uptime: time.Hour, persistent: true,
		markerWas: "v1", markerIs: "v1", sent: t0, recv: t0}
	e := nextEpoch(nil, m, time.Time{}, false)
	m.markerWas, m.markerIs = "", "" // full: OOM
	m.sent, m.recv = t0.Add(time.Second), t0.Add(time.Second)
	if e = nextEpoch(&e, m, t0, true); !e.since.IsZero() || e.marker != "v1" {
		t.Fatalf("an unreadable marker: epoch from %v, marker %q; want no epoch and v1 kept", e.since, e.marker)
	}
	m.markerWas, m.markerIs = "", "v2" // flushed, written again by this probe
	m.sent, m.recv = t0.Add(2*time.Second), t0.Add(2*time.Second)
	if e = nextEpoch(&e, m, t0, true); !e.since.Equal(m.recv) || !strings.Contains(e.why, "data-kept marker") {
		t.Fatalf("a flush after an unreadable marker: epoch from %v (%s), want from the probe that saw it", e.since, e.why)
	}
}

// A server that could evict at the last probe and restarts (persistent,
// its maxmemory or policy set at run time and undone by the restart) may
// have evicted between that probe and its restart: the restart's counters
// hide it, so the start counts as a loss.
func TestARestartAfterEvictingIsALoss(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	m := serverMarks{addr: "m:1", runID: "r1", replID: "id1", uptime: time.Hour, persistent: true, evicting: true,
		markerWas: "v1", markerIs: "v1", sent: t0, recv: t0}
	e := nextEpoch(nil, m, time.Time{}, false)
	later := t0.Add(time.Minute)
	m.runID, m.replID, m.uptime, m.evicting, m.sent, m.recv = "r2", "id2", 2*time.Second, false, later, later
	e = nextEpoch(&e, m, t0, true)
	if e.since.IsZero() || !strings.Contains(e.why, "may evict keys") {
		t.Fatalf("a persistent restart of a server that could evict at the last probe: epoch from %v (%s), want one from the start", e.since, e.why)
	}
}

// A server that was not persistent at the last probe (its AOF turned off,
// or fsynced every second, with CONFIG SET) and restarts persistent (the
// config file's settings) may have loaded an AOF without the writes since:
// its start counts as a loss.
func TestARestartAfterPersistenceWasOffIsALoss(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	m := serverMarks{addr: "m:1", runID: "r1", replID: "id1", uptime: time.Hour, persistent: true,
		markerWas: "v1", markerIs: "v1", sent: t0, recv: t0}
	e := nextEpoch(nil, m, time.Time{}, false)
	m.persistent, m.sent, m.recv = false, t0.Add(time.Second), t0.Add(time.Second)
	if e = nextEpoch(&e, m, t0, true); !e.since.IsZero() {
		t.Fatalf("the AOF turned off, no restart: epoch from %v (%s), want none", e.since, e.why)
	}
	later := t0.Add(time.Minute)
	m.runID, m.replID, m.uptime, m.persistent, m.sent, m.recv = "r2", "id2", 2*time.Second, true, later, later
	if e = nextEpoch(&e, m, t0, true); e.since.IsZero() || !strings.Contains(e.why, "was not at the last probe") {
		t.Fatalf("a persistent restart of a server that was not persistent at the last probe: epoch from %v (%s), want one from the start", e.since, e.why)
	}
	// Persistent at the last probe again (the AOF turned back on rewrites
	// it from the dataset): a persistent restart then loses nothing.
	m.sent, m.recv = later.Add(time.Minute), later.Add(time.Minute)
	e = nextEpoch(&e, m, t0, true)
	since := e.since
	m.runID, m.uptime, m.sent, m.recv = "r3", 2*time.Second, later.Add(2*time.Minute), later.Add(2*time.Minute)
	if e = nextEpoch(&e, m, t0, true); !e.since.Equal(since) {
		t.Fatalf("a persistent restart of a server persistent at the last probe: epoch moved from %v to %v (%s)", since, e.since, e.why)
	}
}

// An epoch goes on across a restart that loses nothing: a persistent
// server that was flushed (or promoted, or given a slot) and then
// restarted reloads the state that lacks the keys.
func TestAnEpochGoesOnAcrossAPersistentRestart(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	m := serverMarks{addr: "m:1", runID: "r1", replID: "id1", uptime: time.Hour, persistent: true,
		markerWas: "v1", markerIs: "v1", sent: t0, recv: t0}
	e := nextEpoch(nil, m, time.Time{}, false)
	flushed := t0.Add(time.Second)
	m.markerWas, m.markerIs, m.sent, m.recv = "", "v2", flushed, flushed
	if e = nextEpoch(&e, m, t0, true); !e.since.Equal(flushed) {
		t.Fatalf("a flush: epoch from %v (%s), want from the probe that saw it", e.since, e.why)
	}
	later := flushed.Add(2 * time.Second)
	m.runID, m.replID, m.uptime, m.markerWas, m.markerIs, m.sent, m.recv = "r2", "id2", time.Second, "v2", "v2", later, later
	if e = nextEpoch(&e, m, flushed, true); !e.since.Equal(flushed) || !strings.Contains(e.why, "data-kept marker") {
		t.Fatalf("a persistent restart after a flush: epoch from %v (%s), want the flush's (%v) to go on", e.since, e.why, flushed)
	}
}
