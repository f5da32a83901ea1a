package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config selects the cells of a matrix run. The zero value runs the whole
// matrix: every workload and contender on 1, 3, 5 and 7 nodes, 3 repeats of
// 2s per run.
type Config struct {
	// Nodes are the cluster sizes; default 1, 3, 5, 7. Each size gets its own
	// freshly started redis-server processes.
	Nodes []int `json:"nodes"`
	// Workloads by name (see AllWorkloads); default all.
	Workloads []string `json:"workloads"`
	// Contenders by name (see AllContenders); default all.
	Contenders []string `json:"contenders"`
	// Repeats of every cell, interleaved: repeat r of every cell runs
	// before repeat r+1 of any, so a slow moment of the machine hits
	// every contender alike. Default 3.
	Repeats int `json:"repeats"`
	// Duration of one run of one contender in one cell; default 2s.
	Duration time.Duration `json:"duration_ns"`
	// MaxOps caps the operations of one run; default 1,000,000.
	MaxOps int64 `json:"max_ops"`
	// Hold is how long a worker of the contended workload keeps the lock
	// before releasing it; default 1ms.
	Hold time.Duration `json:"hold_ns"`
	// SlowLatency is the delay the slow-node workload adds to node 0's
	// replies, in whole milliseconds; default 5ms.
	SlowLatency time.Duration `json:"slow_latency_ns"`
	// HeldCounts are the numbers of locks the held-locks workload holds;
	// default DefaultHeldCounts.
	HeldCounts []int `json:"held_counts,omitempty"`
	// HeldFor is how long the held-locks workload measures the holding;
	// default DefaultHeldFor.
	HeldFor time.Duration `json:"held_for_ns,omitempty"`
	// HeldLean makes the held locks renew with redlock.WithLeanRenewal
	// instead of WithAutoExtend.
	HeldLean bool `json:"held_lean,omitempty"`
	// Progress, if set, gets one line per run as the matrix goes.
	Progress io.Writer `json:"-"`
}

// Matrix defaults.
const (
	DefaultRepeats     = 3
	DefaultDuration    = 2 * time.Second
	DefaultMaxOps      = 1_000_000
	DefaultSlowLatency = 5 * time.Millisecond
	DefaultHold        = time.Millisecond
)

// DefaultNodes are the cluster sizes a zero Config runs.
var DefaultNodes = []int{1, 3, 5, 7}

// maxNodes bounds a cluster size: every node is a local redis-server process.
const maxNodes = 15

// normalize fills defaults and rejects bad values, naming them.
func (c Config) normalize() (Config, error) {
	if len(c.Nodes) == 0 {
		c.Nodes = slices.Clone(DefaultNodes)
	}
	for _, n := range c.Nodes {
		if n < 1 || n > maxNodes {
			return c, fmt.Errorf("bench: node count %d: must be between 1 and %d", n, maxNodes)
		}
	}
	var err error
	var workloads []string
	for _, name := range c.Workloads {
		if group, ok := workloadGroups[name]; ok {
			workloads = append(workloads, group...)
		} else {
			workloads = append(workloads, name)
		}
	}
	if c.Workloads, err = selectNames("workload", workloads, AllWorkloads); err != nil {
		return c, err
	}
	if c.Contenders, err = selectNames("contender", c.Contenders, AllContenders); err != nil {
		return c, err
	}
	for _, err := range []error{
		orDefault("repeats", &c.Repeats, DefaultRepeats),
		orDefault("duration", &c.Duration, DefaultDuration),
		orDefault("max ops", &c.MaxOps, DefaultMaxOps),
		orDefault("hold", &c.Hold, DefaultHold),
		orDefault("held-for", &c.HeldFor, DefaultHeldFor),
	} {
		if err != nil {
			return c, err
		}
	}
	if len(c.HeldCounts) == 0 {
		c.HeldCounts = slices.Clone(DefaultHeldCounts)
	}
	for _, locks := range c.HeldCounts {
		if locks < 1 {
			return c, fmt.Errorf("bench: held lock count %d: must be positive", locks)
		}
	}
	switch {
	case c.SlowLatency < 0 || c.SlowLatency%time.Millisecond != 0:
		return c, fmt.Errorf("bench: slow latency %v: must be a positive whole number of milliseconds", c.SlowLatency)
	case c.SlowLatency == 0:
		c.SlowLatency = DefaultSlowLatency
	}
	return c, nil
}

// orDefault sets *value to def if it is zero, and refuses a negative one
// naming field.
func orDefault[T int | int64 | time.Duration](field string, value *T, def T) error {
	switch {
	case *value < 0:
		return fmt.Errorf("bench: %s %v: must be positive", field, *value)
	case *value == 0:
		*value = def
	}
	return nil
}

// selectNames checks a selection against the known names and returns it in
// the order of known, so tables always list rows the same way.
func selectNames(kind string, chosen, known []string) ([]string, error) {
	if len(chosen) == 0 {
		return slices.Clone(known), nil
	}
	for _, name := range chosen {
		if !slices.Contains(known, name) {
			return nil, fmt.Errorf("bench: unknown %s %q (known: %s)", kind, name, strings.Join(known, ", "))
		}
	}
	var out []string
	for _, name := range known {
		if slices.Contains(chosen, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// Results is everything one matrix run measured: every single run, and the
// medians per cell that the table shows.
type Results struct {
	Machine Machine   `json:"machine"`
	Config  Config    `json:"config"`
	Started time.Time `json:"started"`
	Runs    []Run     `json:"runs"`
	Cells   []Cell    `json:"cells"`
	// Held and HeldCells are the held-locks workload's runs and medians.
	Held      []HeldRun  `json:"held,omitempty"`
	HeldCells []HeldCell `json:"held_cells,omitempty"`
}

// Machine describes where the figures were taken; they mean little without it.
type Machine struct {
	GoVersion    string `json:"go_version"`
	OS           string `json:"os"`
	Arch         string `json:"arch"`
	CPUs         int    `json:"cpus"`
	CPUModel     string `json:"cpu_model,omitempty"`
	RedisVersion string `json:"redis_version"`         // "valkey 9.1.2", "redis 7.0.15"; a bare version in files written before
	LoadBefore   string `json:"load_before,omitempty"` // /proc/loadavg when the matrix started
	LoadAfter    string `json:"load_after,omitempty"`  // and when it ended
}

// Figures are what one run measures, and what a cell reports as the
// medians over its runs.
type Figures struct {
	// OpsPerSec is acquire+release pairs over wall time; for the fencing
	// workloads, over the time spent inside timed operations (their
	// seeding is not timed).
	OpsPerSec   float64       `json:"ops_per_sec"`
	AcquireP50  time.Duration `json:"acquire_p50_ns"`
	AcquireP99  time.Duration `json:"acquire_p99_ns"`
	ReleaseP50  time.Duration `json:"release_p50_ns"`
	HandoffP50  time.Duration `json:"handoff_p50_ns,omitempty"`
	HandoffP99  time.Duration `json:"handoff_p99_ns,omitempty"`
	AllocsPerOp float64       `json:"allocs_per_op"`
	// ClientCPU and ServerCPU are the CPU time this process and all the
	// nodes together used during the run, per operation.
	ClientCPU time.Duration `json:"client_cpu_per_op_ns"`
	ServerCPU time.Duration `json:"server_cpu_per_op_ns"`
	// RTT is the p50 of one parallel PING to every node, waiting for a
	// majority, measured just before the repeat: the unit hand-offs are
	// counted in.
	RTT time.Duration `json:"rtt_ns"`
}

// Run is one contender in one cell, once.
type Run struct {
	Nodes      int    `json:"nodes"`
	Workload   string `json:"workload"`
	Contender  string `json:"contender"`
	Repeat     int    `json:"repeat"`
	Ops        int64  `json:"ops"` // completed acquire+release pairs
	Failures   int64  `json:"failures"`
	Violations int64  `json:"violations"` // two holders at once, or a token that did not increase
	FirstError string `json:"first_error,omitempty"`
	Figures
}

// Cell is the median over the repeats of one contender in one cell, with the
// ratios the targets are stated in. A ratio of 0 means not
// applicable (no such baseline in this cell).
type Cell struct {
	Nodes      int    `json:"nodes"`
	Workload   string `json:"workload"`
	Contender  string `json:"contender"`
	Repeats    int    `json:"repeats"`
	Failures   int64  `json:"failures"`   // summed over repeats
	Violations int64  `json:"violations"` // summed over repeats
	Figures
	// VsRedsync and VsFloor are OpsPerSec over that of redsync (default
	// options) and of the raw floor in the same cell.
	VsRedsync float64 `json:"vs_redsync,omitempty"`
	VsFloor   float64 `json:"vs_floor,omitempty"`
	// VsRueidislock is OpsPerSec over rueidislock's in the same cell (which
	// runs on one node of the cluster: see rueidislockContender).
	VsRueidislock float64 `json:"vs_rueidislock,omitempty"`
	// VsNoFault (slow-node only) is AcquireP50 over the same contender's
	// uncontended-1 AcquireP50 on the same nodes.
	VsNoFault float64 `json:"vs_no_fault,omitempty"`
	// VsNoIdle and ServerCPUVsNoIdle (idle-subscribers only) are OpsPerSec
	// and ServerCPU over those of the same contender with no idle client.
	VsNoIdle          float64 `json:"vs_no_idle,omitempty"`
	ServerCPUVsNoIdle float64 `json:"server_cpu_vs_no_idle,omitempty"`
	// HandoffRTTs (contended only) is HandoffP50 in units of RTT.
	HandoffRTTs float64 `json:"handoff_rtts,omitempty"`
}

// RunMatrix starts the clusters, runs every selected cell cfg.Repeats times
// interleaved, and returns every run with the medians. It stops every
// process it started before returning, also on error. A run whose contender
// fails is recorded (Failures, FirstError), not fatal; only setting up the
// nodes or the contenders is.
func RunMatrix(ctx context.Context, cfg Config) (*Results, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	res := &Results{Config: cfg, Started: time.Now(), Machine: describeMachine()}
	for _, n := range cfg.Nodes {
		if err := runClusterSize(ctx, cfg, n, res); err != nil {
			return nil, err
		}
	}
	res.Machine.LoadAfter = loadAverage()
	res.Cells = summarize(res.Runs)
	res.HeldCells = summarizeHeld(res.Held)
	return res, nil
}

func runClusterSize(ctx context.Context, cfg Config, n int, res *Results) (err error) {
	c, err := startCluster(ctx, n, cfg.Contenders, cfg.SlowLatency)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.stop()) }()
	if res.Machine.RedisVersion == "" {
		res.Machine.RedisVersion = redisVersion(ctx, c.direct[0])
	}
	for rep := range cfg.Repeats {
		rtt, err := probeRTT(ctx, c.direct)
		if err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		for _, name := range cfg.Workloads {
			w := workloadByName(name)
			if w.held {
				if err := runHeldCounts(ctx, cfg, c, n, rep, res); err != nil {
					return err
				}
				continue
			}
			contenders := c.contenders(w.slow)
			view := c.direct
			if w.slow {
				view = c.slow
			}
			// Rotate the order each repeat so no contender always runs first
			// (right after a cluster start or another workload).
			for i := range contenders {
				contender := contenders[(i+rep)%len(contenders)]
				if !w.runsOn(contender.Name(), n) {
					continue
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				run, err := runOnce(ctx, cfg, w, contender, view, c.direct, n, rep)
				if err != nil {
					return err
				}
				run.RTT = rtt
				res.Runs = append(res.Runs, run)
				if cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "nodes=%d %-14s %-16s rep %d: %8.0f ops/s  acquire p50 %v  allocs/op %.0f  failures %d\n",
						n, w.name, contender.Name(), rep+1, run.OpsPerSec, run.AcquireP50.Round(time.Microsecond), run.AllocsPerOp, run.Failures)
				}
			}
		}
	}
	return nil
}

// runHeldCounts runs the held-locks workload once for every count, if this
// library is among the selected contenders.
func runHeldCounts(ctx context.Context, cfg Config, c *cluster, n, rep int, res *Results) error {
	if !slices.Contains(cfg.Contenders, ContenderRedlock) {
		return nil
	}
	for _, locks := range cfg.HeldCounts {
		run, err := runHeld(ctx, c.direct, n, locks, rep, cfg.HeldFor, cfg.HeldLean)
		if err != nil {
			return fmt.Errorf("%s, %d locks on %d nodes: %w", WorkloadHeldLocks, locks, n, err)
		}
		res.Held = append(res.Held, run)
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "nodes=%d %-14s %6d locks   rep %d: client %.3f CPU/s  servers %.3f CPU/s  %.0f extends/s  lost %d  failures %d\n",
				n, WorkloadHeldLocks, locks, rep+1, run.ClientCPU, run.ServerCPU, run.ExtendsPerSec, run.Lost, run.Failures)
			if run.Lost != 0 {
				fmt.Fprintf(cfg.Progress, "    took them all in %v; first loss %v after the first acquire; first failed extension: %s\n",
					run.AcquireAll.Round(time.Millisecond), run.FirstLoss.Round(time.Millisecond), run.FirstExtendError)
			}
		}
	}
	return nil
}

// runOnce warms the contender up on keys of its own, then runs one measured
// run and counts the allocations the whole process made during it and the
// CPU time it and the servers (reached directly) used. The idle clients of
// an idle-subscribers workload are made before and closed after, untimed.
func runOnce(ctx context.Context, cfg Config, w workload, c Contender, view, servers []redis.UniversalClient, n, rep int) (_ Run, err error) {
	prefix := fmt.Sprintf("bench:n%d:%s:%s:r%d", n, w.name, c.Name(), rep)
	if w.idle > 0 {
		maker, ok := c.(IdleMaker)
		if !ok {
			return Run{}, fmt.Errorf("workload %s needs idle clients, %s cannot make them", w.name, c.Name())
		}
		stop, err := maker.StartIdle(ctx, w.idle, prefix+":idle")
		if err != nil {
			return Run{}, fmt.Errorf("%s/%s: %w", w.name, c.Name(), err)
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	if err := warmUp(ctx, w, c, view, prefix, cfg.Hold); err != nil {
		return Run{}, err
	}
	runtime.GC()
	var before, after runtime.MemStats
	cpuBefore, err := sampleCPU(ctx, servers)
	if err != nil {
		return Run{}, err
	}
	runtime.ReadMemStats(&before)
	stats, err := execute(ctx, w, c, view, prefix, budget{ops: cfg.MaxOps, until: time.Now().Add(cfg.Duration), hold: cfg.Hold})
	runtime.ReadMemStats(&after)
	if err != nil {
		return Run{}, err
	}
	cpuAfter, err := sampleCPU(ctx, servers)
	if err != nil {
		return Run{}, err
	}
	run := Run{
		Nodes: n, Workload: w.name, Contender: c.Name(), Repeat: rep,
		Ops: stats.ops, Failures: stats.failures, Violations: stats.violations,
		Figures: Figures{
			AcquireP50: stats.acquire.quantile(0.5),
			AcquireP99: stats.acquire.quantile(0.99),
			ReleaseP50: stats.release.quantile(0.5),
			HandoffP50: stats.handoff.quantile(0.5),
			HandoffP99: stats.handoff.quantile(0.99),
		},
	}
	if stats.firstErr != nil {
		run.FirstError = stats.firstErr.Error()
	}
	if stats.ops > 0 {
		run.AllocsPerOp = float64(after.Mallocs-before.Mallocs) / float64(stats.ops)
		run.ClientCPU = (cpuAfter.client - cpuBefore.client) / time.Duration(stats.ops)
		run.ServerCPU = (cpuAfter.servers - cpuBefore.servers) / time.Duration(stats.ops)
		elapsed := stats.elapsed
		if w.fencing {
			elapsed = stats.busy
		}
		run.OpsPerSec = float64(stats.ops) / elapsed.Seconds()
	}
	return run, nil
}

// probeRTT measures what one parallel round trip to a majority costs on this
// machine right now: the unit a hand-off latency is judged in.
func probeRTT(ctx context.Context, nodes []redis.UniversalClient) (time.Duration, error) {
	const rounds = 200
	quorum := len(nodes)/2 + 1
	var h histogram
	answers := make(chan error, len(nodes))
	for range rounds {
		start := time.Now()
		for _, node := range nodes {
			go func() { answers <- node.Ping(ctx).Err() }()
		}
		var firstErr error
		for i := range nodes {
			if err := <-answers; err != nil && firstErr == nil {
				firstErr = err
			}
			if i+1 == quorum {
				h.record(time.Since(start))
			}
		}
		if firstErr != nil {
			return 0, fmt.Errorf("probe round trip: %w", firstErr)
		}
	}
	return h.quantile(0.5), nil
}

func describeMachine() Machine {
	m := Machine{
		GoVersion:  runtime.Version(),
		OS:         runtime.GOOS,
		Arch:       runtime.GOARCH,
		CPUs:       runtime.NumCPU(),
		LoadBefore: loadAverage(),
	}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(raw)) {
			if key, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(key) == "model name" {
				m.CPUModel = strings.TrimSpace(value)
				break
			}
		}
	}
	return m
}

// loadAverage is the first three fields of /proc/loadavg, "" where there is
// none: the figures are only comparable when the machine was quiet.
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(raw))
	return strings.Join(fields[:min(3, len(fields))], " ")
}

// redisVersion is the server's name and version, "redis 7.0.15" or
// "valkey 9.1.2": Valkey reports the Redis version it is compatible with
// (7.2.4) as redis_version and its own as valkey_version.
func redisVersion(ctx context.Context, node redis.UniversalClient) string {
	info, err := node.Info(ctx, "server").Result()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	version := "redis unknown"
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "valkey_version:"); ok {
			return "valkey " + v
		}
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			version = "redis " + v
		}
	}
	return version
}

// summarize takes the median of every figure over the repeats of each cell
// and computes the ratios against the baselines of the same cell.
func summarize(runs []Run) []Cell {
	type cellKey struct {
		nodes               int
		workload, contender string
	}
	groups := map[cellKey][]Run{}
	var order []cellKey
	for _, r := range runs {
		k := cellKey{r.Nodes, r.Workload, r.Contender}
		if _, seen := groups[k]; !seen {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	rank := func(list []string, name string) int { return slices.Index(list, name) }
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.nodes != b.nodes {
			return a.nodes < b.nodes
		}
		if a.workload != b.workload {
			return rank(AllWorkloads, a.workload) < rank(AllWorkloads, b.workload)
		}
		return rank(AllContenders, a.contender) < rank(AllContenders, b.contender)
	})

	cells := make([]Cell, 0, len(order))
	index := map[cellKey]int{}
	for _, k := range order {
		g := groups[k]
		c := Cell{Nodes: k.nodes, Workload: k.workload, Contender: k.contender, Repeats: len(g), Figures: medians(g)}
		for _, r := range g {
			c.Failures += r.Failures
			c.Violations += r.Violations
		}
		if workloadByName(c.Workload).contended && c.RTT > 0 {
			c.HandoffRTTs = float64(c.HandoffP50) / float64(c.RTT)
		}
		index[k] = len(cells)
		cells = append(cells, c)
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	for i := range cells {
		c := &cells[i]
		if j, ok := index[cellKey{c.Nodes, c.Workload, ContenderRedsync}]; ok {
			c.VsRedsync = ratio(c.OpsPerSec, cells[j].OpsPerSec)
		}
		if j, ok := index[cellKey{c.Nodes, c.Workload, ContenderFloor}]; ok {
			c.VsFloor = ratio(c.OpsPerSec, cells[j].OpsPerSec)
		}
		if workloadByName(c.Workload).idleSubs {
			if j, ok := index[cellKey{c.Nodes, WorkloadIdleSubscribers0, c.Contender}]; ok && c.Workload != WorkloadIdleSubscribers0 {
				c.VsNoIdle = ratio(c.OpsPerSec, cells[j].OpsPerSec)
				c.ServerCPUVsNoIdle = ratio(float64(c.ServerCPU), float64(cells[j].ServerCPU))
			}
		}
		if j, ok := index[cellKey{c.Nodes, c.Workload, ContenderRueidislock}]; ok {
			c.VsRueidislock = ratio(c.OpsPerSec, cells[j].OpsPerSec)
		}
		if c.Workload == WorkloadSlowNode {
			if j, ok := index[cellKey{c.Nodes, WorkloadUncontended1, c.Contender}]; ok {
				c.VsNoFault = ratio(float64(c.AcquireP50), float64(cells[j].AcquireP50))
			}
		}
	}
	return cells
}

// medians takes the median of every figure over the runs, each on its own.
func medians(runs []Run) Figures {
	return Figures{
		OpsPerSec:   median(runs, func(r Run) float64 { return r.OpsPerSec }),
		AcquireP50:  medianDuration(runs, func(r Run) time.Duration { return r.AcquireP50 }),
		AcquireP99:  medianDuration(runs, func(r Run) time.Duration { return r.AcquireP99 }),
		ReleaseP50:  medianDuration(runs, func(r Run) time.Duration { return r.ReleaseP50 }),
		HandoffP50:  medianDuration(runs, func(r Run) time.Duration { return r.HandoffP50 }),
		HandoffP99:  medianDuration(runs, func(r Run) time.Duration { return r.HandoffP99 }),
		AllocsPerOp: median(runs, func(r Run) float64 { return r.AllocsPerOp }),
		ClientCPU:   medianDuration(runs, func(r Run) time.Duration { return r.ClientCPU }),
		ServerCPU:   medianDuration(runs, func(r Run) time.Duration { return r.ServerCPU }),
		RTT:         medianDuration(runs, func(r Run) time.Duration { return r.RTT }),
	}
}

// median is the median of field over runs (of a matrix cell or a
// held-locks size).
func median[R any](runs []R, field func(R) float64) float64 {
	values := make([]float64, len(runs))
	for i, r := range runs {
		values[i] = field(r)
	}
	slices.Sort(values)
	mid := len(values) / 2
	if len(values)%2 == 1 {
		return values[mid]
	}
	return (values[mid-1] + values[mid]) / 2
}

func medianDuration(runs []Run, field func(Run) time.Duration) time.Duration {
	return time.Duration(median(runs, func(r Run) float64 { return float64(field(r)) }))
}
