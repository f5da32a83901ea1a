package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

var ttlFlag = "--ttl=" + testTTL.String()

func TestExecGivesTheCommandAnIncreasingToken(t *testing.T) {
	name := lockName(t)
	var tokens []int64
	for range 2 {
		r := run(t, "exec", ttlFlag, name, "--", "sh", "-c", `echo "$REDLOCK_TOKEN $REDLOCK_NAME"`)
		if r.code != 0 {
			t.Fatalf("want exit 0, got %v", r)
		}
		token, gotName, _ := strings.Cut(strings.TrimSpace(r.stdout), " ")
		if gotName != name {
			t.Fatalf("REDLOCK_NAME = %q, want %q", gotName, name)
		}
		n, err := strconv.ParseInt(token, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("REDLOCK_TOKEN = %q, want a positive number", token)
		}
		tokens = append(tokens, n)
	}
	if tokens[1] <= tokens[0] {
		t.Fatalf("second token %d is not above the first %d", tokens[1], tokens[0])
	}
	requireReleased(t, libClient(t), name)
}

func TestExecExitCodes(t *testing.T) {
	cases := []struct {
		name    string
		command []string
		want    int
	}{
		{"the command's own", []string{"sh", "-c", "exit 7"}, 7},
		{"success", []string{"true"}, 0},
		{"killed by a signal", []string{"sh", "-c", "kill -TERM $$"}, 128 + int(syscall.SIGTERM)},
		{"command not found", []string{"redlock-test-no-such-command"}, exitNotFound},
		{"not executable", []string{"/dev/null"}, exitCannotRun},
	}
	c := libClient(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := lockName(t)
			r := run(t, append([]string{"exec", ttlFlag, name, "--"}, tc.command...)...)
			if r.code != tc.want {
				t.Fatalf("want exit %d, got %v", tc.want, r)
			}
			requireReleased(t, c, name)
		})
	}
}

func TestExecNotAcquiredInTime(t *testing.T) {
	name := lockName(t)
	lock := holdLock(t, libClient(t), name)
	marker := filepath.Join(t.TempDir(), "ran")

	for _, wait := range []string{"0", "300ms"} {
		r := run(t, "exec", ttlFlag, "--wait", wait, name, "--", "touch", marker)
		if r.code != exitNotAcquired {
			t.Fatalf("--wait %s: want exit %d, got %v", wait, exitNotAcquired, r)
		}
		if !strings.Contains(r.stderr, "not acquired") || !strings.Contains(r.stderr, "held by another owner") {
			t.Fatalf("--wait %s: the message does not say the lock is held elsewhere: %v", wait, r)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("--wait %s: the command ran without the lock", wait)
		}
	}
	if err := lock.Extend(context.Background()); err != nil {
		t.Fatalf("the holder lost its lock to a failed exec: %v", err)
	}
}

func TestExecUsageAndConfigErrors(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		env     []string
		mention string // the message must name the problem
	}{
		{"no arguments", []string{"exec"}, nil, "missing lock NAME"},
		{"no command", []string{"exec", "job"}, nil, "missing \"--\" and COMMAND"},
		{"no command after --", []string{"exec", "job", "--"}, nil, "missing COMMAND"},
		{"unknown flag", []string{"exec", "--no-such-flag", "job", "--", "true"}, nil, "unknown flag --no-such-flag"},
		{"zero TTL", []string{"exec", "--ttl", "0s", "job", "--", "true"}, nil, "--ttl"},
		{"negative wait", []string{"exec", "--wait", "-1s", "job", "--", "true"}, nil, "--wait"},
		{"no nodes", []string{"exec", "job", "--", "true"}, []string{"REDLOCK_NODES="}, "no nodes"},
		{"http URL", []string{"exec", "--nodes", "http://127.0.0.1:6379", "job", "--", "true"}, nil, "http://127.0.0.1:6379"},
		{"bad port in REDLOCK_NODES", []string{"exec", "job", "--", "true"}, []string{"REDLOCK_NODES=redis://127.0.0.1:1,redis://127.0.0.1:notaport"}, "node 2 of 2"},
		{"empty lock name", []string{"exec", ttlFlag, "", "--", "true"}, nil, "lock name"},
		{"unknown command", []string{"frobnicate"}, nil, "frobnicate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := cli{args: tc.args, env: tc.env}.run(t)
			if r.code != exitUsage {
				t.Fatalf("want exit %d, got %v", exitUsage, r)
			}
			if !strings.Contains(r.stderr, tc.mention) {
				t.Fatalf("the message does not mention %q: %v", tc.mention, r)
			}
		})
	}
}

func TestPasswordsAreNeverPrinted(t *testing.T) {
	const password = "pw-that-must-not-leak"
	// The password is set once the server runs: redistest's readiness check does not log in.
	secured := redistest.StartT(t, 1, redistest.Options{})
	if err := secured.Servers[0].Client().ConfigSet(context.Background(), "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	good := "redis://:" + password + "@" + secured.Addrs()[0]
	wrong := "redis://:" + password + "-wrong@" + secured.Addrs()[0]
	malformed := "redis://user:" + password + "@127.0.0.1:notaport"
	cases := []struct {
		name string
		args []string
		want int
	}{
		{"right password", []string{"nodes", "-v", "--ttl", "1s", "--nodes", good}, -1},
		{"wrong password", []string{"nodes", "-v", "--nodes", wrong}, exitFailure},
		{"malformed URL", []string{"status", "--nodes", malformed, "job"}, exitUsage},
		{"exec with the wrong password", []string{"exec", "-v", "--nodes", wrong, "job", "--", "true"}, exitUnavailable},
		{"status with the wrong password", []string{"status", "--nodes", wrong, "job"}, exitFailure},
		{"unlock with the wrong password", []string{"unlock", "--force", "--yes", "--nodes", wrong, "job"}, exitFailure},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.args...)
			if tc.want >= 0 && r.code != tc.want {
				t.Fatalf("want exit %d, got %v", tc.want, r)
			}
			if strings.Contains(r.stdout+r.stderr, password) {
				t.Fatalf("the password was printed: %v", r)
			}
			if r.stdout+r.stderr == "" {
				t.Fatal("no output at all")
			}
		})
	}
}

// TestExecMutualExclusion runs two exec loops at once on one lock; each critical section
// appends "start" and "end" to a shared file, and no two may interleave.
func TestExecMutualExclusion(t *testing.T) {
	name := lockName(t)
	journal := filepath.Join(t.TempDir(), "journal")
	const perWorker = 4
	section := `echo "start $W" >> "$J"; sleep 0.2; echo "end $W" >> "$J"`
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for range perWorker {
				r := cli{
					args: []string{"exec", ttlFlag, "--wait", "60s", name, "--", "sh", "-c", section},
					env:  []string{"W=" + strconv.Itoa(w), "J=" + journal},
				}.run(t)
				if r.code != 0 {
					t.Errorf("worker %d: want exit 0, got %v", w, r)
					return
				}
			}
		})
	}
	wg.Wait()
	b, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	got := lines(string(b))
	if len(got) != 2*2*perWorker {
		t.Fatalf("want %d journal lines, got %d:\n%s", 2*2*perWorker, len(got), b)
	}
	for i := 0; i < len(got); i += 2 {
		who := strings.TrimPrefix(got[i], "start ")
		if !strings.HasPrefix(got[i], "start ") || got[i+1] != "end "+who {
			t.Fatalf("critical sections interleaved at line %d:\n%s", i+1, b)
		}
	}
}

// startExec starts exec in the background and returns a function that waits for it.
func startExec(t *testing.T, args []string, env ...string) (pid int, done <-chan struct{}, wait func() result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	var stdout, stderr bytes.Buffer
	cmd := cli{args: args, env: env}.command(ctx, &stdout, &stderr)
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cancel()
		<-exited
	})
	return cmd.Process.Pid, exited, func() result {
		t.Helper()
		<-exited
		if ctx.Err() != nil {
			t.Fatalf("redlock %q did not finish within %v", args, cliTimeout)
		}
		return result{stdout: stdout.String(), stderr: stderr.String(), code: exitCodeOf(t, waitErr)}
	}
}

// takeOver makes another client the holder of the lock: it deletes the lock key on a majority
// of the nodes with a plain DEL, then acquires. Deleting alone is not enough: the holder's
// next extension would put its keys back, which is right when they were lost by a restart.
func takeOver(t *testing.T, c *redlock.Client, name string) *redlock.Lock {
	t.Helper()
	key := c.Keys(name).Lock
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range shared.Servers[:2] {
			if err := s.Client().Del(context.Background(), key).Err(); err != nil {
				t.Fatal(err)
			}
		}
		// An extension may put the keys back between the DEL and this attempt: try again.
		lock, err := c.TryAcquire(context.Background(), name, redlock.WithTTL(time.Minute))
		if err == nil {
			return lock
		}
		if time.Now().After(deadline) {
			t.Fatalf("could not take the lock over: %v", err)
		}
	}
}

func TestExecStopsTheCommandWhenTheLockIsLost(t *testing.T) {
	cases := []struct {
		name   string
		script string // writes its pid and a child's pid to $P, one per line
	}{
		{"command that stops on SIGTERM", `sleep 60 & echo "$$" > "$P.tmp"; echo "$!" >> "$P.tmp"; mv "$P.tmp" "$P"; wait`},
		{"command that ignores SIGTERM", `trap "" TERM; sleep 60 & echo "$$" > "$P.tmp"; echo "$!" >> "$P.tmp"; mv "$P.tmp" "$P"; while :; do wait; done`},
	}
	c := libClient(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := lockName(t)
			pids := filepath.Join(t.TempDir(), "pids")
			_, done, wait := startExec(t, []string{"exec", ttlFlag, "--grace", "500ms", name, "--", "sh", "-c", tc.script}, "P="+pids)
			started := waitForFile(t, pids, done)
			lock := takeOver(t, c, name)
			defer lock.Release(context.Background())

			r := wait()
			if r.code != exitLockLost {
				t.Fatalf("want exit %d, got %v", exitLockLost, r)
			}
			if !strings.Contains(r.stderr, "lost") {
				t.Fatalf("the message does not say the lock was lost: %v", r)
			}
			for _, pid := range strings.Fields(started) {
				waitGone(t, "a process of the command", atoi(t, pid))
			}
			if err := lock.Extend(context.Background()); err != nil {
				t.Fatalf("the new holder lost the lock: %v", err)
			}
		})
	}
}

func TestExecForwardsSignalsAndReleases(t *testing.T) {
	dir := t.TempDir()
	ready, got := filepath.Join(dir, "ready"), filepath.Join(dir, "got")
	script := `trap 'echo TERM > "$G"; exit 3' TERM; echo ready > "$R"; while :; do sleep 0.05; done`
	name := lockName(t)
	pid, done, wait := startExec(t, []string{"exec", ttlFlag, name, "--", "sh", "-c", script}, "R="+ready, "G="+got)
	waitForFile(t, ready, done)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := wait()
	if r.code != 3 {
		t.Fatalf("want the command's exit code 3, got %v", r)
	}
	if b, err := os.ReadFile(got); err != nil || strings.TrimSpace(string(b)) != "TERM" {
		t.Fatalf("the command did not get SIGTERM: %q, %v", b, err)
	}
	requireReleased(t, libClient(t), name)
}

func TestExecInterruptedWhileWaiting(t *testing.T) {
	name := lockName(t)
	lock := holdLock(t, libClient(t), name)
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	var stdout bytes.Buffer
	stderr := newLineWatcher()
	cmd := cli{args: []string{"exec", "-v", ttlFlag, "--wait", "60s", name, "--", "true"}}.command(ctx, &stdout, stderr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !stderr.waitFor("waiting up to", cliTimeout) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("exec never said it was waiting:\n%s", stderr)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code := exitCodeOf(t, cmd.Wait())
	if code != 128+int(syscall.SIGINT) {
		t.Fatalf("want exit %d, got %d:\n%s", 128+int(syscall.SIGINT), code, stderr)
	}
	// The signal by its name, not Go's description ("interrupted by interrupt").
	if !strings.Contains(stderr.String(), "interrupted by SIGINT while waiting") {
		t.Fatalf("the message does not name the signal:\n%s", stderr)
	}
	if err := lock.Extend(context.Background()); err != nil {
		t.Fatalf("the holder lost its lock: %v", err)
	}
}

// lineWatcher is an output sink a test can wait on for a given text.
type lineWatcher struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newLineWatcher() *lineWatcher { return &lineWatcher{changed: make(chan struct{}, 1)} }

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *lineWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor waits until the output contains text.
func (w *lineWatcher) waitFor(text string, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for !strings.Contains(w.String(), text) {
		select {
		case <-w.changed:
		case <-deadline:
			return false
		}
	}
	return true
}

func TestHelpOnEveryCommand(t *testing.T) {
	for _, c := range commands() {
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			r := run(t, args...)
			if r.code != 0 {
				t.Fatalf("%q: want exit 0, got %v", args, r)
			}
			for _, want := range []string{"Usage: redlock " + c.name, "Flags:", "Examples:\n  redlock " + c.name} {
				if !strings.Contains(r.stdout, want) {
					t.Fatalf("%q: the help lacks %q:\n%s", args, want, r.stdout)
				}
			}
		}
	}
	r := run(t, "--help")
	if r.code != 0 {
		t.Fatalf("want exit 0, got %v", r)
	}
	for _, c := range commands() {
		if !strings.Contains(r.stdout, fmt.Sprintf("  %-8s %s", c.name, c.summary)) {
			t.Fatalf("the top-level help does not list %s:\n%s", c.name, r.stdout)
		}
	}
	if r := run(t); r.code != exitUsage || !strings.Contains(r.stderr, "Commands:") {
		t.Fatalf("no arguments: want the command list and exit %d, got %v", exitUsage, r)
	}
}

// TestExecGivesATerminalCommandEndOfFile: the command runs in the terminal's background, where
// reading the terminal would stop it for good; it must read end-of-file instead.
func TestExecGivesATerminalCommandEndOfFile(t *testing.T) {
	name := lockName(t)
	r := runOnTerminal(t, "", "exec", ttlFlag, name, "--", "sh", "-c", `cat; echo "read to the end"`)
	if r.code != 0 || !strings.Contains(r.stdout, "read to the end") {
		t.Fatalf("want the command to read end-of-file and exit 0, got %v", r)
	}
}
