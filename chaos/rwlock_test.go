package chaos

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"
)

// rwShortSuite are the read-write scenarios the short suite runs: the
// control, a flapping majority, and the one the checker must catch. The
// others run with REDLOCK_CHAOS_RW=all, and in the soak.
var rwShortSuite = []string{"rw-no-faults", "rw-partition-flapping", "rw-restart-empty-no-grace"}

// TestRWScenarios runs the read-write lock's scenarios on every backend
// REDLOCK_CHAOS_BACKEND asks for; a verdict that differs from the
// expectation fails.
func TestRWScenarios(t *testing.T) {
	all := os.Getenv("REDLOCK_CHAOS_RW") == "all"
	for _, b := range openBackends(t) {
		t.Run(b.Name(), func(t *testing.T) {
			t.Parallel()
			for _, sc := range RWScenarios() {
				if !all && !slices.Contains(rwShortSuite, sc.Name) {
					continue
				}
				t.Run(sc.Name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
					defer cancel()
					run, err := RunScenario(ctx, b, sc, RunConfig{Log: testLog(t)})
					if err != nil {
						if run != nil {
							keepReport(t, run)
						}
						t.Fatal(err)
					}
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
		})
	}
}
