package chaos

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func resultWith(counts map[Check]int) Result {
	return Result{Counts: counts}
}

func TestExpectJudge(t *testing.T) {
	a := map[Check]int{CheckMutualExclusion: 2}
	ab := map[Check]int{CheckMutualExclusion: 1, CheckTokenOrder: 1}
	ac := map[Check]int{CheckMutualExclusion: 1, CheckFenceOrder: 1}
	none := map[Check]int{}
	cases := []struct {
		name   string
		expect Expect
		counts map[Check]int
		ok     bool
	}{
		{"safe and clean", Expect{Verdict: VerdictSafe}, none, true},
		{"safe but two holders", Expect{Verdict: VerdictSafe}, a, false},
		{"safe but a key left", Expect{Verdict: VerdictSafe}, map[Check]int{CheckLeftoverKey: 1}, false},
		{"by design, provoked", Expect{Verdict: VerdictUnsafeByDesign}, a, true},
		{"by design, not provoked", Expect{Verdict: VerdictUnsafeByDesign}, none, false},
		{"by design, fence broken too", Expect{Verdict: VerdictUnsafeByDesign}, ac, false},
		{"by design, tokens back unexpectedly", Expect{Verdict: VerdictUnsafeByDesign}, ab, false},
		{"by design, tokens back as expected", Expect{Verdict: VerdictUnsafeByDesign, AlsoViolated: []Check{CheckTokenOrder}}, ab, true},
		{"by design, expected token failure missing", Expect{Verdict: VerdictUnsafeByDesign, AlsoViolated: []Check{CheckTokenOrder}}, a, false},
		{"baseline caught", Expect{Verdict: VerdictBaseline}, a, true},
		{"baseline not caught", Expect{Verdict: VerdictBaseline}, map[Check]int{CheckLiveness: 1}, false},
		{"unknown verdict", Expect{Verdict: "maybe"}, none, false},
	}
	for _, tc := range cases {
		err := tc.expect.Judge(resultWith(tc.counts))
		if (err == nil) != tc.ok {
			t.Errorf("%s: Judge = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// The table is data; these are the rules it must keep for the runner to
// play it: unique names, heals only of applied faults, every fault healed,
// clock faults only where the nodes run under libfaketime, baselines
// judged as baselines.
func TestScenarioTable(t *testing.T) {
	seen := map[string]bool{}
	for _, sc := range Scenarios() {
		if sc.Name == "" || seen[sc.Name] {
			t.Errorf("scenario name %q empty or repeated", sc.Name)
		}
		seen[sc.Name] = true
		if sc.About == "" || sc.Scheme == nil || len(sc.Schedule) == 0 {
			t.Errorf("%s: needs About, Scheme and a schedule", sc.Name)
		}
		var isRedlock bool
		switch sc.Scheme.(type) {
		case RedlockScheme, RedlockSemaphoreScheme, FairScheme:
			isRedlock = true
		}
		if _, slots := sc.Scheme.(interface{ LockKeys() []string }); slots != (sc.Permits > 1) { // the semaphore schemes' slots
			t.Errorf("%s: a semaphore scheme is judged with its permits, and only it (Permits %d)", sc.Name, sc.Permits)
		}
		if isRedlock == (sc.Expect.Verdict == VerdictBaseline) {
			t.Errorf("%s: the redlock scheme is never a baseline and a baseline scheme always is (verdict %s)", sc.Name, sc.Expect.Verdict)
		}
		applied := map[string]bool{}
		joined := map[int]bool{} // masters a ReplicaJoin gave a replica so far
		started := map[int]bool{}
		for _, c := range sc.Late {
			if c < 0 || c >= sc.clients() {
				t.Errorf("%s: late client %d of %d", sc.Name, c, sc.clients())
			}
		}
		for _, st := range sc.Schedule {
			switch st.Kind {
			case StepFresh:
				if st.Client < 0 || st.Client >= sc.clients() {
					t.Errorf("%s: starts client %d afresh, of %d", sc.Name, st.Client, sc.clients())
				}
				started[st.Client] = true
			case StepApply:
				applied[st.Fault.Name()] = true
				if _, onCluster := st.Fault.(clusterFault); onCluster != (sc.ClusterMasters > 0) {
					t.Errorf("%s: %s is applied on a scenario with ClusterMasters %d: Cluster faults act on Cluster nodes only, and Cluster nodes take no other fault", sc.Name, st.Fault.Name(), sc.ClusterMasters)
				}
				switch f := st.Fault.(type) {
				case ReplicationCut:
					replicated(t, sc, joined, f.Masters)
				case Failover:
					replicated(t, sc, joined, f.Masters)
				case FailBack:
					replicated(t, sc, joined, f.Masters)
				case ReplicaJoin:
					for _, m := range f.Masters {
						if !sc.SpareReplicas || sc.Replicas || joined[m] || m >= sc.nodes() {
							t.Errorf("%s: n%d has no spare server to join it, or has a replica already", sc.Name, m)
						}
						joined[m] = true
					}
				case RegisterReplicationCut, RegisterFailover:
					if sc.ClusterReplicas == 0 {
						t.Errorf("%s: %s needs Cluster masters with replicas (ClusterReplicas)", sc.Name, st.Fault.Name())
					}
				case ClockJump, ClockFast, ShardClockJump:
					if !sc.needsFakeTime() {
						t.Errorf("%s: clock fault without libfaketime", sc.Name)
					}
				}
			case StepHeal:
				if !applied[st.Fault.Name()] {
					t.Errorf("%s: heals %s before applying it", sc.Name, st.Fault.Name())
				}
				delete(applied, st.Fault.Name())
			}
		}
		for f := range applied {
			t.Errorf("%s: %s is never healed", sc.Name, f)
		}
		for _, c := range sc.Late {
			if !started[c] {
				t.Errorf("%s: late client %d never starts (no Fresh step)", sc.Name, c)
			}
		}
		if sc.ClusterReplicas > 0 && sc.ClusterMasters == 0 {
			t.Errorf("%s: ClusterReplicas without ClusterMasters", sc.Name)
		}
		if err := (Expect{Verdict: sc.Expect.Verdict}).Judge(Result{Counts: map[Check]int{}}); sc.Expect.Verdict == VerdictSafe && err != nil {
			t.Errorf("%s: %v", sc.Name, err)
		}
	}
	if _, err := ScenarioByName("no-such-scenario"); err == nil || !strings.Contains(err.Error(), "no-such-scenario") {
		t.Errorf("ScenarioByName of a bad name: %v", err)
	}
}

// replicated fails t unless every master of a replication fault has a
// replica in sc: from the start, or joined before the fault (joined).
func replicated(t *testing.T, sc Scenario, joined map[int]bool, masters []int) {
	t.Helper()
	for _, m := range masters {
		if !sc.Replicas && !(sc.Replica && m == 0) && !joined[m] || m >= sc.nodes() {
			t.Errorf("%s: n%d has no replica to fail over to or cut", sc.Name, m)
		}
	}
}

// The report puts a violation where a person sees it: the run is marked
// MISMATCH, the overlapping holds are drawn red, the violation is listed
// with its events.
func TestReportShowsViolations(t *testing.T) {
	var b histBuilder
	b.fault("partition(n3,n4)", 5, 300)
	b.add(holdSpec{client: 0, start: 10, validUntil: 500, stop: 200, token: 1})
	b.add(holdSpec{client: 1, start: 100, validUntil: 600, stop: 150, token: 2})
	h := b.finish(700)
	sc := Scenario{Name: "two-holders", About: "hand-made", Expect: Expect{Verdict: VerdictSafe}, Schedule: []Step{Wait(time.Second)}}
	run := &Run{Scenario: sc, Backend: "process", History: h, Result: CheckHistory(h, CheckOptions{})}
	run.Mismatch = sc.Expect.Judge(run.Result)
	rep := &Report{Started: time.Now(), Runs: []*Run{run}}

	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, want := range []string{"<svg", "MISMATCH", "#c62828", "a:mutual-exclusion", "partition(n3,n4)", "close-up of the first violation"} {
		if !strings.Contains(html, want) {
			t.Errorf("report page lacks %q", want)
		}
	}
	table := rep.Table()
	if !strings.Contains(table, "| two-holders | process | safe | MISMATCH | 2 | 1 |") {
		t.Errorf("table row missing or wrong:\n%s", table)
	}
	if rep.OK() {
		t.Error("a report with a mismatch is not OK")
	}
	// The chaos table of docs/TESTING.md is pasted from a soak's report.md,
	// which is Table: same columns.
	readme, err := os.ReadFile("../docs/TESTING.md")
	if err != nil {
		t.Fatal(err)
	}
	header := table[:strings.Index(table, "\n|---")]
	if !strings.Contains(string(readme), header+"\n") {
		t.Errorf("the chaos table of docs/TESTING.md has other columns than Table's %q", header)
	}

	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report.md", "report.html", "history-two-holders-process.jsonl"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestRunSoakRejectsBadConfig(t *testing.T) {
	ctx := context.Background()
	if _, err := RunSoak(ctx, SoakConfig{Scenarios: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown scenario: %v", err)
	}
	if _, err := RunSoak(ctx, SoakConfig{Backend: "vm"}); err == nil || !strings.Contains(err.Error(), `"vm"`) {
		t.Errorf("unknown backend: %v", err)
	}
	if _, err := RunSoak(ctx, SoakConfig{Backend: "process", Duration: -time.Second}); err == nil || !strings.Contains(err.Error(), "-1s") {
		t.Errorf("negative duration: %v", err)
	}
}
