package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/quorumlabs/redlock/bench"
	"github.com/quorumlabs/redlock/chaos"
)

// The chaos soak and the benchmark matrix live in their own modules; these
// subcommands are the same commands as chaos/cmd/chaos-soak and
// bench/cmd/redlock-bench, so that one binary does it all.

var chaosHelp = cmdHelp{
	name: "chaos",
	about: `Run the chaos scenarios: 5 Redis masters behind toxiproxy (containers when a Docker engine
answers, local processes otherwise), clients contending for one lock with fenced writes, faults
injected on a schedule (latency, partitions, crashes and restarts, pauses, clock jumps, a client
stalled past its TTL), and a checker that judges the recorded history. The naive schemes the
library replaces run through the same checker and must be caught. Exits 1 if any scenario's
verdict differs from the one expected. See chaos/README.md.`,
	examples: `
redlock chaos --duration 0                       # every scenario once, short
redlock chaos --duration 2m --out reports/soak   # a long soak with report.md and report.html
redlock chaos --scenarios client-pause,restart-empty-grace --backend process
redlock chaos --list`,
}

var benchHelp = cmdHelp{
	name: "bench",
	about: `Run the benchmark matrix on local redis-server processes it starts itself: this library beside
redsync (default and fail-fast), bsm/redislock and a raw SET NX floor, uncontended and
contended, with one slow node, fencing fast and slow path. Prints medians of interleaved
repeats with ratios against redsync and the floor. See bench/README.md.`,
	examples: `
redlock bench --sizes 5 --duration 2s
redlock bench --sizes 5 --workloads uncontended-1,contended-16 --json results/matrix.json
redlock bench --render results/matrix.json --markdown`,
}

func runChaos(ctx context.Context, a *app, args []string) error {
	return runFront(ctx, a, chaosHelp, args, chaos.RunCommand)
}

func runBench(ctx context.Context, a *app, args []string) error {
	return runFront(ctx, a, benchHelp, args, bench.RunCommand)
}

// runFront runs a module's command; --help adds what it is and examples
// above the flags the command itself lists.
func runFront(ctx context.Context, a *app, h cmdHelp, args []string,
	run func(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error) error {
	name := "redlock " + h.name
	for _, arg := range args {
		if arg == "-h" || arg == "-help" || arg == "--help" {
			// The command lists its own flags ("Usage of ...:" first).
			var flags bytes.Buffer
			_ = run(ctx, name, []string{"-h"}, &flags, &flags)
			_, list, _ := strings.Cut(flags.String(), "\n")
			fmt.Fprintf(a.stdout, "Usage: %s [flags]\n\n%s\n\nFlags:\n%s\nExamples:\n", name, strings.TrimSpace(h.about), list)
			for _, line := range strings.Split(strings.TrimSpace(h.examples), "\n") {
				fmt.Fprintf(a.stdout, "  %s\n", strings.TrimSpace(line))
			}
			return nil
		}
	}
	return run(ctx, name, args, a.stdout, a.stderr)
}
