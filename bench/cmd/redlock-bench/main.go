// Command redlock-bench runs the benchmark matrix of package bench: it starts
// its own redis-server processes, runs every cell, prints the medians as a
// table and, with -json, writes every run to a file. `redlock bench` is the
// same command.
//
//	go run ./cmd/redlock-bench --sizes 5 --duration 2s --json results/matrix.json
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/quorumlabs/redlock/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := bench.RunCommand(ctx, "redlock-bench", os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "redlock-bench:", err)
		os.Exit(1)
	}
}
