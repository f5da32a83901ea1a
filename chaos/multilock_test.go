package chaos

import (
	"context"
	"testing"
	"time"
)

// TestMultiLockScenarios runs the multi-lock's scenarios in their short
// form on every backend asked for; each name's verdict must match.
func TestMultiLockScenarios(t *testing.T) {
	eachScenario(t, MultiScenarios, func(t *testing.T, b Backend, sc Scenario) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		run, err := RunMultiScenario(ctx, b, sc, RunConfig{Log: testLog(t)})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range MultiNames {
			r := run.Names[name].Result
			t.Logf("backend=%s scenario=%s name=%s expected=%s got=%q acquisitions=%d stale-rejected=%d lost-updates=%d recovery=%s",
				run.Backend, sc.Name, name, sc.Expect.Verdict, Summarize(r), r.Acquisitions, r.StaleRejected, r.LostUpdates, r.Recovery.Round(time.Millisecond))
			if r.Acquisitions == 0 {
				t.Errorf("%s was never acquired: the run shows nothing about it", name)
			}
		}
		t.Logf("backend=%s scenario=%s multi-lock holds=%d elapsed=%s", run.Backend, sc.Name, run.Holds, run.Elapsed.Round(time.Millisecond))
		if run.Mismatch != nil {
			for _, name := range MultiNames {
				t.Log(excerpt(run.Names[name].Result))
			}
			t.Errorf("%s on %s: %v", sc.Name, run.Backend, run.Mismatch)
		}
	})
}

// TestMultiLockCheckerCatchesAnOverlapOnOneName feeds a name's history, as
// the multi-lock workload builds it, where two clients' sets both held
// multi-b at once: the checker must flag it on that name, with the
// nemesis' fault window merged in.
func TestMultiLockCheckerCatchesAnOverlapOnOneName(t *testing.T) {
	ms := time.Millisecond
	own := History{
		{At: 10 * ms, Kind: AcquireOK, Client: 0, Hold: 1, Token: 5, Deadline: 900 * ms},
		{At: 20 * ms, Kind: AcquireOK, Client: 1, Hold: 2, Token: 6, Deadline: 900 * ms},
		{At: 30 * ms, Kind: ReleaseInvoke, Client: 0, Hold: 1},
		{At: 40 * ms, Kind: ReleaseInvoke, Client: 1, Hold: 2},
	}
	nemesis := History{
		{At: 5 * ms, Kind: FaultApply, Client: NoClient, Fault: "pause(n0)"},
		{At: 35 * ms, Kind: FaultHeal, Client: NoClient, Fault: "pause(n0)"},
	}
	r := CheckHistory(nameHistory(own, nemesis), CheckOptions{})
	if r.Counts[CheckMutualExclusion] == 0 {
		t.Fatalf("overlap on one name not caught: %s", Summarize(r))
	}
	if len(r.Faults) != 1 {
		t.Fatalf("fault windows %v, want the nemesis' one", r.Faults)
	}
	safe := CheckHistory(nameHistory(own[:1], nemesis), CheckOptions{})
	if safe.Total() != 0 {
		t.Fatalf("a lone hold judged unsafe: %s", Summarize(safe))
	}
}
