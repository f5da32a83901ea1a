package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/quorumlabs/redlock/internal/flagset"
)

// RunCommand runs the matrix command with its command-line args: the flags
// of cmd/redlock-bench, which `redlock bench` shares. It prints the median
// table to stdout and progress to stderr; ctx stops it early.
func RunCommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet(name, flag.ContinueOnError)
	// --sizes, not --nodes: everywhere else in redlock --nodes means node URLs.
	sizes := flags.String("sizes", "1,3,5,7", "cluster sizes (numbers of nodes), comma-separated")
	urls := flags.String("nodes", "", "not a bench flag: the bench starts its own nodes; cluster sizes are --sizes")
	workloads := flags.String("workloads", "all", "workloads, comma-separated: "+strings.Join(AllWorkloads, ",")+" ("+WorkloadIdleSubscribers+" selects the three of it)")
	contenders := flags.String("contenders", "all", "contenders, comma-separated: "+strings.Join(AllContenders, ","))
	repeats := flags.Int("repeats", DefaultRepeats, "runs of every cell, interleaved; the table shows medians")
	duration := flags.Duration("duration", DefaultDuration, "length of one run")
	maxOps := flags.Int64("max-ops", DefaultMaxOps, "cap on the operations of one run")
	hold := flags.Duration("hold", DefaultHold, "how long a contended worker keeps the lock")
	slow := flags.Duration("slow-latency", DefaultSlowLatency, "delay added to one node's replies in the slow-node workload (whole ms)")
	heldCounts := flags.String("held-locks", "1000,10000,50000", "numbers of locks the held-locks workload holds, comma-separated")
	heldFor := flags.Duration("held-for", DefaultHeldFor, "how long the held-locks workload measures the holding")
	heldLean := flags.Bool("held-lean", false, "the held-locks workload renews with WithLeanRenewal (two thirds of the validity passed) instead of WithAutoExtend")
	jsonPath := flags.String("json", "", "write every run and the medians as JSON to this file")
	markdown := flags.Bool("markdown", false, "print the table as Markdown")
	render := flags.String("render", "", "run nothing: print the table of a JSON file an earlier run wrote")
	quiet := flags.Bool("quiet", false, "no progress line per run on stderr")
	shards := flags.String("shards", "", "run the capacity comparison instead of the matrix: masters per Cluster node, comma-separated, 0 for standalone masters (e.g. 0,1,2,3)")
	shardNodes := flags.Int("shard-nodes", 3, "nodes of each layout in the --shards comparison")
	cpuProfile := flags.String("cpuprofile", "", "write a CPU profile of the whole run to this file (held-locks has no go test benchmark to profile)")
	if err := flagset.Parse(flags, name, args, stdout); err != nil {
		return err
	}
	if *urls != "" {
		return fmt.Errorf("--nodes %s: the bench starts its own local nodes and takes no URLs; for cluster sizes write --sizes %s", *urls, *urls)
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", flags.Arg(0))
	}

	if *render != "" {
		res, err := readJSON(*render)
		if err != nil {
			return err
		}
		return printTable(stdout, res, *markdown)
	}

	if *shards != "" {
		sc := ShardsConfig{Nodes: *shardNodes, Workers: 16, Names: 1024, Duration: *duration, Repeats: *repeats}
		for _, field := range splitList(*shards) {
			n, err := strconv.Atoi(field)
			if err != nil || n < 0 {
				return fmt.Errorf("--shards: %q is not a number of masters (0 for standalone)", field)
			}
			sc.Shards = append(sc.Shards, n)
		}
		if !*quiet {
			sc.Progress = stderr
		}
		rows, err := RunShards(ctx, sc)
		if err != nil {
			return err
		}
		WriteShardsTable(stdout, rows)
		return nil
	}

	cfg := Config{
		Repeats: *repeats, Duration: *duration, MaxOps: *maxOps, Hold: *hold, SlowLatency: *slow,
		Workloads: splitList(*workloads), Contenders: splitList(*contenders), HeldFor: *heldFor, HeldLean: *heldLean,
	}
	for _, field := range splitList(*heldCounts) {
		locks, err := strconv.Atoi(field)
		if err != nil {
			return fmt.Errorf("-held-locks: %q is not a number", field)
		}
		cfg.HeldCounts = append(cfg.HeldCounts, locks)
	}
	for _, field := range splitList(*sizes) {
		n, err := strconv.Atoi(field)
		if err != nil {
			return fmt.Errorf("--sizes: %q is not a number", field)
		}
		cfg.Nodes = append(cfg.Nodes, n)
	}
	if !*quiet {
		cfg.Progress = stderr
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	res, err := RunMatrix(ctx, cfg)
	if err != nil {
		return err
	}
	if err := printTable(stdout, res, *markdown); err != nil {
		return err
	}
	if *jsonPath != "" {
		return writeJSON(*jsonPath, res)
	}
	return nil
}

func printTable(w io.Writer, res *Results, markdown bool) error {
	if markdown {
		return res.WriteMarkdown(w)
	}
	return res.WriteTable(w)
}

func readJSON(path string) (*Results, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res Results
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("%s: not a results file: %w", path, err)
	}
	return &res, nil
}

// splitList turns "a, b" into [a b]; "all" and "" select everything.
func splitList(raw string) []string {
	raw = strings.TrimSpace(raw)
	if raw == "" || raw == "all" {
		return nil
	}
	var out []string
	for _, field := range strings.Split(raw, ",") {
		out = append(out, strings.TrimSpace(field))
	}
	return out
}

func writeJSON(path string, res *Results) (err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	return res.WriteJSON(f)
}
