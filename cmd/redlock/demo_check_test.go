package main

import (
	"testing"
	"time"
)

// at builds times on one monotonic base, so histories read like timelines in milliseconds.
var base = time.Now()

func at(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }

// held returns a sequential acquisition: requested at from, acquired 1ms later, held to to.
func hold(token int64, from, to int) acquisition {
	return acquisition{token: token, invoked: at(from), acquired: at(from + 1), heldUntil: at(to), write: writeApplied}
}

// historyCase is a history and the count a check of it must give.
type historyCase struct {
	name    string
	history []acquisition
	want    int
}

func TestTokenOrderViolations(t *testing.T) {
	cases := []historyCase{
		{"increasing", []acquisition{hold(1, 0, 10), hold(2, 10, 20), hold(5, 20, 30)}, 0},
		{"a later acquisition with a lower token", []acquisition{hold(1, 0, 10), hold(3, 10, 20), hold(2, 20, 30)}, 1},
		{"a repeated token", []acquisition{hold(1, 0, 10), hold(1, 10, 20)}, 2},
		{
			// Requested before the other one returned: the observer cannot order them.
			"concurrent requests are not ordered",
			[]acquisition{
				{token: 2, invoked: at(0), acquired: at(5), heldUntil: at(6)},
				{token: 1, invoked: at(1), acquired: at(7), heldUntil: at(8)},
			},
			0,
		},
		{"empty", nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tokenOrderViolations(tc.history); got != tc.want {
				t.Fatalf("want %d violations, got %d", tc.want, got)
			}
		})
	}
}

func TestOverlappingHolds(t *testing.T) {
	cases := []historyCase{
		{"back to back", []acquisition{hold(1, 0, 10), hold(2, 10, 20), hold(3, 20, 30)}, 0},
		{"acquired while the previous holder was valid", []acquisition{hold(1, 0, 10), hold(2, 5, 20)}, 1},
		{"a long holder covers two later ones", []acquisition{hold(1, 0, 100), hold(2, 10, 20), hold(3, 30, 40)}, 2},
		{"out of order in the record", []acquisition{hold(2, 10, 20), hold(1, 0, 10)}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := overlappingHolds(tc.history); got != tc.want {
				t.Fatalf("want %d overlaps, got %d", tc.want, got)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	var samples []time.Duration
	for i := 100; i >= 1; i-- {
		samples = append(samples, time.Duration(i)*time.Millisecond)
	}
	if got := percentile(samples, 50); got != 50*time.Millisecond {
		t.Fatalf("p50 = %v, want 50ms", got)
	}
	if got := percentile(samples, 99); got != 99*time.Millisecond {
		t.Fatalf("p99 = %v, want 99ms", got)
	}
	if got := percentile(samples[:1], 99); got != 100*time.Millisecond {
		t.Fatalf("p99 of one sample = %v, want it", got)
	}
	if got := percentile(nil, 50); got != 0 {
		t.Fatalf("p50 of nothing = %v, want 0", got)
	}
}

func TestJudge(t *testing.T) {
	stalled := hold(1, 0, 10)
	stalled.stalled, stalled.write = true, writeRejected
	history := []acquisition{stalled, hold(2, 10, 20), hold(3, 20, 30)}

	v := judge(history, 2)
	if !v.safe() || v.applied != 2 || v.rejected != 1 || v.stalledWrites != 1 {
		t.Fatalf("a clean history judged %+v", v)
	}
	if v := judge(history, 1); v.safe() || v.counterMatches {
		t.Fatalf("a lost increment passed: %+v", v)
	}

	stalled.write = writeApplied
	if v := judge([]acquisition{stalled, hold(2, 10, 20)}, 2); v.safe() || v.staleAccepted != 1 {
		t.Fatalf("an accepted stale write passed: %+v", v)
	}

	uncertain := hold(4, 30, 40)
	uncertain.write = writeAmbiguous
	for counter, safe := range map[int64]bool{2: true, 3: true, 4: false} {
		if v := judge(append(history, uncertain), counter); v.safe() != safe {
			t.Fatalf("counter %d with 2 increments and 1 uncertain: safe = %v, want %v", counter, v.safe(), safe)
		}
	}
}
