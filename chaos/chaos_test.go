package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	SilenceRedisLog()
	os.Exit(m.Run())
}

// testLog sends a run's log lines to t.Log at Info level.
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestScenarios runs every scenario of the table in its short form on every
// backend REDLOCK_CHAOS_BACKEND asks for (auto: processes, and Docker when
// an engine answers). A verdict that differs from the expectation fails.
func TestScenarios(t *testing.T) {
	eachScenario(t, Scenarios, func(t *testing.T, b Backend, sc Scenario) {
		run := runScenarioT(t, b, sc)
		r := run.Result
		t.Logf("backend=%s scenario=%s expected=%s got=%q acquisitions=%d stale-rejected=%d lost-updates=%d recovery=%s elapsed=%s",
			run.Backend, sc.Name, sc.Expect.Verdict, Summarize(r), r.Acquisitions, r.StaleRejected, r.LostUpdates,
			r.Recovery.Round(time.Millisecond), run.Elapsed.Round(time.Millisecond))
		if run.Mismatch != nil {
			t.Errorf("%s on %s: %v\n%s", sc.Name, run.Backend, run.Mismatch, excerpt(r))
		}
		keepReport(t, run)
	})
}

// eachScenario runs test as a subtest per scenario on every backend
// REDLOCK_CHAOS_BACKEND asks for: the backends side by side, each one's
// scenarios (its own copy of the table) one after another.
func eachScenario(t *testing.T, scenarios func() []Scenario, test func(t *testing.T, b Backend, sc Scenario)) {
	for _, b := range openBackends(t) {
		t.Run(b.Name(), func(t *testing.T) {
			t.Parallel()
			for _, sc := range scenarios() {
				t.Run(sc.Name, func(t *testing.T) { test(t, b, sc) })
			}
		})
	}
}

// SplitEnv splits the short suite in two, for time: the scenarios of over
// 20 seconds that make test leaves out go in a target of their own (make
// chaos-long, which CI runs after make test), on both backends side by
// side. Those are the longScenarios and the scenarios whose nodes are Redis
// Clusters (13-28 seconds each), and on Docker the scenarios not in
// dockerInMakeTest. "later": make test, which skips them
// loudly; "only": those runs alone; unset: every backend runs every
// scenario.
const SplitEnv = "REDLOCK_CHAOS_LONG"

// longScenarios are the scenarios whose schedule waits out a TTL-long grace
// or a clock guard, or runs ten servers: 20 to 29 seconds each on Docker,
// 13 to 30 on processes. Run on processes in make test they took 494s of
// its chaos suite's 906s (a clean-clone .ci/run); in chaos-long the process
// runs go beside the Docker ones, which take longer.
var longScenarios = map[string]bool{
	"clock-fast": true, "clock-jump-guard": true, "clock-jump-no-guard": true,
	"restart-empty-grace": true, "restart-empty-mixed-ttl": true,
	"semaphore-rotating-partitions": true, "semaphore-restart-empty-grace": true, "semaphore-clock-jump-guard": true,
	"fair-restart-empty-grace": true, "fair-clock-jump-guard": true,
	// Ten nodes and a failover timed after the TTL: 20-29s on Docker.
	"failover-minority-not-durable": true, "failover-majority-not-durable": true,
	"failover-minority-durable": true, "failover-majority-durable": true,
	"semaphore-failover-majority-durable": true, "fair-failover-majority-durable": true,
	"rw-failover-majority-not-durable": true, "rw-failover-majority-durable": true, // TestRWScenarios
	// Issue 25's nodes that forget without a restart (scenario_epoch.go):
	// ten servers, or a grace waited out after the fault.
	"failover-persistent": true, "failover-persistent-no-grace": true, "failback": true, "failback-no-grace": true,
	"durable-replica-joins": true, "replica-joins-not-durable": true,
	"evict-refused": true, "evict-allowed": true, "evict-allowed-no-grace": true,
}

// dockerInMakeTest are the short scenarios that make test runs on Docker
// too: one of each fault family (network, pause, restart, extension, TLS)
// and of each primitive, and the unsafe-by-design ones and baselines, whose
// violations must show on both backends. Every scenario's container run
// takes 9 to 25 seconds, and all of them made the Docker half of make
// test's chaos suite 575s of its 732s (a clean-clone .ci/run): the other
// short scenarios' Docker runs go in chaos-long.
var dockerInMakeTest = map[string]bool{
	"no-faults": true, "latency": true, "reset-peer": true, "partition-majority": true,
	"node-pause": true, "client-pause": true, "restart-empty-no-grace": true, "extend-flapping": true,
	"baseline-setnx-del": true, "baseline-failover": true, "partition-minority-tls": true,
	"fair-partition-flapping": true, "semaphore-restart-empty-no-grace": true, "rw-partition-flapping": true,
}

// longRun tells whether the scenario's run on backend is one of the long
// split's.
func longRun(backend string, sc Scenario) bool {
	return longScenarios[sc.Name] || sc.ClusterMasters > 0 || (backend == "docker" && !dockerInMakeTest[sc.Name])
}

// splitSkip tells why the scenario does not run on this backend under
// SplitEnv, or "" when it runs.
func splitSkip(backend string, sc Scenario) string {
	switch os.Getenv(SplitEnv) {
	case "later":
		if longRun(backend, sc) {
			return "SKIPPED ON " + strings.ToUpper(backend) + " HERE: " + SplitEnv + "=later; make chaos-long runs it (CI runs that target after make test)"
		}
	case "only":
		if !longRun(backend, sc) {
			return "not in this split: " + SplitEnv + "=only runs the long runs alone; make test runs the rest"
		}
	}
	return ""
}

// ArtifactsEnv names a directory where the short suite leaves, for each
// run, its report page and history (CI keeps them as artifacts).
const ArtifactsEnv = "REDLOCK_CHAOS_ARTIFACTS"

func keepReport(t *testing.T, run *Run) {
	dir := os.Getenv(ArtifactsEnv)
	if dir == "" {
		return
	}
	rep := &Report{Started: time.Now(), Runs: []*Run{run}}
	out := filepath.Join(dir, run.Scenario.Name+"-"+run.Backend)
	if err := rep.WriteFiles(out); err != nil {
		t.Errorf("writing the run's report to %s: %v", out, err)
		return
	}
	t.Logf("report: %s/report.html", out)
}

// excerpt prints the first violations of each check with the events that
// show them: per check, so that an unexpected one is not hidden behind the
// many a scenario unsafe by design expects of another check.
func excerpt(r Result) string {
	const perCheck = 3
	var b strings.Builder
	shown := map[Check]int{}
	for _, v := range r.Violations {
		if shown[v.Check] == perCheck {
			continue
		}
		shown[v.Check]++
		fmt.Fprintf(&b, "%s at %.3fs: %s\n", v.Check, v.At.Seconds(), v.Detail)
		for _, e := range v.Excerpt {
			fmt.Fprintf(&b, "    %s\n", e)
		}
	}
	for _, check := range AllChecks {
		if more := r.Counts[check] - shown[check]; more > 0 {
			fmt.Fprintf(&b, "... %d more %s\n", more, check)
		}
	}
	return b.String()
}

// runScenarioT runs sc on b, within 3 minutes, as runScenarioOnce does,
// unless splitSkip leaves it out of this suite. A run that fails to
// complete keeps what it has of a report and fails the test.
func runScenarioT(t *testing.T, b Backend, sc Scenario) *Run {
	t.Helper()
	if why := splitSkip(b.Name(), sc); why != "" {
		t.Skip(why)
	}
	if why := waitAOFSkip(sc); why != "" {
		t.Skip(why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run, err := runScenarioOnce(ctx, t, b, sc)
	if err != nil {
		if run != nil {
			keepReport(t, run)
		}
		t.Fatal(err)
	}
	return run
}

// runScenarioOnce runs sc on b. An unsafe-by-design schedule that
// provoked no violation gets one more run: its fault races the holder's
// next extension (one that lands first takes the nodes back), and on a
// loaded machine it can lose that race once. A safe scenario's run, and
// a violation anywhere, are never run again.
func runScenarioOnce(ctx context.Context, t *testing.T, b Backend, sc Scenario) (*Run, error) {
	run, err := RunScenario(ctx, b, sc, RunConfig{Log: testLog(t)})
	if err != nil || sc.Expect.Verdict != VerdictUnsafeByDesign || run.Result.Total() > 0 {
		return run, err
	}
	t.Logf("backend=%s scenario=%s: NO VIOLATION PROVOKED IN THE FIRST RUN of this unsafe-by-design schedule; running it once more", run.Backend, sc.Name)
	keepReport(t, run)
	return RunScenario(ctx, b, sc, RunConfig{Log: testLog(t)})
}
