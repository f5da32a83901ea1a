package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
)

// holdPermits takes n permits of the semaphore name of k permits, through c behind the CLI's
// back, released when the test ends.
func holdPermits(t *testing.T, c *redlock.Client, name string, k, n int) (*redlock.Semaphore, []*redlock.Permit) {
	t.Helper()
	sem, err := c.Semaphore(name, k)
	if err != nil {
		t.Fatal(err)
	}
	var ps []*redlock.Permit
	for range n {
		p, err := sem.TryAcquire(context.Background(), redlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Release(context.Background()) })
		ps = append(ps, p)
	}
	return sem, ps
}

func TestExecPermitsRunsUnderOneOfKPermits(t *testing.T) {
	name := lockName(t)
	sem, held := holdPermits(t, libClient(t), name, 2, 2)
	marker := filepath.Join(t.TempDir(), "ran")

	// Both permits held by others: 75, and the command does not run.
	for _, wait := range []string{"0", "300ms"} {
		r := run(t, "exec", ttlFlag, "--permits", "2", "--wait", wait, name, "--", "touch", marker)
		if r.code != exitNotAcquired {
			t.Fatalf("--wait %s with both permits held: want exit %d, got %v", wait, exitNotAcquired, r)
		}
	}
	if fileExists(marker) {
		t.Fatal("the command ran without a permit")
	}

	// One permit free: the command runs under it, with its slot and token.
	if err := held[1].Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := run(t, "exec", ttlFlag, "--permits", "2", name, "--", "sh", "-c", `echo "$REDLOCK_SLOT $REDLOCK_TOKEN $REDLOCK_NAME"`)
	if r.code != 0 {
		t.Fatalf("with a permit free: want exit 0, got %v", r)
	}
	fields := strings.Fields(r.stdout)
	if len(fields) != 3 || fields[0] != strconv.Itoa(held[1].Slot()) || fields[2] != name {
		t.Fatalf("want the freed slot %d, a token and the name, got %q", held[1].Slot(), r.stdout)
	}
	if token, err := strconv.ParseInt(fields[1], 10, 64); err != nil || token <= held[1].Token() {
		t.Fatalf("token %q is not above the slot's previous token %d", fields[1], held[1].Token())
	}
	// The CLI gave its permit back: one (ours) is held.
	st, err := sem.Holders(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Held() != 1 {
		t.Fatalf("%d permits held after exec, want the test's 1", st.Held())
	}
}

func fileExists(path string) bool {
	m, _ := filepath.Glob(path)
	return len(m) > 0
}

func TestExecPermitsWithoutQuorumAndBadInput(t *testing.T) {
	urls := shared.URLs()
	nodes := urls[0] + ",redis://" + deadAddr(t) + ",redis://" + deadAddr(t)
	r := run(t, "exec", ttlFlag, "--permits", "2", "--nodes", nodes, lockName(t), "--", "true")
	if r.code != exitUnavailable {
		t.Fatalf("2 of 3 nodes down: want exit %d, got %v", exitUnavailable, r)
	}
	for _, permits := range []string{"-1", strconv.Itoa(redlock.MaxPermits + 1)} {
		r := run(t, "exec", ttlFlag, "--permits", permits, lockName(t), "--", "true")
		if r.code != exitUsage || !strings.Contains(r.stderr, permits) {
			t.Fatalf("--permits %s: want exit %d naming the value, got %v", permits, exitUsage, r)
		}
	}
}

func TestStatusShowsSemaphoreHolders(t *testing.T) {
	name := lockName(t)
	lib := libClient(t)
	sem, held := holdPermits(t, lib, name, 3, 2)
	r := run(t, "status", "--permits", "3", name)
	if r.code != 0 {
		t.Fatalf("want exit 0, got %v", r)
	}
	for _, want := range []string{"3 permits", "held: 2 of 3 permits", "slot " + strconv.Itoa(held[0].Slot()) + ": held by", lib.Keys(sem.Name()).Permit(0)} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("status --permits lacks %q: %v", want, r)
		}
	}
	// Without --permits: no lock of that name, so the semaphore's traces are shown.
	r = run(t, "status", name)
	if r.code != 0 || !strings.Contains(r.stdout, "semaphore "+strconv.Quote(name)) || !strings.Contains(r.stdout, "held: 2 of") {
		t.Fatalf("status without --permits did not find the semaphore: %v", r)
	}
	// A name with neither a lock nor a semaphore is a free lock.
	r = run(t, "status", name+"-unused")
	if r.code != 0 || !strings.Contains(r.stdout, "held: no") {
		t.Fatalf("status of an unused name: %v", r)
	}
}

func TestExecAndStatusRefuseAnotherNumberOfPermits(t *testing.T) {
	name := lockName(t)
	_, held := holdPermits(t, libClient(t), name, 1, 1)
	marker := filepath.Join(t.TempDir(), "ran")

	// A permit of 1 is held: 2 permits are refused at once, with 64, even when waiting.
	for _, wait := range []string{"0", "1m"} {
		r := run(t, "exec", ttlFlag, "--permits", "2", "--wait", wait, name, "--", "touch", marker)
		if r.code != exitUsage || !strings.Contains(r.stderr, "2 permits") || !strings.Contains(r.stderr, "record 1 permits") {
			t.Fatalf("--permits 2 --wait %s while a permit of 1 is held: want exit %d naming both numbers, got %v", wait, exitUsage, r)
		}
	}
	if fileExists(marker) {
		t.Fatal("the command ran under a second number of permits")
	}
	r := run(t, "status", "--permits", "2", name)
	if r.code != exitUsage || !strings.Contains(r.stderr, "record 1 permits") {
		t.Fatalf("status --permits 2 while a permit of 1 is held: want exit %d naming the recorded number, got %v", exitUsage, r)
	}
	// The right number is shown, and so is the recorded one when none is given.
	for _, args := range [][]string{{"status", "--permits", "1", name}, {"status", name}} {
		r := run(t, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "1 permits") || !strings.Contains(r.stdout, "held: 1 of 1 permits") {
			t.Fatalf("%v: want the semaphore of 1 permit, held, got %v", args, r)
		}
	}

	// Once the permit of 1 is released, the name takes another number.
	if err := held[0].Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	r = run(t, "exec", ttlFlag, "--permits", "2", name, "--", "touch", marker)
	if r.code != 0 || !fileExists(marker) {
		t.Fatalf("--permits 2 after the permit of 1 was released: want the command run, got %v", r)
	}
}
