package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

func TestStatusShowsHolderAndFence(t *testing.T) {
	c := libClient(t)
	name := lockName(t)
	lock := holdLock(t, c, name)
	r := run(t, "status", name)
	if r.code != 0 {
		t.Fatalf("want exit 0, got %v", r)
	}
	token := strconv.FormatInt(lock.Token(), 10)
	for _, want := range []string{"held: yes", "on 3 of 3 nodes", "highest fence: " + token} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("status of a held lock lacks %q: %v", want, r)
		}
	}
	for _, addr := range shared.Addrs() {
		if !strings.Contains(r.stdout, addr) {
			t.Fatalf("status lacks node %s: %v", addr, r)
		}
	}

	if err := lock.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	r = run(t, "status", name, "--timeout", "3s") // flags after the name work too
	if r.code != 0 || !strings.Contains(r.stdout, "held: no") || !strings.Contains(r.stdout, "highest fence: "+token) {
		t.Fatalf("want a free lock that keeps its fence %s, got %v", token, r)
	}
}

func TestStatusNeedsAQuorumOfAnswers(t *testing.T) {
	dead := "redis://" + deadAddr(t)
	urls := shared.URLs()
	// One dead node of four: a quorum of three still answers.
	r := run(t, "status", "--nodes", strings.Join(append(urls, dead), ","), lockName(t))
	if r.code != 0 || !strings.Contains(r.stdout, "unreachable") {
		t.Fatalf("want exit 0 and the dead node shown unreachable, got %v", r)
	}
	// Two of three unreachable: no verdict can be trusted.
	r = run(t, "status", "--nodes", urls[0]+","+dead+",redis://"+deadAddr(t), lockName(t))
	if r.code != exitFailure || !strings.Contains(r.stderr, "fewer than the quorum") {
		t.Fatalf("want exit %d and a quorum complaint, got %v", exitFailure, r)
	}
}

// deadAddr is a local address nothing listens on: a server started and stopped.
func deadAddr(t *testing.T) string {
	t.Helper()
	c, err := redistest.Start(1, redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := c.Addrs()[0]
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestNodesReportsEveryNodeAndIndependence(t *testing.T) {
	// Nodes that keep no log (the shared ones persist), old enough to vote.
	volatile := redistest.StartT(t, 3, redistest.Options{})
	if err := waitUntilVoting(volatile.URLs(), testTTL); err != nil {
		t.Fatal(err)
	}
	nodes := "--nodes=" + strings.Join(volatile.URLs(), ",")
	r := run(t, "nodes", ttlFlag, nodes)
	if r.code != 0 {
		t.Fatalf("want exit 0, got %v", r)
	}
	for _, want := range []string{"independent: yes: 3 distinct masters", "quorum: yes: 3 of 3 nodes vote", "locks: yes", "master", ": no append-only file, so a crash loses keys"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("nodes output lacks %q: %v", want, r)
		}
	}
	for _, addr := range volatile.Addrs() {
		if !strings.Contains(r.stdout, addr) {
			t.Fatalf("nodes output lacks %s: %v", addr, r)
		}
	}

	// The restart grace off on nodes that keep no log: the unsafe setting gets a warning.
	r = run(t, "nodes", ttlFlag, nodes, "--restart-grace", "off")
	if r.code != 0 || !strings.Contains(r.stdout, "WARNING") {
		t.Fatalf("want exit 0 and a persistence warning, got %v", r)
	}

	// One server under two names is one vote counted twice.
	port := shared.Servers[0].Port
	twice := fmt.Sprintf("redis://127.0.0.1:%d,redis://localhost:%d,%s", port, port, shared.URLs()[1])
	r = run(t, "nodes", ttlFlag, "--nodes", twice)
	if r.code != exitFailure || !strings.Contains(r.stdout, "independent: no") {
		t.Fatalf("want exit %d and the set reported not independent, got %v", exitFailure, r)
	}
}

func TestUnlockRefusesWithoutForceOrConfirmation(t *testing.T) {
	c := libClient(t)
	name := lockName(t)
	holdLock(t, c, name)

	if r := run(t, "unlock", name); r.code != exitUsage || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("without --force: want exit %d and a hint at --force, got %v", exitUsage, r)
	}
	// No terminal: /dev/null, and a pipe nobody writes to or closes (a hang would time out).
	if r := run(t, "unlock", "--force", name); r.code != exitUsage || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("stdin /dev/null: want exit %d and a hint at --yes, got %v", exitUsage, r)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	defer pr.Close()
	if r := (cli{args: []string{"unlock", "--force", name}, stdin: pr}).run(t); r.code != exitUsage {
		t.Fatalf("stdin an open pipe: want exit %d, got %v", exitUsage, r)
	}

	// A terminal that answers no.
	if r := runOnTerminal(t, "n\n", "unlock", "--force", name); r.code != exitFailure || !strings.Contains(r.stdout, "[y/N]") {
		t.Fatalf("answer n: want the question and exit %d, got %v", exitFailure, r)
	}
	if !held(t, c, name) {
		t.Fatal("the lock was deleted although nobody confirmed")
	}
}

func TestUnlockDeletesAndRaisesTheFence(t *testing.T) {
	c := libClient(t)
	for _, how := range []struct {
		name string
		run  func(t *testing.T, lock string) result
	}{
		{"--yes", func(t *testing.T, lock string) result { return run(t, "unlock", "--force", "--yes", lock) }},
		{"confirmed on the terminal", func(t *testing.T, lock string) result {
			return runOnTerminal(t, "y\n", "unlock", "--force", lock)
		}},
	} {
		t.Run(how.name, func(t *testing.T) {
			name := lockName(t)
			lock := holdLock(t, c, name)
			r := how.run(t, name)
			if r.code != 0 || !strings.Contains(r.stdout, "deleted the lock key on 3 of 3 nodes") {
				t.Fatalf("want exit 0 and 3 keys deleted, got %v", r)
			}
			// The output says what was done: the fence registers were raised, not kept.
			if !strings.Contains(r.stdout, "raised the fence register by one on 3 of 3 nodes") || strings.Contains(r.stdout, "kept") {
				t.Fatalf("the output does not say the fence registers were raised: %v", r)
			}
			st, err := c.Inspect(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			if st.Held || st.Fence != lock.Token()+1 {
				t.Fatalf("want a free lock whose fence is raised to %d, got held=%v fence=%d", lock.Token()+1, st.Held, st.Fence)
			}
			next, err := c.TryAcquire(context.Background(), name)
			if err != nil {
				t.Fatalf("the lock cannot be taken after unlock: %v", err)
			}
			defer next.Release(context.Background())
			if next.Token() <= lock.Token() {
				t.Fatalf("the next holder's token %d is not above the old one %d", next.Token(), lock.Token())
			}
		})
	}
}

// runOnTerminal runs the binary with a pseudo-terminal as stdin, on which answer is typed.
func runOnTerminal(t *testing.T, answer string, args ...string) result {
	t.Helper()
	master, slave := openPTY(t)
	defer master.Close()
	defer slave.Close()
	if _, err := master.WriteString(answer); err != nil {
		t.Fatal(err)
	}
	return cli{args: args, stdin: slave}.run(t)
}

// openPTY opens a pseudo-terminal pair with the Linux ioctls, to need no dependency for it.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening /dev/ptmx: %v", err)
	}
	var unlock int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		master.Close()
		t.Fatalf("unlocking the pty: %v", errno)
	}
	var n uint32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno != 0 {
		master.Close()
		t.Fatalf("numbering the pty: %v", errno)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Fatalf("opening the pty's terminal: %v", err)
	}
	return master, slave
}

// The chaos and bench front-ends run the modules' own commands: a quick
// listing and a refused flag show they are wired, without running either.
func TestChaosAndBenchFrontEnds(t *testing.T) {
	r := run(t, "chaos", "--list")
	if r.code != 0 || !strings.Contains(r.stdout, "baseline-failover") || !strings.Contains(r.stdout, "restart-empty-grace") {
		t.Fatalf("chaos --list: %v", r)
	}
	r = run(t, "bench", "--sizes", "3,five")
	if r.code == 0 || !strings.Contains(r.stderr, `"five" is not a number`) {
		t.Fatalf("bench with a bad node count: %v", r)
	}
	r = run(t, "chaos", "--duration", "-1s")
	if r.code == 0 || !strings.Contains(r.stderr, "-1s") {
		t.Fatalf("chaos with a negative duration: %v", r)
	}
}

func TestStatusShowsTheFairLockQueue(t *testing.T) {
	c := libClient(t)
	name := lockName(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder, err := c.Acquire(ctx, name, redlock.WithFairness(), redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(context.Background())
	waited := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, name, redlock.WithFairness())
		waited <- err
	}()
	var waiter redlock.QueueEntry
	for deadline := time.Now().Add(5 * time.Second); ; {
		qs, err := c.Queue(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		queued := 0
		for _, q := range qs {
			if len(q.Entries) == 1 {
				queued++
				waiter = q.Entries[0]
			}
		}
		if queued == len(qs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiter not queued on every node: %+v", qs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := run(t, "status", name)
	if r.code != 0 {
		t.Fatalf("want exit 0, got %v", r)
	}
	for _, want := range []string{"held: yes", "fair-lock queue (head first", strconv.FormatInt(waiter.Ticket, 10), waiter.Waiter[:10]} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("status lacks %q: %v", want, r)
		}
	}
	if got := strings.Count(r.stdout, strconv.FormatInt(waiter.Ticket, 10)); got != len(shared.Addrs()) {
		t.Fatalf("the ticket shows on %d lines, want one per node: %v", got, r)
	}
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter: %v", err)
	}
	r = run(t, "status", "--timeout", "3s", lockName(t)+"-free")
	if r.code != 0 || !strings.Contains(r.stdout, "fair-lock queue: empty") {
		t.Fatalf("want an empty queue, got %v", r)
	}
}
