package chaos

import (
	"strings"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// histBuilder writes hand-made histories: each hold is an acquisition
// followed by one fenced write, one register write and a release.
type histBuilder struct {
	h        History
	hold     int
	register int64
}

type holdSpec struct {
	client     int
	start      int // ms: acquire returned
	validUntil int // ms
	stop       int // ms: release invoked
	token      int64
	writeAt    int  // ms: fenced write invoked; 0 means start+1
	stale      bool // the fenced write is rejected
	lost       bool // the register write overwrites instead of incrementing
}

func (b *histBuilder) add(s holdSpec) {
	b.hold++
	id := b.hold
	ev := func(at int, k EventKind) Event {
		return Event{At: ms(at), Kind: k, Client: s.client, Hold: id}
	}
	b.h = append(b.h, ev(s.start-3, AcquireInvoke))
	ok := ev(s.start, AcquireOK)
	ok.Token, ok.Deadline = s.token, ms(s.validUntil)
	b.h = append(b.h, ok)
	w := s.writeAt
	if w == 0 {
		w = s.start + 1
	}
	inv := ev(w, FencedWriteInvoke)
	inv.Token = s.token
	res := ev(w+1, FencedWriteOK)
	if s.stale {
		res.Kind = FencedWriteStale
	}
	res.Token = s.token
	b.h = append(b.h, inv, res, ev(w+2, RegisterInvoke))
	reg := ev(w+3, RegisterOK)
	if !s.lost {
		b.register++
	}
	reg.Value = b.register
	b.h = append(b.h, reg, ev(s.stop, ReleaseInvoke), ev(s.stop+1, ReleaseOK))
}

func (b *histBuilder) fault(name string, apply, heal int) {
	b.h = append(b.h,
		Event{At: ms(apply), Kind: FaultApply, Client: NoClient, Fault: name},
		Event{At: ms(heal), Kind: FaultHeal, Client: NoClient, Fault: name})
}

// finish appends the final register read and a clean key scan of two
// nodes after the last event.
func (b *histBuilder) finish(at int) History {
	b.h = append(b.h,
		Event{At: ms(at), Kind: RegisterFinal, Client: NoClient, Value: b.register},
		Event{At: ms(at + 1), Kind: KeyScan, Client: NoClient, Node: "n0"},
		Event{At: ms(at + 1), Kind: KeyScan, Client: NoClient, Node: "n1"})
	return b.h
}

func safeHistory() History {
	var b histBuilder
	b.add(holdSpec{client: 0, start: 10, validUntil: 1000, stop: 20, token: 100})
	b.add(holdSpec{client: 1, start: 25, validUntil: 1010, stop: 40, token: 101})
	b.fault("partition(n1)", 50, 300)
	b.add(holdSpec{client: 0, start: 60, validUntil: 1050, stop: 70, token: 150})
	b.add(holdSpec{client: 1, start: 350, validUntil: 1350, stop: 360, token: 160})
	return b.finish(400)
}

func TestCheckerPassesSafeHistory(t *testing.T) {
	r := CheckHistory(safeHistory(), CheckOptions{RecoveryBound: ms(100)})
	if r.Total() != 0 {
		t.Fatalf("safe history judged unsafe: %v", r.Violations)
	}
	if r.Acquisitions != 4 || r.Attempts != 4 || r.FencedAccepted != 4 || r.RegisterWrites != 4 {
		t.Errorf("counts: %+v", r)
	}
	if r.LostUpdates != 0 {
		t.Errorf("lost updates = %d, want 0", r.LostUpdates)
	}
	if !r.RecoveryMeasured || r.Recovery != ms(50) {
		t.Errorf("recovery = %v (measured %v), want 50ms", r.Recovery, r.RecoveryMeasured)
	}
	if r.AcquireP50 != ms(3) {
		t.Errorf("acquire p50 = %v, want 3ms", r.AcquireP50)
	}
}

// Each case is the safe history's shape with one kind of violation put in;
// the checker must name exactly that check.
func TestCheckerCatchesEachViolation(t *testing.T) {
	cases := []struct {
		name  string
		build func() History
		want  Check
		count int
	}{
		{"overlapping validity windows", func() History {
			var b histBuilder
			b.add(holdSpec{client: 0, start: 10, validUntil: 500, stop: 200, token: 1})
			b.add(holdSpec{client: 1, start: 100, validUntil: 600, stop: 150, token: 2})
			return b.finish(700)
		}, CheckMutualExclusion, 1},
		{"stalled holder writes after its validity while another holds", func() History {
			var b histBuilder
			// Client 0's validity ends at 100; client 1 acquires at 150;
			// client 0 wakes at 160 and writes: it acted as holder too.
			b.add(holdSpec{client: 0, start: 10, validUntil: 100, stop: 170, token: 1, writeAt: 160, stale: true})
			b.add(holdSpec{client: 1, start: 150, validUntil: 600, stop: 200, token: 2})
			return b.finish(700)
		}, CheckMutualExclusion, 1},
		{"token not increasing", func() History {
			var b histBuilder
			b.add(holdSpec{client: 0, start: 10, validUntil: 500, stop: 20, token: 7})
			b.add(holdSpec{client: 1, start: 30, validUntil: 500, stop: 40, token: 7, stale: false})
			b.add(holdSpec{client: 0, start: 50, validUntil: 500, stop: 60, token: 8})
			return b.finish(700)
		}, CheckTokenOrder, 1},
		{"fenced resource accepts a lower token later", func() History {
			var b histBuilder
			b.add(holdSpec{client: 0, start: 10, validUntil: 500, stop: 20, token: 9})
			b.add(holdSpec{client: 1, start: 30, validUntil: 500, stop: 40, token: 10})
			// The resource "accepts" token 9 after it accepted 10: a
			// broken fence. Put a late write with token 9 by hand.
			b.h = append(b.h,
				Event{At: ms(45), Kind: FencedWriteInvoke, Client: 0, Hold: 1, Token: 9},
				Event{At: ms(46), Kind: FencedWriteOK, Client: 0, Hold: 1, Token: 9})
			return b.finish(700)
		}, CheckFenceOrder, 1},
		{"lock key left on a node", func() History {
			h := safeHistory()
			return append(h, Event{At: ms(402), Kind: KeyScan, Client: NoClient, Node: "n2", Detail: "owner=abc pttl=-1"})
		}, CheckLeftoverKey, 1},
		{"node could not be scanned", func() History {
			h := safeHistory()
			return append(h, Event{At: ms(402), Kind: KeyScan, Client: NoClient, Node: "n2", Err: "connection refused"})
		}, CheckLeftoverKey, 1},
		{"no acquisition after the heal", func() History {
			var b histBuilder
			b.add(holdSpec{client: 0, start: 10, validUntil: 500, stop: 20, token: 1})
			b.fault("partition(majority)", 30, 100)
			return b.finish(700)
		}, CheckLiveness, 1},
		{"recovery slower than the bound", func() History {
			var b histBuilder
			b.add(holdSpec{client: 0, start: 10, validUntil: 500, stop: 20, token: 1})
			b.fault("partition(majority)", 30, 100)
			b.add(holdSpec{client: 1, start: 400, validUntil: 900, stop: 410, token: 2})
			return b.finish(700)
		}, CheckLiveness, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckHistory(tc.build(), CheckOptions{RecoveryBound: ms(200)})
			if r.Counts[tc.want] != tc.count || r.Total() != tc.count {
				t.Fatalf("counts = %v, want exactly %d of %s; violations: %v", r.Counts, tc.count, tc.want, r.Violations)
			}
			v := r.Violations[0]
			if v.Check != tc.want || v.Detail == "" || len(v.Excerpt) == 0 {
				t.Errorf("violation not explained: %+v", v)
			}
		})
	}
}

func TestCheckerCountsLostUpdates(t *testing.T) {
	var b histBuilder
	b.add(holdSpec{client: 0, start: 10, validUntil: 500, stop: 20, token: 1})
	b.add(holdSpec{client: 1, start: 30, validUntil: 500, stop: 40, token: 2, lost: true})
	b.add(holdSpec{client: 0, start: 50, validUntil: 500, stop: 60, token: 3, lost: true})
	r := CheckHistory(b.finish(100), CheckOptions{})
	if r.LostUpdates != 2 || r.RegisterWrites != 3 || r.RegisterFinal != 1 {
		t.Fatalf("lost=%d writes=%d final=%d, want 2, 3, 1", r.LostUpdates, r.RegisterWrites, r.RegisterFinal)
	}
	if r.Total() != 0 {
		t.Errorf("lost updates are counted, not judged; got violations %v", r.Violations)
	}
}

// The stalled holder's span ends at its late write, so the report can draw
// it; a holder that did not stall ends at its release.
func TestCheckerSpans(t *testing.T) {
	var b histBuilder
	b.add(holdSpec{client: 0, start: 10, validUntil: 100, stop: 170, token: 1, writeAt: 160})
	b.add(holdSpec{client: 1, start: 200, validUntil: 600, stop: 220, token: 2})
	r := CheckHistory(b.finish(700), CheckOptions{})
	if len(r.Holds) != 2 {
		t.Fatalf("holds = %d", len(r.Holds))
	}
	first, second := r.Holds[0], r.Holds[1]
	if !first.Stalled || first.End != ms(163) {
		t.Errorf("stalled span = %+v, want Stalled and End at the late register write's completion (163ms)", first)
	}
	if second.Stalled || second.End != ms(220) {
		t.Errorf("plain span = %+v, want End at release (220ms)", second)
	}
	if r.Total() != 0 {
		t.Errorf("no one else held the lock during the stall; got %v", r.Violations)
	}
}

// Writes whose intervals overlap have no order the checker can know, so
// a lower token accepted concurrently is not a violation.
func TestCheckerFenceOrderIgnoresConcurrentWrites(t *testing.T) {
	h := History{
		{At: ms(10), Kind: FencedWriteInvoke, Client: 0, Hold: 1, Token: 5},
		{At: ms(11), Kind: FencedWriteInvoke, Client: 1, Hold: 2, Token: 4},
		{At: ms(12), Kind: FencedWriteOK, Client: 0, Hold: 1, Token: 5},
		{At: ms(13), Kind: FencedWriteOK, Client: 1, Hold: 2, Token: 4},
	}
	if r := CheckHistory(h, CheckOptions{}); r.Counts[CheckFenceOrder] != 0 {
		t.Fatalf("concurrent writes judged ordered: %v", r.Violations)
	}
}

func TestEventString(t *testing.T) {
	s := Event{At: ms(1500), Kind: AcquireOK, Client: 2, Hold: 7, Token: 42, Deadline: ms(2500)}.String()
	for _, want := range []string{"1.500s", "acquire-ok", "c2 h7", "token=42", "valid-until=2.500s"} {
		if !strings.Contains(s, want) {
			t.Errorf("%q lacks %q", s, want)
		}
	}
}

// The fair-order check (g) catches a waiter served before one that began
// well before it, and judges no pair a fault disturbed.
func TestCheckFairOrder(t *testing.T) {
	history := func(faulty bool) History {
		h := History{
			{At: ms(0), Kind: AcquireInvoke, Client: 0, Hold: 1},
			{At: ms(300), Kind: AcquireInvoke, Client: 1, Hold: 2},
			{At: ms(400), Kind: AcquireOK, Client: 1, Hold: 2, Token: 1, Deadline: ms(1400)},
			{At: ms(450), Kind: ReleaseInvoke, Client: 1, Hold: 2},
			{At: ms(460), Kind: ReleaseOK, Client: 1, Hold: 2},
			{At: ms(500), Kind: AcquireOK, Client: 0, Hold: 1, Token: 2, Deadline: ms(1500)},
			{At: ms(550), Kind: ReleaseInvoke, Client: 0, Hold: 1},
			{At: ms(560), Kind: ReleaseOK, Client: 0, Hold: 1},
		}
		if faulty {
			h = append(h, Event{At: ms(100), Kind: FaultApply, Client: NoClient, Fault: "partition"},
				Event{At: ms(200), Kind: FaultHeal, Client: NoClient, Fault: "partition"})
		}
		return h
	}
	if r := CheckHistory(history(false), CheckOptions{FairOrder: ms(250)}); r.Counts[CheckFairOrder] != 1 {
		t.Fatalf("served out of order: %d fair-order violations, want 1: %v", r.Counts[CheckFairOrder], r.Violations)
	}
	if r := CheckHistory(history(false), CheckOptions{}); r.Counts[CheckFairOrder] != 0 {
		t.Fatalf("the mutex is not judged for order: %v", r.Violations)
	}
	if r := CheckHistory(history(true), CheckOptions{FairOrder: ms(250)}); r.Counts[CheckFairOrder] != 0 {
		t.Fatalf("a fault before the grant weakens fairness only: %v", r.Violations)
	}
}

// A failing run's excerpt shows a violation of every check, however many
// of another check come before it (an unsafe-by-design scenario's expected
// mutual-exclusion violations must not hide an unexpected leftover key).
func TestExcerptShowsEveryCheck(t *testing.T) {
	r := Result{Counts: map[Check]int{CheckMutualExclusion: 12, CheckLeftoverKey: 1}}
	for i := range 12 {
		r.Violations = append(r.Violations, Violation{Check: CheckMutualExclusion, At: time.Duration(i) * time.Second, Detail: "overlap"})
	}
	r.Violations = append(r.Violations, Violation{Check: CheckLeftoverKey, At: 20 * time.Second, Detail: "node n3: lock key left behind"})
	got := excerpt(r)
	for _, want := range []string{"node n3: lock key left behind", "... 9 more " + string(CheckMutualExclusion)} {
		if !strings.Contains(got, want) {
			t.Errorf("excerpt lacks %q:\n%s", want, got)
		}
	}
}
