package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
	"github.com/quorumlabs/redlock/redistest"
)

// The status line says what exec waits for and how long it has left.
func TestWaitStatusLineSaysWhatAndHowLong(t *testing.T) {
	now := time.Now()
	deadline := now.Add(15 * time.Second)
	w := &waitStatus{}
	w.Observe(observe.Event{Kind: observe.GraceWait, Wait: 9800 * time.Millisecond,
		Err: fmt.Errorf("%w: 3 of 5 nodes sit out the 10s restart grace", redlock.ErrNodeSittingOut)})
	if line := w.line("job", time.Now(), deadline); !strings.HasPrefix(line, "redlock exec: 3 of 5 nodes in their restart grace, a quorum votes in 9.") ||
		!strings.Contains(line, "gives up in 15s") || !strings.Contains(line, `(lock "job")`) {
		t.Errorf("grace: %q", line)
	}
	w = &waitStatus{}
	w.Observe(observe.Event{Kind: observe.AcquireFailed, Err: &redlock.LockedError{Name: "job", Remaining: 4 * time.Second}})
	if line := w.line("job", now.Add(5*time.Second), deadline); !strings.Contains(line, "held by another owner, its keys expire in 4s at the latest; gives up in 10s") {
		t.Errorf("held: %q", line)
	}
}

// In a pipe, exec --wait on fresh nodes shows no status line: it waits the grace out
// quietly and runs the command.
func TestExecWaitIsQuietInAPipe(t *testing.T) {
	fresh := redistest.StartT(t, 3, redistest.Options{})
	r := run(t, "exec", "--ttl=1s", "--restart-grace=2s", "--wait=20s", "--nodes="+strings.Join(fresh.URLs(), ","), lockName(t), "--", "true")
	if r.code != 0 {
		t.Fatalf("exec: %v", r)
	}
	if strings.Contains(r.stderr, "\r") || strings.Contains(r.stderr, "gives up in") {
		t.Fatalf("a status line in a pipe: %q", r.stderr)
	}
}

// On a terminal, exec --wait on fresh nodes shows at once what it waits for (the nodes'
// restart grace) and the time it has left, on one line redrawn in place.
func TestExecWaitShowsItsProgressOnATerminal(t *testing.T) {
	fresh := redistest.StartT(t, 3, redistest.Options{})
	master, slave := openPTY(t)
	defer master.Close()
	var out bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		_, _ = io.Copy(&out, master) // ends with an error once the terminal is closed
	}()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	var stdout bytes.Buffer
	cmd := cli{args: []string{"exec", "--ttl=1s", "--restart-grace=2s", "--wait=20s", "--nodes=" + strings.Join(fresh.URLs(), ","), lockName(t), "--", "true"}}.command(ctx, &stdout, slave)
	err := cmd.Run()
	slave.Close()
	master.Close()
	<-read
	if code := exitCodeOf(t, err); code != 0 {
		t.Fatalf("exec: exit %d, terminal:\n%q", code, out.String())
	}
	shown := out.String()
	if !strings.Contains(shown, "\r") || !strings.Contains(shown, "3 of 3 nodes in their restart grace, a quorum votes in") || !strings.Contains(shown, "gives up in") {
		t.Fatalf("no status line on the terminal: %q", shown)
	}
}
