// Command redlock guards shell commands with a Redlock lock across independent Redis masters,
// inspects locks and nodes, and runs a self-contained demo of the lock surviving faults.
//
// Run `redlock --help` for the commands, `redlock <command> --help` for their flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/quorumlabs/redlock"
)

// command is one subcommand: its usage text and the function that runs it.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, a *app, args []string) error
}

// commands lists every subcommand in the order the top-level help shows them.
func commands() []command {
	return []command{
		{"exec", "run a command while holding a lock (like flock, across Redis masters)", runExec},
		{"status", "show who holds a lock, node by node, and the quorum verdict", runStatus},
		{"nodes", "check the nodes: reachability, role, persistence, clocks, independence", runNodes},
		{"unlock", "delete a lock by force, whoever holds it (operators only)", runUnlock},
		{"demo", "start 5 local Redis masters and watch the lock hold up under faults", runDemo},
		{"chaos", "run the chaos scenarios and check the recorded histories (see chaos/)", runChaos},
		{"bench", "benchmark the lock beside redsync, redislock and a raw floor (see bench/)", runBench},
		{"version", "print redlock's version and the Go version it was built with", runVersion},
	}
}

// app carries the process' standard streams and environment so tests and the subcommands
// share one way to reach them.
type app struct {
	stdin  *os.File
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

func main() {
	redlock.SetGoRedisLogger(redisLog{}) // the lines about the nodes go to the -v log, or nowhere
	a := &app{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	os.Exit(a.main(context.Background(), os.Args[1:]))
}

// main dispatches to a subcommand and turns its error into an exit code and one message.
func (a *app) main(ctx context.Context, args []string) int {
	if len(args) == 0 {
		a.topUsage(a.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "--version":
		return a.main(ctx, []string{"version"})
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			// `redlock help exec` is the same as `redlock exec --help`.
			return a.main(ctx, []string{args[1], "--help"})
		}
		a.topUsage(a.stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == name {
			return a.report(c.name, c.run(ctx, a, args[1:]))
		}
	}
	fmt.Fprintf(a.stderr, "redlock: unknown command %q\nRun 'redlock --help' for the list of commands.\n", name)
	return exitUsage
}

// report prints err (if any) once, prefixed with the command, and returns the exit code.
func (a *app) report(cmd string, err error) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	code := exitCode(err)
	var silent *silentExit
	if !errors.As(err, &silent) {
		// One line, and one "redlock" in front: the library's messages start with
		// "redlock: " and joined problems with line breaks.
		msg := strings.ReplaceAll(strings.TrimPrefix(err.Error(), "redlock: "), "\n", "; ")
		fmt.Fprintf(a.stderr, "redlock %s: %s\n", cmd, msg)
		if code == exitUsage && !errors.Is(err, redlock.ErrInvalidConfig) {
			fmt.Fprintf(a.stderr, "Run 'redlock %s --help' for usage.\n", cmd)
		}
	}
	return code
}

func (a *app) topUsage(w io.Writer) {
	fmt.Fprint(w, `redlock: Redlock distributed locks with fencing tokens, from the shell.

Usage:
  redlock <command> [flags] [arguments]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Nodes are given with --nodes or the REDLOCK_NODES environment variable: a comma-separated
list of URLs (rediss for TLS), one per independent node: a master
redis://[user:password@]host:port[/db], a Redis Cluster redis+cluster://host:port?addr=host2:port2,
or a master managed by Sentinel redis+sentinel://host:26379?master_name=NAME&addr=host2:26379. Prefer REDLOCK_NODES when URLs carry passwords: command lines are visible to other users.
TLS nodes with a private CA or client certificates: --cacert, --cert, --key and --sni as in
redis-cli, or REDLOCK_CACERT, REDLOCK_CERT, REDLOCK_KEY and REDLOCK_SNI.

Examples:
  redlock demo                                   # no Redis needed beyond redis-server on PATH
  export REDLOCK_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379
  redlock exec --wait 30s nightly-report -- ./report.sh
  redlock status nightly-report
  redlock nodes

`+exitCodesHelp+`
Run 'redlock <command> --help' for a command's flags and examples.
`)
}
