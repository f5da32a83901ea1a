package redlock

import (
	"testing"
	"time"
)

// A vote counted without a confirmed fsync (sent before the client knew the
// node persistent, or on a master that stopped confirming) undoes the
// persistence of the guard it was counted under: a restart seen next is one
// without persistence and starts an epoch, which the grace then covers. With
// no such vote the restart of a server persistent through WAITAOF is
// excused. The race this closes (a write that read the node as not yet
// persistent, answered after the probe that made it so) cannot be timed on
// a real server; the rule that closes it is checked here.
func TestAVoteCountedUnconfirmedUndoesFsyncedPersistence(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	probe := serverMarks{addr: "a", runID: "r1", replID: "x", uptime: time.Hour, persistent: true, markerWas: "m", markerIs: "m", sent: base, recv: base}
	first := nextEpoch(nil, probe, base, false)
	g := &nodeGuard{server: first, fsynced: true, unconfirmedAt: 7}
	restart := serverMarks{addr: "a", runID: "r2", replID: "y", uptime: 0, persistent: true, markerWas: "m", markerIs: "m",
		sent: base.Add(time.Second), recv: base.Add(time.Second)}
	for _, tc := range []struct {
		unconfirmed int64
		lost        bool
	}{
		{7, false}, // every vote since the probe confirmed: the restart is excused
		{8, true},  // one counted unconfirmed: the restart is a loss
	} {
		old := unconfirmedSince(g, tc.unconfirmed)
		e := nextEpoch(&old.server, restart, base, true)
		if lost := !e.since.IsZero(); lost != tc.lost {
			t.Errorf("%d votes unconfirmed (guard read 7): restart lost=%v, want %v (%s)", tc.unconfirmed, lost, tc.lost, e.why)
		}
	}
	// The rule is about WAITAOF persistence only: a guard that counted the
	// node persistent by appendfsync always (no WAITAOF: Redis 7.0, where
	// every vote is counted "unconfirmed") keeps it.
	always := &nodeGuard{server: first, unconfirmedAt: 7}
	if old := unconfirmedSince(always, 100); !old.server.persistent {
		t.Error("a guard persistent by appendfsync always lost its persistence to unconfirmed votes")
	}
	// And the next probe of an undone guard asks for a barrier again.
	if unconfirmedSince(g, 8).fsyncedAll() {
		t.Error("an undone guard still counts as fsynced: the next probe would ask no barrier")
	}
	if !unconfirmedSince(g, 7).fsyncedAll() {
		t.Error("an intact fsynced guard asks for a barrier at every probe")
	}
}
