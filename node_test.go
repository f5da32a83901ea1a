package redlock

import (
	"errors"
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
	res := probeResult{uptime: time.Second, sent: recv.Add(-time.Millisecond), recv: recv}
	start := dateStart(res, time.Time{}, false)
	if start.Before(trueStart) {
		t.Fatalf("start dated %v before the server started", trueStart.Sub(start))
	}
	const grace = time.Second
	g := &nodeGuard{upSince: start}
	for at := trueStart; at.Before(trueStart.Add(grace)); at = at.Add(10 * time.Millisecond) {
		if err := g.voteErr(at, grace); !errors.Is(err, ErrNodeSittingOut) {
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
	young := now.Add(-100 * time.Millisecond)
	cases := []struct {
		guard nodeGuard
		want  string // "" if the node votes
	}{
		{nodeGuard{upSince: young}, "started without persistence (it keeps its keys only with appendonly yes and appendfsync always)"},
		{nodeGuard{upSince: young}, "sits out the 1s restart grace and votes in at most 900ms"},
		{nodeGuard{upSince: young, known: true}, "restarted without persistence"},
		{nodeGuard{upSince: young, persistent: true}, ""},
		{nodeGuard{upSince: young, grace: 10 * time.Second}, "the 10s restart grace and votes in at most 9.9s"}, // a grace learned at the probe outlasts a shorter one now
		{nodeGuard{upSince: now.Add(-2 * time.Second)}, ""},
	}
	for _, tc := range cases {
		err := tc.guard.voteErr(now, time.Second)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want a vote", tc.guard, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want %q", tc.guard, err, tc.want)
		}
	}
	if err := (&nodeGuard{upSince: young}).voteErr(now, NoRestartGrace); err != nil {
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
