package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The go test benchmarks run the matrix's workloads with b.N operations, for
// -benchmem allocation counts and for -cpuprofile/-memprofile:
//
//	go test -run '^$' -bench 'Uncontended1/nodes=5/' -benchmem
//	go test -run '^$' -bench 'Uncontended1/nodes=5/redlock$' -benchmem -cpuprofile cpu.prof -memprofile mem.prof
//
// ns/op is wall time over b.N, so for the 16-worker workloads it is the
// inverse of throughput, not a latency; the p50 metrics are latencies.

// benchNodes are the cluster sizes the benchmarks cover; filter with -bench.
var benchNodes = []int{1, 3, 5, 7}

// benchClusters holds one cluster per size, started by the first benchmark
// that needs it and stopped by TestMain, so b.N ramps reuse warm nodes.
var benchClusters struct {
	sync.Mutex
	bySize map[int]*cluster
}

func TestMain(m *testing.M) {
	code := m.Run()
	benchClusters.Lock()
	for n, c := range benchClusters.bySize {
		if err := c.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop the %d-node bench cluster: %v\n", n, err)
			code = 1
		}
	}
	benchClusters.Unlock()
	os.Exit(code)
}

func clusterOf(b *testing.B, n int) *cluster {
	benchClusters.Lock()
	defer benchClusters.Unlock()
	if c, ok := benchClusters.bySize[n]; ok {
		return c
	}
	c, err := startCluster(context.Background(), n, AllContenders, DefaultSlowLatency)
	if err != nil {
		b.Fatal(err)
	}
	if benchClusters.bySize == nil {
		benchClusters.bySize = map[int]*cluster{}
	}
	benchClusters.bySize[n] = c
	return c
}

// benchRuns tells the names of successive runs of one sub-benchmark (b.N
// ramps) apart, so no run meets a key of the one before.
var benchRuns atomic.Int64

// benchmarkWorkload runs the named workload for every contender on every
// cluster size, as sub-benchmarks nodes=N/contender.
func benchmarkWorkload(b *testing.B, workloadName string) {
	w := workloadByName(workloadName)
	for _, n := range benchNodes {
		for _, name := range AllContenders {
			if !w.runsOn(name, n) {
				continue
			}
			b.Run(fmt.Sprintf("nodes=%d/%s", n, name), func(b *testing.B) {
				c := clusterOf(b, n)
				view := c.direct
				if w.slow {
					view = c.slow
				}
				var contender Contender
				for _, candidate := range c.contenders(w.slow) {
					if candidate.Name() == name {
						contender = candidate
					}
				}
				if contender == nil {
					b.Fatalf("cluster of %d nodes has no contender %s", n, name)
				}
				runBenchmark(b, w, contender, view)
			})
		}
	}
}

func runBenchmark(b *testing.B, w workload, c Contender, view []redis.UniversalClient) {
	ctx := context.Background()
	prefix := fmt.Sprintf("gobench:%s:%d", w.name, benchRuns.Add(1))
	if err := warmUp(ctx, w, c, view, prefix, DefaultHold); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	stats, err := execute(ctx, w, c, view, prefix, budget{
		ops:   int64(b.N),
		until: time.Now().Add(10 * time.Minute), // a bound, not a target: b.N ends the run
		hold:  DefaultHold,
		pause: b.StopTimer, resume: b.StartTimer,
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if stats.violations != 0 {
		b.Fatalf("%d violations; first error: %v", stats.violations, stats.firstErr)
	}
	if stats.failures != 0 {
		// A failed attempt is a figure, not a crash: under load the raw
		// floor's next SET NX can overtake its own last DEL on a straggling
		// node. Shown as a metric so it cannot go unnoticed.
		b.ReportMetric(float64(stats.failures), "failures")
		b.Logf("%d failed operations; first error: %v", stats.failures, stats.firstErr)
	}
	b.ReportMetric(float64(stats.acquire.quantile(0.5).Microseconds()), "acquire-p50-µs")
	if w.contended {
		b.ReportMetric(float64(stats.handoff.quantile(0.5).Microseconds()), "handoff-p50-µs")
	}
}

// BenchmarkUncontended1: one worker, one key, TryAcquire+Release.
func BenchmarkUncontended1(b *testing.B) { benchmarkWorkload(b, WorkloadUncontended1) }

// BenchmarkUncontended16: sixteen workers, a key each; ns/op is 1/throughput.
func BenchmarkUncontended16(b *testing.B) { benchmarkWorkload(b, WorkloadUncontended16) }

// BenchmarkUncontended64: 64 workers, a key each; ns/op is 1/throughput.
func BenchmarkUncontended64(b *testing.B) { benchmarkWorkload(b, WorkloadUncontended64) }

// BenchmarkUncontended256: 256 workers, a key each; ns/op is 1/throughput.
// The held-locks workload has no go test benchmark: it measures CPU per
// second of holding, not a cost per operation that b.N could scale.
func BenchmarkUncontended256(b *testing.B) { benchmarkWorkload(b, WorkloadUncontended256) }

// BenchmarkContended16: sixteen workers on one key with each library's own
// wait; run it with a small -benchtime (e.g. 200x): redsync's waiters sleep
// 50-250ms.
func BenchmarkContended16(b *testing.B) { benchmarkWorkload(b, WorkloadContended16) }

// BenchmarkSlowNode: one worker, node 0 answers 5ms late.
func BenchmarkSlowNode(b *testing.B) { benchmarkWorkload(b, WorkloadSlowNode) }

// BenchmarkFencingFast: this library, tokens issued in the acquire's round trip.
func BenchmarkFencingFast(b *testing.B) { benchmarkWorkload(b, WorkloadFencingFast) }

// BenchmarkFencingSlow: this library, slow path forced by seeding the fence
// registers (untimed) before each acquire.
func BenchmarkFencingSlow(b *testing.B) { benchmarkWorkload(b, WorkloadFencingSlow) }
