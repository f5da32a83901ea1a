package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// The CLI tests run the real binary against real redis-server processes.
var (
	binary string             // the redlock binary, built once by TestMain
	shared *redistest.Cluster // 3 lock nodes for the tests that do not stop or restart nodes
)

// testTTL is the lock TTL the tests pass to the CLI. The CLI's clients keep a node that
// started less than one TTL ago out of the vote, so TestMain waits that long once.
const testTTL = 2 * time.Second

// cliTimeout bounds every CLI run: a hang fails the test instead of the suite's timeout.
const cliTimeout = 90 * time.Second

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "redlock-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "redlock")
	build := []string{"build", "-o", binary}
	if raceEnabled {
		build = append(build, "-race")
	}
	cmd := exec.Command("go", append(build, ".")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building the redlock binary: %v\n", err)
		return 1
	}
	// Persistent, so that the long locks some tests hold behind the CLI's
	// back (which raise every node's register of the largest TTL in use)
	// do not keep these young nodes out of the CLI's votes for a grace.
	shared, err = redistest.Start(3, redistest.Options{Persistence: true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting redis-server: %v\n", err)
		return 1
	}
	defer shared.Stop()
	if err := waitUntilVoting(shared.URLs(), testTTL); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// waitUntilVoting waits until every node's vote counts for a client using ttl.
func waitUntilVoting(urls []string, ttl time.Duration) error {
	deadline := time.Now().Add(ttl + 30*time.Second)
	for {
		// A client of its own each time, as each run of the CLI is: one
		// that met a node earlier dates its start more closely than a
		// newcomer reading INFO's whole-second uptime can.
		// A second more than the grace a client with ttl needs: the CLI
		// run that follows reads the uptime a moment later.
		c, err := redlock.NewFromURLs(urls, redlock.Options{TTL: ttl, RestartGrace: ttl + time.Second})
		if err != nil {
			return err
		}
		voting := 0
		for _, n := range c.Nodes(context.Background()) {
			if n.Err == nil && n.Voting {
				voting++
			}
		}
		c.Close()
		if voting == len(urls) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d nodes vote after %v", voting, len(urls), ttl+30*time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// result is what a CLI run left behind.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// cli describes one run of the binary.
type cli struct {
	args  []string
	env   []string  // added to the environment, after REDLOCK_NODES of the shared nodes
	stdin io.Reader // nil: /dev/null
}

// command prepares the run; the caller starts it.
func (c cli) command(ctx context.Context, stdout, stderr io.Writer) *exec.Cmd {
	cmd := exec.CommandContext(ctx, binary, c.args...)
	cmd.Env = append(os.Environ(), "REDLOCK_NODES="+strings.Join(shared.URLs(), ","))
	cmd.Env = append(cmd.Env, c.env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, stdout, stderr
	// A process left behind holding the output pipes must not hang the test.
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs the binary to completion.
func (c cli) run(t *testing.T) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := c.command(ctx, &stdout, &stderr)
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("redlock %q did not finish within %v", c.args, cliTimeout)
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: exitCodeOf(t, err)}
}

func run(t *testing.T, args ...string) result {
	t.Helper()
	return cli{args: args}.run(t)
}

func exitCodeOf(t *testing.T, err error) int {
	t.Helper()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exitErr):
		return exitErr.ExitCode()
	}
	t.Fatalf("running redlock: %v", err)
	return -1
}

// libClient is a library client on the shared nodes, for setting up and checking locks
// behind the CLI's back. Its restart grace is off: the shared nodes are younger than the
// long TTLs some tests hold locks for.
func libClient(t *testing.T) *redlock.Client {
	t.Helper()
	c, err := redlock.NewFromURLs(shared.URLs(), redlock.Options{TTL: testTTL, RestartGrace: redlock.NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// holdLock takes name for a minute behind the CLI's back, released when the test ends.
func holdLock(t *testing.T, c *redlock.Client, name string) *redlock.Lock {
	t.Helper()
	lock, err := c.TryAcquire(context.Background(), name, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Release(context.Background()) })
	return lock
}

// requireReleased fails the test if a quorum still holds name.
func requireReleased(t *testing.T, c *redlock.Client, name string) {
	t.Helper()
	if held(t, c, name) {
		t.Fatalf("lock %q is still held after the command returned", name)
	}
}

// lockName gives each test its own lock.
func lockName(t *testing.T) string {
	return strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
}

// held reports whether a quorum holds the lock.
func held(t *testing.T, c *redlock.Client, name string) bool {
	t.Helper()
	st, err := c.Inspect(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st.Held
}

// waitForFile waits until path exists and returns its trimmed content.
func waitForFile(t *testing.T, path string, done <-chan struct{}) string {
	t.Helper()
	deadline := time.Now().Add(cliTimeout)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 && bytes.HasSuffix(b, []byte("\n")) {
			return strings.TrimSpace(string(b))
		}
		select {
		case <-done:
			t.Fatalf("the process ended before writing %s", path)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("%s did not appear within %v", path, cliTimeout)
	return ""
}

// processGone reports whether pid has exited (a zombie waiting for a parent that does not
// reap it counts as exited).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] == 'Z'
	}
	return false
}

// waitGone waits until every pid has exited.
func waitGone(t *testing.T, what string, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for !processGone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("%s (pid %d) still runs", what, pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		t.Fatalf("want a number, got %q", s)
	}
	return n
}

// lines scans output into lines.
func lines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
