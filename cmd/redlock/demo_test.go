package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

var pidLine = regexp.MustCompile(`(?m)^  (?:node \d|counter) +\S+  pid (\d+)`)

// demoPIDs returns the redis-server pids the demo printed: 5 lock nodes and the counter.
func demoPIDs(t *testing.T, out string) []int {
	t.Helper()
	var pids []int
	for _, m := range pidLine.FindAllStringSubmatch(out, -1) {
		pids = append(pids, atoi(t, m[1]))
	}
	if len(pids) != demoNodes+1 {
		t.Fatalf("want %d redis-server pids in the output, found %d:\n%s", demoNodes+1, len(pids), out)
	}
	return pids
}

func TestDemoShortRunPasses(t *testing.T) {
	r := run(t, "demo", "--duration", "5s")
	if r.code != 0 {
		t.Fatalf("want exit 0, got %v", r)
	}
	for _, want := range []string{
		"fault: kill node 1", "fault: restart node 1", "fault: pause node 2", "fault: slow node 3",
		"stalls past its", "rejected, the counter has seen token",
		"token order violations      0", "overlapping holders         0",
		"incl. the stalled holder's write", "successful increments", "PASS:",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("the demo output lacks %q: %v", want, r)
		}
	}
	if r.stderr != "" {
		t.Fatalf("the demo wrote to stderr: %v", r)
	}
	waitGone(t, "a redis-server the demo started", demoPIDs(t, r.stdout)...)
}

func TestDemoStopsEverythingOnInterrupt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	stdout := newLineWatcher()
	var stderr bytes.Buffer
	cmd := cli{args: []string{"demo", "--duration", "10m"}}.command(ctx, stdout, &stderr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !stdout.waitFor("workers start", cliTimeout) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the demo never started its workers:\n%s\n%s", stdout, &stderr)
	}
	pids := demoPIDs(t, stdout.String())
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code := exitCodeOf(t, cmd.Wait())
	if ctx.Err() != nil {
		t.Fatal("the demo did not stop after SIGINT")
	}
	if code != 128+int(syscall.SIGINT) {
		t.Fatalf("want exit %d, got %d:\n%s\n%s", 128+int(syscall.SIGINT), code, stdout, &stderr)
	}
	for _, want := range []string{"interrupted", "results so far", "stopped the 6 redis-server processes"} {
		if !strings.Contains(stdout.String(), want) {
			t.Fatalf("the output lacks %q:\n%s", want, stdout)
		}
	}
	waitGone(t, "a redis-server the demo started", pids...)
}

func TestDemoRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--duration", "1s"},
		{"demo", "--ttl", "10ms"},
		{"demo", "--workers", "0"},
		{"demo", "extra"},
	} {
		start := time.Now()
		r := run(t, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, strings.TrimPrefix(args[1], "--")) {
			t.Fatalf("%q: want exit %d naming the bad value, got %v (after %v)", args, exitUsage, r, time.Since(start))
		}
	}
}
