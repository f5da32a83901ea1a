package redlock_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// BenchmarkAcquireRelease measures the hot path: one Acquire and one
// Release of an uncontended lock by one worker, on local nodes. The
// side-by-side comparison with other libraries lives in bench/.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, nodes := range []int{1, 3, 5} {
		for _, fencing := range []bool{true, false} {
			b.Run(fmt.Sprintf("nodes=%d/fencing=%v", nodes, fencing), func(b *testing.B) {
				benchAcquireRelease(b, nodes, redlock.Options{DisableFencing: !fencing})
			})
		}
	}
}

// BenchmarkAcquireReleaseWithMetadata is BenchmarkAcquireRelease with
// holder metadata of the size the CLI attaches (host, pid, command, start):
// the price of WithMetadata on the hot path.
func BenchmarkAcquireReleaseWithMetadata(b *testing.B) {
	const md = "host=build-7.example.net pid=123456 started=2026-11-23T20:00:00Z cmd=./nightly-report.sh --since yesterday"
	for _, nodes := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("nodes=%d/fencing=true", nodes), func(b *testing.B) {
			benchAcquireRelease(b, nodes, redlock.Options{}, redlock.WithMetadata(md))
		})
	}
}

// benchAcquireRelease starts nodes servers and times an Acquire (with
// lockOpts) and a Release of an uncontended lock, by a client of opts with
// a 10s TTL.
func benchAcquireRelease(b *testing.B, nodes int, opts redlock.Options, lockOpts ...redlock.LockOption) {
	b.Helper()
	cl := redistest.StartT(b, nodes, redistest.Options{})
	opts.TTL = 10 * time.Second
	opts.RestartGrace = redlock.NoRestartGrace // the nodes were started just now
	// One node is the single-server figure, not a deployment.
	opts.AllowNoFaultTolerance = nodes < 3
	c, err := redlock.New(cl.Clients(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.Acquire(ctx, "bench", lockOpts...)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDurableVotes is the cost of Options.DurableVotes: Acquire and
// Release of an uncontended lock on 3 masters with one replica each, with
// votes that wait for the replica (WAIT after the acquire) and without
// (AllowFailoverNodes). It reports the acquire's median latency beside
// ns/op. Compare the two in one session, interleaved (docs/BENCHMARKS.md).
func BenchmarkDurableVotes(b *testing.B) {
	masters, _ := redistest.StartReplicatedT(b, 3, redistest.Options{})
	for _, durable := range []bool{false, true} {
		b.Run(fmt.Sprintf("durable=%v", durable), func(b *testing.B) {
			c, err := redlock.New(masters.Clients(), redlock.Options{
				TTL:                10 * time.Second,
				RestartGrace:       redlock.NoRestartGrace, // the nodes were started just now
				DurableVotes:       durable,
				AllowFailoverNodes: !durable,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			acquireLatencies(b, ctx, c, false)
		})
	}
}

// acquireLatencies runs b's loop of an uncontended Acquire and Release on
// c, one at a time, and reports the acquires' p50 (and p99 with withP99).
func acquireLatencies(b *testing.B, ctx context.Context, c *redlock.Client, withP99 bool) {
	b.Helper()
	var acquires []time.Duration
	for b.Loop() {
		start := time.Now()
		l, err := c.Acquire(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		acquires = append(acquires, time.Since(start))
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(acquires)
	b.ReportMetric(float64(acquires[len(acquires)/2].Microseconds()), "p50-acquire-µs")
	if withP99 {
		b.ReportMetric(float64(acquires[len(acquires)*99/100].Microseconds()), "p99-acquire-µs")
	}
}
