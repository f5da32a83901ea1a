// Command chaos-soak runs the chaos scenarios for a chosen time each and
// writes a report (report.md, report.html, one history file per run).
// `make chaos` runs it, and `redlock chaos` is the same command; see
// chaos/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/quorumlabs/redlock/chaos"
)

func main() {
	chaos.SilenceRedisLog()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := chaos.RunCommand(ctx, "chaos-soak", os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, chaos.ErrUnexpectedVerdict):
		fmt.Fprintln(os.Stderr, "chaos-soak:", err)
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "chaos-soak:", err)
		os.Exit(2)
	}
}
