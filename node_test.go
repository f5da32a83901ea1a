package redlock

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// INFO's uptime_in_seconds reads 1 a few milliseconds after a start that
// fell just before a wall-clock second turned. Dated as "now minus the
// uptime", such a server would vote about a second early.
func TestStartIsDatedNoEarlierThanTheServerStarted(t *testing.T) {
	recv := time.Unix(1000, 0)
	trueStart := recv.Add(-10 * time.Millisecond)
	res := serverMarks{uptime: time.Second, sent: recv.Add(-time.Millisecond), recv: recv}
	start := dateStart(res, time.Time{}, false)
	if start.Before(trueStart) {
		t.Fatalf("start dated %v before the server started", trueStart.Sub(start))
	}
	const grace = time.Second
	g := &nodeGuard{server: serverEpoch{since: start, why: "started"}}
	for at := trueStart; at.Before(trueStart.Add(grace)); at = at.Add(10 * time.Millisecond) {
		if err := g.voteErr(at, grace, ""); !errors.Is(err, ErrNodeSittingOut) {
			t.Fatalf("%v after the start, within the %v grace: vote error %v, want sitting out", at.Sub(trueStart), grace, err)
		}
	}

	// A new server whose clock jumped reports a long uptime; it cannot
	// have started before the previous server there last answered us.
	res.uptime = 100 * time.Second
	lastAnswer := recv.Add(-50 * time.Millisecond)
	if start := dateStart(res, lastAnswer, true); start.Before(lastAnswer) {
		t.Fatalf("a new server dated %v before the old one last answered", lastAnswer.Sub(start))
	}
	// A server met for the first time has no such bound.
	if start := dateStart(res, lastAnswer, false); !start.Before(lastAnswer) {
		t.Fatalf("a server met for the first time dated by another's answer: %v", start)
	}
}

func TestRestartGraceWording(t *testing.T) {
	now := time.Unix(1000, 0)
	young := serverMarks{runID: "a", uptime: 1100 * time.Millisecond, recv: now} // dated 100ms ago
	persistent := young
	persistent.persistent = true
	old := young
	old.uptime = time.Hour
	guard := func(prev *serverEpoch, m serverMarks, known bool, grace time.Duration) nodeGuard {
		return nodeGuard{server: nextEpoch(prev, m, time.Time{}, known), grace: grace}
	}
	cases := []struct {
		guard nodeGuard
		want  string // "" if the node votes
	}{
		{guard(nil, young, false, 0), "started without persistence (it keeps its keys only with appendonly yes and appendfsync always)"},
		{guard(nil, young, false, 0), "sits out the 1s restart grace and votes in at most 900ms"},
		{guard(&serverEpoch{runID: "b"}, young, true, 0), "restarted without persistence"},
		{guard(nil, persistent, false, 0), ""},
		{guard(nil, young, false, 10*time.Second), "the 10s restart grace and votes in at most 9.9s"}, // a grace learned at the probe outlasts a shorter one now
		{guard(nil, old, false, 0), ""},
	}
	for _, tc := range cases {
		err := tc.guard.voteErr(now, time.Second, "")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want a vote", tc.guard, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want %q", tc.guard, err, tc.want)
		}
	}
	g := guard(nil, young, false, 0)
	if err := g.voteErr(now, NoRestartGrace, ""); err != nil {
		t.Errorf("guard off: %v", err)
	}
}

func TestClockPeersFindTheNodeThatDisagrees(t *testing.T) {
	now := time.Unix(1000, 0)
	around := func(off time.Duration) clockSample {
		return clockSample{at: now, lo: off - 50*time.Microsecond, hi: off + 50*time.Microsecond}
	}
	samples := []clockSample{around(20 * time.Second), around(0), around(time.Millisecond), around(-time.Millisecond), around(0)}
	have := []bool{true, true, true, true, true}
	const threshold = 12 * time.Millisecond
	if agree, known := clockPeers(samples, have, 0, now, threshold); agree != 1 || known != 5 {
		t.Fatalf("jumped node: %d of %d agree, want 1 of 5", agree, known)
	}
	for i := 1; i < 5; i++ {
		if agree, _ := clockPeers(samples, have, i, now, threshold); agree != 4 {
			t.Fatalf("node %d: %d agree, want 4", i, agree)
		}
	}
	if skew, ok := clockSkew(samples, have, 0); !ok || skew < 19*time.Second {
		t.Fatalf("skew of the jumped node %v, want about 20s", skew)
	}
	// Nodes without a sample are not counted; a node without one is unknown.
	have = []bool{true, true, false, false, false}
	if agree, known := clockPeers(samples, have, 1, now, threshold); agree != 1 || known != 2 {
		t.Fatalf("with two samples: %d of %d agree, want 1 of 2", agree, known)
	}
	if _, known := clockPeers(samples, have, 2, now, threshold); known != 0 {
		t.Fatalf("a node without a sample: %d known, want 0", known)
	}
	// An old sample gets the drift two clocks may have accumulated since.
	samples[1].at = now.Add(-time.Hour)
	samples[0] = around(threshold + time.Second)
	if agree, _ := clockPeers(samples, have, 0, now, threshold); agree != 2 {
		t.Fatalf("a 1s gap after an hour at 500ppm: %d agree, want 2", agree)
	}
}

// A Cluster node's restart grace follows the master of the lock's slot:
// a young master keeps the node from voting for its slots only.
func TestClusterGuardFollowsTheSlotsMaster(t *testing.T) {
	now := time.Now()
	g := &nodeGuard{shards: []shardGuard{
		{serverEpoch: serverEpoch{addr: "a:1", since: now.Add(-time.Hour), why: "started", slots: []SlotRange{{0, 8191}}}},
		{serverEpoch: serverEpoch{addr: "b:2", since: now.Add(-time.Second), why: "is new", slots: []SlotRange{{8192, 16382}}}},
	}}
	keyIn := func(first, last int) string {
		for i := 0; ; i++ {
			k := "redlock:{" + strconv.Itoa(i) + "}"
			if s := keySlot(k); first <= s && s <= last {
				return k
			}
		}
	}
	if err := g.voteErr(now, time.Minute, keyIn(0, 8191)); err != nil {
		t.Errorf("a lock on the old master: %v, want a vote", err)
	}
	if err := g.voteErr(now, time.Minute, keyIn(8192, 16382)); !errors.Is(err, ErrNodeSittingOut) || !strings.Contains(err.Error(), "master b:2 is new") {
		t.Errorf("a lock on the new master: %v, want it sitting out, naming b:2", err)
	}
	if err := g.voteErr(now, time.Minute, ""); !errors.Is(err, ErrNodeSittingOut) {
		t.Errorf("keys unknown: %v, want sitting out while any master does", err)
	}
	if err := g.voteErr(now, time.Minute, keyIn(16383, 16383)); err != errSlotUnclaimed {
		t.Errorf("a slot no master served: %v, want errSlotUnclaimed", err)
	}
	if err := g.voteErr(now, time.Millisecond, keyIn(8192, 16382)); err != nil {
		t.Errorf("past the grace: %v, want a vote", err)
	}
}

// A slot being imported counts as served by the importing master: after
// ASKING it takes the slot's keys. A slot being migrated away is served
// and read apart too (migratingSlots).
func TestOwnSlotsWithImports(t *testing.T) {
	const nodes = "abc 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-100 [101-<-def] [102->-def]\n"
	got, err := ownSlots(nodes, true)
	if err != nil || len(got) != 2 || got[1] != (SlotRange{101, 101}) {
		t.Fatalf("ownSlots with imports = %v, %v; want 0-100 and 101", got, err)
	}
	if got, _ := ownSlots(nodes, false); len(got) != 1 {
		t.Fatalf("ownSlots without imports = %v, want 0-100 alone", got)
	}
	if got := migratingSlots(nodes); len(got) != 1 || got[0] != (SlotRange{102, 102}) {
		t.Fatalf("migratingSlots = %v, want 102 alone", got)
	}
}

// A Cluster master's replicas are counted from CLUSTER NODES, also one
// whose link is down: it may still be promoted.
func TestReplicasInView(t *testing.T) {
	const nodes = "m1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-8191\n" +
		"r1 127.0.0.1:7001@17001 slave m1 0 0 1 connected\n" +
		"r2 127.0.0.1:7002@17002 slave,fail m1 0 0 1 disconnected\n" +
		"m2 127.0.0.1:7003@17003 master - 0 0 2 connected 8192-16383\n" +
		"r3 127.0.0.1:7004@17004 slave m2 0 0 2 connected\n"
	if got := replicasInView(nodes); got != 2 {
		t.Fatalf("replicasInView = %d, want 2 (the connected and the failed replica of m1)", got)
	}
}

// A master gains slots when it serves (or imports) one it did not at the
// previous probe, however the ranges are cut; losing slots is no gain.
func TestSlotsGained(t *testing.T) {
	r := func(first, last int) SlotRange { return SlotRange{first, last} }
	for _, tc := range []struct {
		before, now []SlotRange
		want        bool
	}{
		{[]SlotRange{r(0, 8191)}, []SlotRange{r(0, 8191)}, false},
		{[]SlotRange{r(0, 8191)}, []SlotRange{r(0, 4095), r(4096, 8191)}, false},
		{[]SlotRange{r(0, 4095), r(4096, 8191)}, []SlotRange{r(0, 8191)}, false},
		{[]SlotRange{r(0, 8191)}, []SlotRange{r(0, 100)}, false},
		{[]SlotRange{r(0, 8191)}, nil, false},
		{[]SlotRange{r(8192, 16383)}, []SlotRange{r(4772, 4772), r(8192, 16383)}, true},
		{[]SlotRange{r(0, 100), r(102, 200)}, []SlotRange{r(0, 200)}, true},
		{nil, []SlotRange{r(5, 5)}, true},
	} {
		if got := slotsGained(tc.before, tc.now); got != tc.want {
			t.Errorf("slotsGained(%v, %v) = %v, want %v", tc.before, tc.now, got, tc.want)
		}
	}
}
