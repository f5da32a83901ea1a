package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
	"github.com/redis/go-redis/v9"
)

// ShardsConfig is the capacity comparison of nodes that are Redis Clusters
// against standalone nodes: K nodes of each layout, the same workload on
// each, the runs interleaved.
type ShardsConfig struct {
	Nodes    int   // K, the number of nodes
	Shards   []int // masters per Cluster node, one layout each; 0 is K standalone masters
	Workers  int   // each takes and releases locks of its own names, as uncontended-16 does
	Names    int   // distinct lock names per worker, cycled: they spread over the slots
	Duration time.Duration
	Repeats  int
	Progress io.Writer // a line per run, if not nil
}

// ShardsRow is one layout's medians over the repeats.
type ShardsRow struct {
	Shards    int // masters per node; 0: standalone
	OpsPerSec float64
	// ServerCPUPerOp is the CPU time of every master of every node per
	// acquire+release; ClientCPUPerOp this process's.
	ServerCPUPerOp, ClientCPUPerOp time.Duration
	// Scripts are the script runs (EVALSHA and EVAL) each master served,
	// node by node, summed over the repeats: how evenly the names spread.
	Scripts [][]int64
}

// RunShards starts K nodes of every layout in cfg.Shards (a Cluster of S
// masters without replicas per node, or a standalone master for S = 0) and
// runs the workload on each in turn, Repeats times, interleaved.
func RunShards(ctx context.Context, cfg ShardsConfig) ([]ShardsRow, error) {
	if cfg.Nodes < 1 || len(cfg.Shards) == 0 || cfg.Workers < 1 || cfg.Names < 1 || cfg.Repeats < 1 || cfg.Duration <= 0 {
		return nil, fmt.Errorf("shards: need nodes, shards, workers, names and repeats of at least 1 and a duration: %+v", cfg)
	}
	layouts := make([]*shardLayout, len(cfg.Shards))
	defer func() {
		for _, l := range layouts {
			if l != nil {
				_ = l.stop()
			}
		}
	}()
	for i, s := range cfg.Shards {
		l, err := startShardLayout(ctx, cfg.Nodes, s)
		if err != nil {
			return nil, err
		}
		layouts[i] = l
	}
	runs := make([][]shardRun, len(layouts))
	for rep := range cfg.Repeats {
		for i, l := range layouts {
			r, err := l.run(ctx, cfg, rep)
			if err != nil {
				return nil, fmt.Errorf("%d nodes of %s: %w", cfg.Nodes, layoutName(l.shards), err)
			}
			runs[i] = append(runs[i], r)
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "shards: %d nodes of %s, run %d: %.0f ops/s, servers %v/op, %d failed attempts\n",
					cfg.Nodes, layoutName(l.shards), rep+1, r.opsPerSec, r.serverPerOp, r.failed)
			}
		}
	}
	rows := make([]ShardsRow, len(layouts))
	for i, l := range layouts {
		row := ShardsRow{Shards: l.shards, Scripts: make([][]int64, cfg.Nodes)}
		row.OpsPerSec = medianOf(runs[i], func(r shardRun) float64 { return r.opsPerSec })
		row.ServerCPUPerOp = time.Duration(medianOf(runs[i], func(r shardRun) float64 { return float64(r.serverPerOp) }))
		row.ClientCPUPerOp = time.Duration(medianOf(runs[i], func(r shardRun) float64 { return float64(r.clientPerOp) }))
		for n := range cfg.Nodes {
			row.Scripts[n] = make([]int64, len(l.masters[n]))
			for _, r := range runs[i] {
				for m, calls := range r.scripts[n] {
					row.Scripts[n][m] += calls
				}
			}
		}
		rows[i] = row
	}
	return rows, nil
}

// layoutName names a layout for tables: "standalone", "cluster of 3".
func layoutName(shards int) string {
	if shards == 0 {
		return "standalone"
	}
	return fmt.Sprintf("cluster of %d", shards)
}

// shardLayout is K nodes of one layout and a lock client over them.
type shardLayout struct {
	shards   int
	stops    []func() error
	clients  []redis.UniversalClient // one per node, as the lock client sees it
	masters  [][]*redis.Client       // per node, every master, for INFO
	lockOver *redlock.Client
}

func startShardLayout(ctx context.Context, k, shards int) (*shardLayout, error) {
	l := &shardLayout{shards: shards}
	if shards == 0 {
		cl, err := redistest.Start(k, redistest.Options{})
		if err != nil {
			return nil, fmt.Errorf("start %d standalone masters: %w", k, err)
		}
		l.stops = append(l.stops, cl.Stop)
		l.clients = cl.Clients()
		for _, s := range cl.Servers {
			l.masters = append(l.masters, []*redis.Client{s.Client()})
		}
	} else {
		for range k {
			rc, err := redistest.StartRedisCluster(shards, 0, redistest.Options{})
			if err != nil {
				return nil, errors.Join(fmt.Errorf("start a cluster of %d masters: %w", shards, err), l.stop())
			}
			l.stops = append(l.stops, rc.Stop)
			cc := rc.ClusterClient()
			l.stops = append(l.stops, cc.Close)
			l.clients = append(l.clients, cc)
			var ms []*redis.Client
			for _, sh := range rc.Shards {
				ms = append(ms, sh.Master.Client())
			}
			l.masters = append(l.masters, ms)
		}
	}
	c, err := redlock.New(l.clients, redlock.Options{RestartGrace: redlock.NoRestartGrace, AllowNoFaultTolerance: len(l.clients) < 3})
	if err != nil {
		return nil, errors.Join(err, l.stop())
	}
	l.lockOver = c
	if err := checkVoting(ctx, c); err != nil {
		return nil, errors.Join(err, l.stop())
	}
	return l, nil
}

func (l *shardLayout) stop() error {
	var errs []error
	if l.lockOver != nil {
		errs = append(errs, l.lockOver.Close())
	}
	for i := len(l.stops) - 1; i >= 0; i-- {
		errs = append(errs, l.stops[i]())
	}
	return errors.Join(errs...)
}

// shardRun is one run's figures.
type shardRun struct {
	opsPerSec                float64
	serverPerOp, clientPerOp time.Duration
	scripts                  [][]int64 // per node, per master
	failed                   int64     // attempts that failed (counted in no figure)
}

// run runs the workload once: every worker takes and releases its own names
// in turn until the duration is up.
func (l *shardLayout) run(ctx context.Context, cfg ShardsConfig, rep int) (shardRun, error) {
	var r shardRun
	var all []redis.UniversalClient
	for _, ms := range l.masters {
		for _, m := range ms {
			all = append(all, m)
		}
	}
	scriptsBefore, err := l.scriptCalls(ctx)
	if err != nil {
		return r, err
	}
	before, err := sampleCPU(ctx, all)
	if err != nil {
		return r, err
	}
	var ops, failed atomic.Int64
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Go(func() {
			for i := 0; runCtx.Err() == nil; i++ {
				name := fmt.Sprintf("cap-%d-%d-%d", rep, w, i%cfg.Names)
				lock, err := l.lockOver.TryAcquire(ctx, name)
				if err == nil {
					err = lock.Release(ctx)
				}
				if err != nil {
					// A node too slow for its timeout on a loaded machine: the
					// attempt counts as no operation, and the run goes on.
					failed.Add(1)
					continue
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	r.failed = failed.Load()
	after, err := sampleCPU(ctx, all)
	if err != nil {
		return r, err
	}
	scriptsAfter, err := l.scriptCalls(ctx)
	if err != nil {
		return r, err
	}
	n := ops.Load()
	if n == 0 || r.failed > n/10 {
		return r, fmt.Errorf("%d operations completed, %d failed: too few to measure", n, r.failed)
	}
	r.opsPerSec = float64(n) / elapsed.Seconds()
	r.serverPerOp = (after.servers - before.servers) / time.Duration(n)
	r.clientPerOp = (after.client - before.client) / time.Duration(n)
	r.scripts = make([][]int64, len(scriptsAfter))
	for i := range scriptsAfter {
		r.scripts[i] = make([]int64, len(scriptsAfter[i]))
		for m := range scriptsAfter[i] {
			r.scripts[i][m] = scriptsAfter[i][m] - scriptsBefore[i][m]
		}
	}
	return r, nil
}

// scriptCalls reads, per node and master, how many scripts the master has
// run (INFO commandstats: evalsha and eval).
func (l *shardLayout) scriptCalls(ctx context.Context) ([][]int64, error) {
	out := make([][]int64, len(l.masters))
	for i, ms := range l.masters {
		for _, m := range ms {
			info, err := m.Info(ctx, "commandstats").Result()
			if err != nil {
				return nil, fmt.Errorf("INFO commandstats of %s: %w", m.Options().Addr, err)
			}
			out[i] = append(out[i], commandCalls(info, "evalsha")+commandCalls(info, "eval"))
		}
	}
	return out, nil
}

// commandCalls reads the calls of cmd from an INFO commandstats reply
// ("cmdstat_evalsha:calls=12,usec=...").
func commandCalls(info, cmd string) int64 {
	for line := range strings.Lines(info) {
		stats, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, field := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return 0
}

// medianOf is the median of field over runs.
func medianOf(runs []shardRun, field func(shardRun) float64) float64 {
	vals := make([]float64, len(runs))
	for i, r := range runs {
		vals[i] = field(r)
	}
	slices.Sort(vals)
	return vals[len(vals)/2]
}

// WriteShardsTable prints the layouts side by side: ops/s and CPU per
// operation against the standalone layout, and each node's script runs per
// master as shares of the node's total.
func WriteShardsTable(w io.Writer, rows []ShardsRow) {
	var base *ShardsRow
	for i := range rows {
		if rows[i].Shards == 0 {
			base = &rows[i]
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODES ARE\tOPS/S\tVS STANDALONE\tSERVER CPU/OP\tCLIENT CPU/OP\tSCRIPTS PER MASTER, EACH NODE (share of the node's)")
	for _, r := range rows {
		ratio := "-"
		if base != nil && base.OpsPerSec > 0 {
			ratio = fmt.Sprintf("%.2fx", r.OpsPerSec/base.OpsPerSec)
		}
		var nodes []string
		for _, masters := range r.Scripts {
			var total int64
			for _, c := range masters {
				total += c
			}
			parts := make([]string, len(masters))
			for m, c := range masters {
				parts[m] = fmt.Sprintf("%d (%.0f%%)", c, 100*float64(c)/float64(max(total, 1)))
			}
			nodes = append(nodes, strings.Join(parts, " / "))
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%v\t%v\t%s\n", layoutName(r.Shards), r.OpsPerSec, ratio,
			r.ServerCPUPerOp.Round(100*time.Nanosecond), r.ClientCPUPerOp.Round(100*time.Nanosecond), strings.Join(nodes, "; "))
	}
	tw.Flush()
}
