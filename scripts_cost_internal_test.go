//go:build unix

package redlock

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/redistest"
)

// BenchmarkScriptServerCost compares the server's cost per call of the
// acquire-like scripts and the mutex's extend as this package runs them
// (the library's pieces in front) with the same files of an earlier tree,
// on one server in one run. Two figures: the server's CPU time per call
// (INFO cpu, main thread, user and system: the whole call, its reading and
// answering included; what a busy machine's preemption inflates least),
// and EVALSHA's own time per call (INFO commandstats, wall clock).
//
// The two forms run in short rounds, alternated before, after; after,
// before; … so that each round of one has a round of the other beside it
// in time. What counts is the ratio within each such pair: a machine
// shared with other work moves both rounds of a pair alike, and moves the
// rounds of a run by far more than the few per cent looked for. The line
// a script gives the median of those ratios, its 95% confidence interval
// (distribution-free: from the ratios' order statistics, so it takes no
// shape of the noise for granted) and their interquartile range; the
// medians and least rounds of each form's own figures are given too. A
// first round of each, not counted, warms the server's allocator and
// caches. The load average at the start says whether the machine was quiet
// (below 0.5); the pairing is what keeps a loaded one's figures usable,
// and the interval says how far.
//
//	mkdir -p /tmp/base && git archive <rev> lua | tar -x -C /tmp/base
//	REDLOCK_SCRIPT_COST_BASE=/tmp/base/lua go test -run '^$' -bench ScriptServerCost -benchtime 1x .
//
// REDLOCK_SCRIPT_COST_ROUNDS (pairs, default 41) and
// REDLOCK_SCRIPT_COST_CALLS (calls a round, default 2000) size the run;
// REDLOCK_SCRIPT_COST_ONLY=acquire.lua,extend.lua keeps only those
// scripts; REDLOCK_TEST_SERVER chooses the server build.
func BenchmarkScriptServerCost(b *testing.B) {
	base := os.Getenv("REDLOCK_SCRIPT_COST_BASE")
	if base == "" {
		b.Skip("REDLOCK_SCRIPT_COST_BASE names no folder of earlier lua/*.lua files to compare with (see the comment)")
	}
	rounds, calls := envInt(b, "REDLOCK_SCRIPT_COST_ROUNDS", 41), envInt(b, "REDLOCK_SCRIPT_COST_CALLS", 2000)
	var only []string
	if o := os.Getenv("REDLOCK_SCRIPT_COST_ONLY"); o != "" {
		only = strings.Split(o, ",")
	}
	load, _ := os.ReadFile("/proc/loadavg")
	b.Logf("load average at the start: %s", strings.TrimSpace(string(load)))
	cl := redistest.StartT(b, 1, redistest.Options{})
	rdb := cl.Clients()[0]
	ctx := context.Background()
	type variant struct {
		name, sha string
		us, cpu   []float64
	}
	for _, c := range costCases {
		if only != nil && !slices.Contains(only, c.file) {
			continue
		}
		old, err := os.ReadFile(filepath.Join(base, c.file))
		if err != nil {
			b.Fatal(err)
		}
		var now *script
		for _, s := range allScripts() {
			if s.file == c.file {
				now = s
			}
		}
		vs := []*variant{{name: "before"}, {name: "after"}}
		for i, src := range []string{string(old), now.src} {
			if vs[i].sha, err = rdb.ScriptLoad(ctx, src).Result(); err != nil {
				b.Fatal(err)
			}
		}
		round := func(v *variant) (cpuPerCall, usPerCall float64) {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			cpu0 := mainThreadCPU(b, rdb)
			for from := 0; from < calls; from += 100 {
				pipe := rdb.Pipeline()
				for i := from; i < min(from+100, calls); i++ {
					keys, argv, setup := c.call(i)
					for k, val := range setup {
						pipe.Set(ctx, k, val, 0)
					}
					pipe.EvalSha(ctx, v.sha, keys, argv...)
				}
				cmds, err := pipe.Exec(ctx)
				if err != nil {
					b.Fatalf("%s %s: %v", c.name, v.name, err)
				}
				if last := cmds[len(cmds)-1].(*redis.Cmd); !c.ok(last.Val()) {
					b.Fatalf("%s %s answered %v", c.name, v.name, last.Val())
				}
			}
			cpu := mainThreadCPU(b, rdb) - cpu0
			return float64(cpu.Nanoseconds()) / 1000 / float64(calls), evalshaMicros(b, rdb, calls)
		}
		for _, v := range vs { // warm-up, not counted
			round(v)
		}
		for r := range rounds {
			for j := range vs {
				v := vs[(r+j)%2]
				cpu, us := round(v)
				v.cpu = append(v.cpu, cpu)
				v.us = append(v.us, us)
			}
		}
		// One line a script: a benchmark's log keeps only its first lines.
		dc, dt := pairedChange(vs[0].cpu, vs[1].cpu), pairedChange(vs[0].us, vs[1].us)
		b.Logf("%-26s server CPU %6.3f -> %6.3f µs/call, paired %s; EVALSHA time %6.3f -> %6.3f µs/call, paired %s; least rounds' CPU %6.3f -> %6.3f %+5.1f%% (%d pairs of rounds of %d calls)",
			c.name, median(vs[0].cpu), median(vs[1].cpu), dc, median(vs[0].us), median(vs[1].us), dt,
			slices.Min(vs[0].cpu), slices.Min(vs[1].cpu), 100*(slices.Min(vs[1].cpu)/slices.Min(vs[0].cpu)-1), rounds, calls)
		b.ReportMetric(dc.median, strings.TrimSuffix(c.file, ".lua")+"-cpu-%")
	}
}

// change is how the rounds of one form compare with those of another
// beside them in time: the ratios after/before per pair, in per cent
// above 1.
type change struct {
	median, lo, hi float64 // lo, hi: the median's 95% confidence interval
	q1, q3         float64 // the interquartile range
}

func pairedChange(before, after []float64) change {
	d := make([]float64, len(before))
	for i := range before {
		d[i] = 100 * (after[i]/before[i] - 1)
	}
	slices.Sort(d)
	n := len(d)
	// The k-th smallest and k-th largest of n draws bracket the median
	// with the binomial probability of k to n-k draws below it: about 95%
	// for k = (n - 1.96√n)/2 (rounded down, so at least 95%).
	k := max(0, int((float64(n)-1.96*math.Sqrt(float64(n)))/2))
	return change{median: median(d), lo: d[k], hi: d[n-1-k], q1: quantile(d, 0.25), q3: quantile(d, 0.75)}
}

func (c change) String() string {
	return fmt.Sprintf("%+5.1f%% [95%% CI %+5.1f, %+5.1f; IQR %+5.1f, %+5.1f]", c.median, c.lo, c.hi, c.q1, c.q3)
}

// quantile is the q-th quantile of the sorted s, between its neighbours.
func quantile(s []float64, q float64) float64 {
	x := q * float64(len(s)-1)
	i := int(x)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (x-float64(i))*(s[i+1]-s[i])
}

// costCase is a script called many times, each call on keys of its own.
type costCase struct {
	name, file string
	// call gives the i-th call's keys and arguments, and the keys to set
	// before it (a held lock to extend)
	call func(i int) (keys []string, argv []any, setup map[string]string)
	ok   func(reply any) bool // whether the call did what it measures
}

func won(reply any) bool {
	r, ok := reply.([]any)
	return ok && len(r) > 0 && r[0] == int64(1)
}

var costCases = []costCase{
	{"mutex acquire, fenced", "acquire.lua", func(i int) ([]string, []any, map[string]string) {
		k := fmt.Sprintf("{c%d}:lock", i)
		return []string{k, k + ":fence"}, []any{"owner", 30000, 1000 + i, 0}, nil
	}, won},
	{"mutex extend", "extend.lua", func(i int) ([]string, []any, map[string]string) {
		k := fmt.Sprintf("{c%d}:lock", i)
		return []string{k, k + ":fence"}, []any{"owner", 30000, 5, 0}, map[string]string{k: "owner"}
	}, won},
	{"rw write acquire, fenced", "rw_write_acquire.lua", func(i int) ([]string, []any, map[string]string) {
		k := fmt.Sprintf("{c%d}:lock", i)
		return []string{k, k + ":fence", k + ":readers", k + ":intents"}, []any{"owner", 30000, 1000 + i, 0, "", 0}, nil
	}, won},
	{"rw read acquire, fenced", "rw_read_acquire.lua", func(i int) ([]string, []any, map[string]string) {
		k := fmt.Sprintf("{c%d}:lock", i)
		return []string{k, k + ":fence", k + ":readers", k + ":intents"}, []any{"owner", 30000, 1000 + i, 0}, nil
	}, won},
	{"semaphore acquire K=2", "semaphore_acquire.lua", func(i int) ([]string, []any, map[string]string) {
		k := fmt.Sprintf("{c%d}:sem", i)
		return []string{k + ":0", k + ":1", k + ":0:fence", k + ":1:fence", k + ":k"}, []any{"owner", 30000, 1000 + i, 0, 0, 2}, nil
	}, won},
	{"fair take, free key", "fair_queue.lua", func(i int) ([]string, []any, map[string]string) {
		k := fmt.Sprintf("{c%d}:lock", i)
		return []string{k, k + ":fence", k + ":queue", k + ":queue:expiry", k + ":queue:settings", k + ":grant"},
			[]any{"take", "owner", 1, 30000, 0, 1000 + i, 0, 60000, k + ":released", 0, 1}, nil
	}, won},
}

// evalshaMicros is EVALSHA's time per call since the stats were reset, in
// µs, from its total (the rounded usec_per_call loses digits).
func evalshaMicros(b *testing.B, rdb redis.UniversalClient, calls int) float64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		fields := map[string]string{}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			fields[k] = v
		}
		n, _ := strconv.Atoi(fields["calls"])
		usec, _ := strconv.ParseFloat(fields["usec"], 64)
		if n != calls || fields["failed_calls"] != "0" {
			b.Fatalf("evalsha stats %q after %d calls", rest, calls)
		}
		return usec / float64(n)
	}
	b.Fatalf("no evalsha in %q", info)
	return 0
}

// mainThreadCPU is the CPU time the server's main thread, the one that
// runs the scripts, used so far.
func mainThreadCPU(b *testing.B, rdb redis.UniversalClient) time.Duration {
	return infoCPU(b, rdb, "used_cpu_sys_main_thread", "used_cpu_user_main_thread")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a whole number of at least 1", name, v)
	}
	return n
}
