package chaos

import (
	"os"
	"slices"
	"testing"
	"time"
)

// rwShortSuite are the read-write scenarios the short suite runs: the
// control, a flapping majority, the failover of a majority, and the ones
// the checker must catch. The others run with REDLOCK_CHAOS_RW=all, and
// in the soak.
var rwShortSuite = []string{"rw-no-faults", "rw-partition-flapping", "rw-restart-empty-no-grace",
	"rw-failover-majority-not-durable", "rw-failover-majority-durable"}

// TestRWScenarios runs the read-write lock's scenarios on every backend
// REDLOCK_CHAOS_BACKEND asks for; a verdict that differs from the
// expectation fails.
func TestRWScenarios(t *testing.T) {
	scenarios := RWScenarios
	if os.Getenv("REDLOCK_CHAOS_RW") != "all" {
		scenarios = func() []Scenario {
			return slices.DeleteFunc(RWScenarios(), func(sc Scenario) bool { return !slices.Contains(rwShortSuite, sc.Name) })
		}
	}
	eachScenario(t, scenarios, func(t *testing.T, b Backend, sc Scenario) {
		run := runScenarioT(t, b, sc)
		r := run.Result
		shared, writes := 0, 0
		for _, h := range r.Holds {
			if h.Shared {
				shared++
			} else {
				writes++
			}
		}
		t.Logf("backend=%s scenario=%s expected=%s got=%q acquisitions=%d (writers %d, readers %d) stale-rejected=%d recovery=%s elapsed=%s",
			run.Backend, sc.Name, sc.Expect.Verdict, Summarize(r), r.Acquisitions, writes, shared, r.StaleRejected,
			r.Recovery.Round(time.Millisecond), run.Elapsed.Round(time.Millisecond))
		if writes == 0 || shared == 0 {
			t.Errorf("%s on %s: %d writer and %d reader holds: the run did not exercise both sides", sc.Name, run.Backend, writes, shared)
		}
		if run.Mismatch != nil {
			t.Errorf("%s on %s: %v\n%s", sc.Name, run.Backend, run.Mismatch, excerpt(r))
		}
		keepReport(t, run)
	})
}

// TestCheckerLetsReadersOverlapOnlyEachOther judges hand-made histories:
// two readers at once pass; a writer beside a reader, or a reader beside
// a writer, is a mutual-exclusion violation. Readers' tokens may repeat
// each other's and the last writer's, but must not fall below an earlier
// writer's, and a writer's must be above every earlier reader's.
func TestCheckerLetsReadersOverlapOnlyEachOther(t *testing.T) {
	read := func(client, hold, start, stop int, fence int64) []Event {
		ev := func(at int, k EventKind) Event { return Event{At: ms(at), Kind: k, Client: client, Hold: hold} }
		ok := ev(start, AcquireOK)
		ok.Token, ok.Deadline, ok.Detail = fence, ms(stop+100), SharedHold
		return []Event{ev(start-1, AcquireInvoke), ok, ev(stop, ReleaseInvoke), ev(stop+1, ReleaseOK)}
	}
	write := func(client, hold, start, stop int, token int64) []Event {
		ev := func(at int, k EventKind) Event { return Event{At: ms(at), Kind: k, Client: client, Hold: hold} }
		ok := ev(start, AcquireOK)
		ok.Token, ok.Deadline = token, ms(stop+100)
		return []Event{ev(start-1, AcquireInvoke), ok, ev(stop, ReleaseInvoke), ev(stop+1, ReleaseOK)}
	}
	cases := []struct {
		name string
		h    []Event
		want map[Check]int
	}{
		{"readers together", append(read(0, 1, 10, 50, 7), read(1, 2, 20, 60, 7)...), map[Check]int{}},
		{"writer then readers", append(write(0, 1, 10, 20, 9), append(read(1, 2, 30, 60, 9), read(2, 3, 40, 70, 9)...)...), map[Check]int{}},
		{"reader beside a writer", append(read(1, 1, 10, 50, 7), write(0, 2, 20, 30, 8)...), map[Check]int{CheckMutualExclusion: 1}},
		{"writer beside a reader", append(write(0, 1, 10, 50, 8), read(1, 2, 20, 30, 8)...), map[Check]int{CheckMutualExclusion: 1}},
		{"writers' tokens go back", append(write(0, 1, 10, 20, 9), write(1, 2, 30, 40, 8)...), map[Check]int{CheckTokenOrder: 1}},
		{"readers share tokens, then a writer above", append(read(1, 1, 10, 50, 12), append(read(2, 2, 20, 60, 11), write(0, 3, 70, 80, 13)...)...), map[Check]int{}},
		{"a reader below an earlier writer", append(write(0, 1, 10, 20, 9), read(1, 2, 30, 60, 8)...), map[Check]int{CheckTokenOrder: 1}},
		{"a writer not above an earlier reader", append(read(1, 1, 10, 20, 12), write(0, 2, 30, 40, 12)...), map[Check]int{CheckTokenOrder: 1}},
	}
	for _, tc := range cases {
		r := CheckHistory(History(tc.h), CheckOptions{})
		for _, ch := range AllChecks {
			if r.Counts[ch] != tc.want[ch] {
				t.Errorf("%s: %s=%d, want %d (%s)", tc.name, ch, r.Counts[ch], tc.want[ch], Summarize(r))
			}
		}
	}
}
