package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestConfigRejectsBadValuesByName(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Nodes: []int{3, 0}}, "node count 0"},
		{Config{Nodes: []int{99}}, "node count 99"},
		{Config{Workloads: []string{"uncontended-1", "sideways"}}, `workload "sideways"`},
		{Config{Contenders: []string{"redsinc"}}, `contender "redsinc"`},
		{Config{Repeats: -1}, "repeats -1"},
		{Config{Duration: -time.Second}, "duration -1s"},
		{Config{MaxOps: -5}, "max ops -5"},
		{Config{Hold: -time.Millisecond}, "hold -1ms"},
		{Config{SlowLatency: 1500 * time.Microsecond}, "slow latency 1.5ms"},
	} {
		_, err := c.cfg.normalize()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config %+v: error %v, want one naming %q", c.cfg, err, c.want)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := Config{Contenders: []string{ContenderFloor, ContenderRedsync}}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Nodes) != 4 || cfg.Repeats != 3 || cfg.Duration != 2*time.Second || cfg.SlowLatency != 5*time.Millisecond || cfg.Hold != time.Millisecond {
		t.Errorf("defaults not filled: %+v", cfg)
	}
	if len(cfg.Workloads) != len(AllWorkloads) {
		t.Errorf("workloads %v, want all", cfg.Workloads)
	}
	if got := strings.Join(cfg.Contenders, ","); got != "redsync,floor" {
		t.Errorf("contenders %q, want them in table order: redsync,floor", got)
	}
}

func TestIdleSubscribersSelectsItsThreeWorkloadsAndComparesWithNoIdle(t *testing.T) {
	cfg, err := Config{Workloads: []string{WorkloadIdleSubscribers, WorkloadUncontended1}}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Workloads, ","); got != "uncontended-1,idle-subscribers-0,idle-subscribers-10,idle-subscribers-100" {
		t.Errorf("workloads %q", got)
	}
	run := func(workload string, ops float64, cpu time.Duration) Run {
		return Run{Nodes: 5, Workload: workload, Contender: ContenderRedlock, Figures: Figures{OpsPerSec: ops, ServerCPU: cpu}}
	}
	cells := summarize([]Run{
		run(WorkloadIdleSubscribers0, 2000, 400*time.Microsecond),
		run(WorkloadIdleSubscribers100, 1000, 800*time.Microsecond),
	})
	if len(cells) != 2 || cells[0].VsNoIdle != 0 || cells[1].VsNoIdle != 0.5 || cells[1].ServerCPUVsNoIdle != 2 {
		t.Errorf("ratios against no idle client: %+v", cells)
	}
	if w := workloadByName(WorkloadIdleSubscribers100); w.idle != 100 || w.workers != 4 || !w.runsOn(ContenderRedlock, 5) || w.runsOn(ContenderRedsync, 5) {
		t.Errorf("idle-subscribers-100: %+v", w)
	}
}

func TestSummarizeTakesMediansAndRatios(t *testing.T) {
	run := func(workload, contender string, rep int, ops float64, p50 time.Duration) Run {
		return Run{Nodes: 5, Workload: workload, Contender: contender, Repeat: rep,
			Figures: Figures{OpsPerSec: ops, AcquireP50: p50, RTT: 100 * time.Microsecond, HandoffP50: 250 * time.Microsecond}}
	}
	runs := []Run{
		run(WorkloadUncontended1, ContenderRedlock, 0, 900, 100*time.Microsecond),
		run(WorkloadUncontended1, ContenderRedsync, 0, 500, 200*time.Microsecond),
		run(WorkloadUncontended1, ContenderFloor, 0, 1000, 90*time.Microsecond),
		run(WorkloadUncontended1, ContenderRedlock, 1, 1200, 110*time.Microsecond),
		run(WorkloadUncontended1, ContenderRedsync, 1, 600, 210*time.Microsecond),
		run(WorkloadUncontended1, ContenderFloor, 1, 1100, 95*time.Microsecond),
		run(WorkloadUncontended1, ContenderRedlock, 2, 1000, 120*time.Microsecond),
		run(WorkloadUncontended1, ContenderRedsync, 2, 550, 190*time.Microsecond),
		run(WorkloadUncontended1, ContenderFloor, 2, 1050, 92*time.Microsecond),
		run(WorkloadUncontended1, ContenderRueidislock, 0, 2000, 80*time.Microsecond),
		run(WorkloadSlowNode, ContenderRedlock, 0, 800, 132*time.Microsecond),
		run(WorkloadContended16, ContenderRedlock, 0, 300, time.Millisecond),
	}
	cells := summarize(runs)
	if len(cells) != 6 {
		t.Fatalf("%d cells, want 6: %+v", len(cells), cells)
	}
	byName := map[string]Cell{}
	for _, c := range cells {
		byName[c.Workload+"/"+c.Contender] = c
	}
	redlock := byName["uncontended-1/redlock"]
	if redlock.OpsPerSec != 1000 || redlock.AcquireP50 != 110*time.Microsecond || redlock.Repeats != 3 {
		t.Errorf("redlock medians: %+v, want 1000 ops/s, p50 110µs over 3 repeats", redlock)
	}
	if redlock.VsRedsync != 1000.0/550 || redlock.VsFloor != 1000.0/1050 {
		t.Errorf("redlock ratios: ×redsync %v (want %v), ×floor %v (want %v)", redlock.VsRedsync, 1000.0/550, redlock.VsFloor, 1000.0/1050)
	}
	if redlock.VsRueidislock != 0.5 {
		t.Errorf("redlock ×rueidislock %v, want 1000/2000 = 0.5", redlock.VsRueidislock)
	}
	if slow := byName["slow-node/redlock"]; slow.VsNoFault != 1.2 {
		t.Errorf("slow-node ×no-fault %v, want 132µs/110µs = 1.2", slow.VsNoFault)
	}
	if contended := byName["contended-16/redlock"]; contended.HandoffRTTs != 2.5 || contended.VsRedsync != 0 {
		t.Errorf("contended: hand-off %v RTT (want 2.5), ×redsync %v (want 0: no redsync run)", contended.HandoffRTTs, contended.VsRedsync)
	}
	if cells[0].Contender != ContenderRedlock || cells[len(cells)-1].Workload != WorkloadSlowNode {
		t.Errorf("cells not in table order: first %s/%s, last %s/%s", cells[0].Workload, cells[0].Contender, cells[len(cells)-1].Workload, cells[len(cells)-1].Contender)
	}
}

func TestTablesAndJSONCarryTheCells(t *testing.T) {
	res := &Results{
		Config:  Config{Repeats: 3, Duration: time.Second},
		Machine: Machine{CPUs: 2, GoVersion: "go1.26.8", RedisVersion: "7.0.15"},
		Cells: summarize([]Run{
			{Nodes: 5, Workload: WorkloadUncontended1, Contender: ContenderRedlock, Figures: Figures{OpsPerSec: 2000, AcquireP50: 150 * time.Microsecond}},
			{Nodes: 5, Workload: WorkloadUncontended1, Contender: ContenderRedsync, Failures: 2, Figures: Figures{OpsPerSec: 1000}},
		}),
	}
	var text, md, js bytes.Buffer
	if err := res.WriteTable(&text); err != nil {
		t.Fatal(err)
	}
	if err := res.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := res.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"redlock", "2.00", "150µs", "2 failures", "redis 7.0.15", "2 CPUs"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text table lacks %q:\n%s", want, text.String())
		}
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown table lacks %q:\n%s", want, md.String())
		}
	}
	var back Results
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Cells) != 2 || back.Cells[0].VsRedsync != 2 {
		t.Errorf("JSON round trip lost cells: %+v", back.Cells)
	}
}

// TestRunMatrixSmoke runs a tiny matrix on real nodes: every workload and
// contender on three nodes, once, briefly. It checks that every cell that
// should run did, completed operations, saw no violation of mutual exclusion
// and no token out of order, and hardly any failed attempt; timings are not
// judged.
func TestRunMatrixSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := RunMatrix(ctx, Config{Nodes: []int{3}, Repeats: 1, Duration: 500 * time.Millisecond,
		HeldCounts: []int{200}, HeldFor: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Cell{}
	for _, c := range res.Cells {
		got[c.Workload+"/"+c.Contender] = c
	}
	firstErrors := map[string][]string{}
	for _, r := range res.Runs {
		firstErrors[r.Workload+"/"+r.Contender] = append(firstErrors[r.Workload+"/"+r.Contender], r.FirstError)
	}
	measured := 0
	for _, workload := range AllWorkloads {
		w := workloadByName(workload)
		if w.held {
			continue // its own figures, checked below
		}
		for _, contender := range AllContenders {
			key := workload + "/" + contender
			c, ok := got[key]
			if ok != w.runsOn(contender, 3) {
				t.Errorf("%s: in results %v, should run %v", key, ok, !ok)
				continue
			}
			if !ok {
				continue
			}
			// Any library may complete nothing in so short a run on a
			// loaded machine (redsync's fail-fast mode leaves orphan keys
			// that block the name for their TTL under contention; at a load
			// average of 15 this library's 256 workers completed nothing in
			// 500ms): that is its figure, not a fault of the matrix. A cell
			// of this library that completed anything must have measured
			// all of it, and one at least must have completed something.
			ours := strings.HasPrefix(contender, ContenderRedlock)
			if ours && c.OpsPerSec > 0 {
				measured++
				if c.AcquireP50 <= 0 || c.AllocsPerOp <= 0 || c.ClientCPU <= 0 || c.ServerCPU <= 0 {
					t.Errorf("%s: not all measured: %+v", key, c)
				}
			}
			if c.Violations != 0 {
				t.Errorf("%s: %d violations of mutual exclusion or token order; first errors: %q", key, c.Violations, firstErrors[key])
			}
			// Failures are figures, not faults, on a machine that other
			// work may load: at a load average of 8, 191 of about 273 fair
			// acquisitions of 256 workers found no node answering within
			// the node timeout. The table reports them. Only the forced
			// fencing slow path is judged, where one failure means the slow
			// path was not taken.
			if ops := c.OpsPerSec * res.Config.Duration.Seconds(); ours && workload == WorkloadFencingSlow && c.Failures > 0 {
				t.Errorf("%s: %d failures in about %.0f operations; first errors: %q", key, c.Failures, ops, firstErrors[key])
			}
		}
	}
	if measured == 0 {
		t.Errorf("no cell of this library completed an operation: %+v", res.Cells)
	}
	// 200 locks of 3s held for 1.5s after a 1s settle: each is extended
	// about once a second, so some extensions fall in the measured time.
	if len(res.HeldCells) != 1 {
		t.Errorf("held-locks: %d cells, want 1: %+v", len(res.HeldCells), res.HeldCells)
	} else if c := res.HeldCells[0]; c.Locks != 200 || c.Lost != 0 || c.Failures != 0 || c.ExtendsPerSec <= 0 || c.ClientCPU <= 0 || c.ServerCPU <= 0 {
		t.Errorf("held-locks: %+v; want 200 locks, none lost or failed, extensions and CPU measured; first error %q", c, res.Held[0].FirstError)
	}
	if res.Machine.RedisVersion == "" || res.Machine.GoVersion == "" {
		t.Errorf("machine not described: %+v", res.Machine)
	}
}

func TestSummarizeHeldTakesMediansAndSumsLosses(t *testing.T) {
	run := func(locks, rep int, client float64, lost int64) HeldRun {
		return HeldRun{Nodes: 5, Locks: locks, Repeat: rep, HeldFor: time.Second, ClientCPU: client, Lost: lost, ExtendsPerSec: float64(locks)}
	}
	cells := summarizeHeld([]HeldRun{
		run(10_000, 0, 0.3, 5), run(1_000, 0, 0.05, 0),
		run(10_000, 1, 0.1, 0), run(1_000, 1, 0.07, 0),
		run(10_000, 2, 0.2, 1), run(1_000, 2, 0.06, 0),
	})
	if len(cells) != 2 || cells[0].Locks != 1_000 || cells[1].Locks != 10_000 {
		t.Fatalf("cells %+v, want 1,000 then 10,000 locks", cells)
	}
	if c := cells[1]; c.ClientCPU != 0.2 || c.Lost != 6 || c.Repeats != 3 {
		t.Errorf("10,000 locks: %+v, want the median client CPU 0.2, 6 lost over 3 repeats", c)
	}
	res := &Results{Config: Config{HeldFor: time.Second}, HeldCells: cells}
	var text bytes.Buffer
	if err := res.WriteTable(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"held-locks", "10000", "0.200", "LOCKS LOST"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, text.String())
		}
	}
}
