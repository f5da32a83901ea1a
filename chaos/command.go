package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/quorumlabs/redlock/internal/flagset"
)

// ErrUnexpectedVerdict is returned by RunCommand when a scenario run's
// verdict differs from the one the scenario table expects, or a run could
// not be carried out.
var ErrUnexpectedVerdict = errors.New("chaos: scenario runs differ from their expected verdict")

// RunCommand runs the soak with its command-line args: the flags of
// cmd/chaos-soak, which `redlock chaos` shares. It prints the table per
// scenario to stdout and, with -out, writes the report files; ctx stops it.
func RunCommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet(name, flag.ContinueOnError)
	duration := flags.Duration("duration", 2*time.Minute, "how long each scenario runs (0: each schedule once)")
	backend := flags.String("backend", "auto", "docker, process, auto (docker if an engine answers) or both")
	scenarios := flags.String("scenarios", "", "comma-separated scenario names (default: all)")
	parallel := flags.Int("parallel", 1, "scenarios run at once per backend")
	out := flags.String("out", "", "directory for the report (default: print the table only)")
	list := flags.Bool("list", false, "list the scenarios and exit")
	verbose := flags.Bool("v", false, "log every nemesis step")
	if err := flagset.Parse(flags, name, args, stdout); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", flags.Arg(0))
	}
	if *list {
		for _, s := range append(Scenarios(), RWScenarios()...) {
			fmt.Fprintf(stdout, "%-28s %-17s %s\n", s.Name, s.Expect.Verdict, s.About)
		}
		return nil
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	var names []string
	if *scenarios != "" {
		names = strings.Split(*scenarios, ",")
	}
	rep, err := RunSoak(ctx, SoakConfig{Backend: *backend, Duration: *duration, Scenarios: names, Parallel: *parallel, Log: log})
	if rep != nil {
		fmt.Fprint(stdout, rep.Table())
		if *out != "" {
			if werr := rep.WriteFiles(*out); werr != nil {
				return fmt.Errorf("writing the report: %w", werr)
			}
			fmt.Fprintf(stdout, "\nreport: %s/report.html\n", strings.TrimRight(*out, "/"))
		}
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("%w: %d differ, %d could not run", ErrUnexpectedVerdict, rep.Mismatches(), len(rep.Failed))
	}
	return nil
}
