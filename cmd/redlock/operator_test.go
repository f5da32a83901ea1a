package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// These tests run the CLI as an operator does against servers in the states of the capture for
// issue 13, and hold each answer to the truth.

// fiveNodesHeld starts 5 masters and a library client on them that holds name on all of them.
func fiveNodesHeld(t *testing.T, name string) *redistest.Cluster {
	t.Helper()
	cl := redistest.StartT(t, 5, redistest.Options{})
	c, err := redlock.NewFromURLs(cl.URLs(), redlock.Options{TTL: testTTL, RestartGrace: redlock.NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.TryAcquire(context.Background(), name, redlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	return cl
}

// Another owner holds the lock on 4 of 5 nodes and the 5th refuses connections: the lock is
// busy (75), not the service down (69), however the answers are ordered, and the message names
// the failed node too.
func TestExecHeldLockWithANodeDownIsBusy(t *testing.T) {
	name := lockName(t)
	cl := fiveNodesHeld(t, name)
	down := cl.Servers[2]
	if err := down.Kill(); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	for range 5 {
		r := run(t, "exec", ttlFlag, noGrace, "--nodes="+strings.Join(cl.URLs(), ","), name, "--", "touch", marker)
		if r.code != exitNotAcquired {
			t.Fatalf("held on 4 of 5, 1 refusing connections: want exit %d, got %v", exitNotAcquired, r)
		}
		if !strings.Contains(r.stderr, "is held by another owner") {
			t.Fatalf("the message does not say the lock is held: %v", r)
		}
		// The failed node is named when its answer came before the refusals decided.
		if strings.Contains(r.stderr, "failed or sat out") && !strings.Contains(r.stderr, down.Addr) {
			t.Fatalf("the message counts a failed node without naming it: %v", r)
		}
	}
}

// With too few nodes answering, status cannot know whether the lock is held: it says unknown,
// with the reason, and does not exit 0 as for a lock that is not held. With a node down but
// not enough to hide a quorum, "no" stays a verdict.
func TestStatusSaysUnknownWhenTheSilentNodesCouldHoldAQuorum(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	nodes := "--nodes=" + strings.Join(cl.URLs(), ",")
	if err := cl.Servers[4].Kill(); err != nil {
		t.Fatal(err)
	}
	r := run(t, "status", nodes, lockName(t))
	if r.code != 0 || !strings.Contains(r.stdout, "held: no, no owner holds a quorum of 3 nodes") {
		t.Fatalf("1 of 5 down, nothing held: want held: no and exit 0, got %v", r)
	}
	for _, s := range cl.Servers[2:4] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	r = run(t, "status", nodes, lockName(t))
	if r.code == 0 || strings.Contains(r.stdout, "held: no") || !strings.Contains(r.stdout, "held: unknown: only 2 of 5 nodes answered; 3 nodes did not") {
		t.Fatalf("3 of 5 down: want held: unknown and a non-zero exit, got %v", r)
	}
}

// status checks independence as nodes and exec do: a replica or one server listed twice makes
// the verdict unknown and the exit 1.
func TestStatusChecksIndependence(t *testing.T) {
	for _, set := range nodeSets(t) {
		if set.name != "a replica" && set.name != "a duplicate" {
			continue
		}
		t.Run(set.name, func(t *testing.T) {
			r := run(t, "status", "--nodes="+strings.Join(set.urls, ","), lockName(t))
			if r.code != exitFailure || !strings.Contains(r.stdout, "independent: no: ") || !strings.Contains(r.stdout, "held: unknown: the nodes are not independent") {
				t.Fatalf("want independent: no, held: unknown and exit %d, got %v", exitFailure, r)
			}
			if !strings.Contains(r.stderr, "not independent: ") {
				t.Fatalf("the closing error does not say why: %v", r)
			}
		})
	}
}

// A wrong password is reported as such by nodes and by exec --v, not as a node that did not
// answer INFO; the password is never shown.
func TestWrongPasswordIsReportedAsSuch(t *testing.T) {
	auth := redistest.StartT(t, 1, redistest.Options{})
	if err := auth.Servers[0].Client().ConfigSet(context.Background(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	urls := shared.URLs()
	nodes := "--nodes=" + strings.Join([]string{urls[0], urls[1], "redis://:WRONGpw123@" + auth.Addrs()[0]}, ",")
	r := run(t, "nodes", ttlFlag, noGrace, nodes)
	if !strings.Contains(r.stdout, "authentication failed: wrong password or user name (WRONGPASS") || strings.Contains(r.stdout, "INFO") {
		t.Errorf("nodes: want the WRONGPASS refusal, got %v", r)
	}
	r = run(t, "exec", ttlFlag, noGrace, "--v", nodes, lockName(t), "--", "true")
	if r.code != 0 || !strings.Contains(r.stderr, "WRONGPASS") || strings.Contains(r.stderr, "did not report run_id") {
		t.Errorf("exec --v: want the WRONGPASS refusal logged, got %v", r)
	}
	if strings.Contains(r.stdout+r.stderr, "WRONGpw123") {
		t.Errorf("the password is shown: %v", r)
	}
}

// nodes NAME answers whether exec could take NAME now: a lock held by another owner is a no,
// with who holds it.
func TestNodesNameSaysTheLockIsHeld(t *testing.T) {
	name := lockName(t)
	pid, _, wait := startExec(t, []string{"exec", ttlFlag, name, "--", binary, "nodes", ttlFlag, noGrace, name})
	r := wait()
	want := "is held by another owner"
	if r.code != 0 || !strings.Contains(r.stdout, "locks: no: the nodes can take locks, but lock \""+name+"\" "+want) ||
		!strings.Contains(r.stdout, "pid="+strconv.Itoa(pid)) || !strings.Contains(r.stdout, "exec would exit 75 now") {
		t.Fatalf("nodes %s while exec holds it: want a no naming the holder (pid %d), got %v", name, pid, r)
	}
	if r := run(t, "nodes", ttlFlag, noGrace, name); !strings.Contains(r.stdout, "locks: yes") {
		t.Fatalf("nodes %s once released: want yes, got %v", name, r)
	}
}

// Verdicts are lower-case yes/no/unknown, and a closing error is one line with one prefix.
func TestVerdictWordingAndOneLineErrors(t *testing.T) {
	for _, set := range nodeSets(t) {
		switch set.name {
		case "a replica":
			r := run(t, "nodes", ttlFlag, noGrace, "--nodes="+strings.Join(set.urls, ","))
			if !strings.Contains(r.stdout, "independent: no: ") || strings.Contains(r.stdout, ": NO") {
				t.Errorf("want independent: no, got %v", r)
			}
		case "majority down":
			r := run(t, "nodes", ttlFlag, noGrace, "--nodes="+strings.Join(set.urls, ","))
			if len(lines(r.stderr)) != 1 || !strings.HasPrefix(r.stderr, "redlock nodes: ") {
				t.Errorf("want one line of error with its prefix, got %v", r)
			}
		}
	}
	urls := shared.URLs()
	r := run(t, "exec", "--nodes="+strings.Join([]string{urls[0], urls[1], urls[0]}, ","), lockName(t), "--", "true")
	if r.code != exitUsage || strings.Contains(r.stderr, "redlock exec: redlock:") || !strings.Contains(r.stderr, "invalid node ") || strings.Contains(r.stderr, "counted from") {
		t.Errorf("a URL given twice: want exit %d with one prefix, got %v", exitUsage, r)
	}
}

// A stopped node (SIGSTOP) is reported as timed out within a few node timeouts: status and
// nodes do not wait for --timeout (an hour here) to pass.
func TestAStoppedNodeDoesNotHoldStatusAndNodesBack(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{Persistence: true})
	stopped := cl.Servers[2]
	if err := stopped.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stopped.Resume() })
	nodes := "--nodes=" + strings.Join(cl.URLs(), ",")
	for _, args := range [][]string{{"nodes", ttlFlag, noGrace, nodes, "--timeout=1h"}, {"status", nodes, "--timeout=1h", lockName(t)}} {
		r := run(t, args...)
		if !strings.Contains(r.stdout, stopped.Addr) || !strings.Contains(r.stdout, "no answer in time") {
			t.Errorf("%s with a stopped node: want it reported as timed out, got %v", args[0], r)
		}
	}
}

// redis:// to a node that serves TLS only: the node closes the connection, and nodes says to
// use rediss:// rather than a bare EOF.
func TestPlainURLToATLSNodeHintsAtRediss(t *testing.T) {
	tlsOpts, err := redistest.NewPKIT(t, "plain-to-tls").ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	cl := redistest.StartT(t, 1, redistest.Options{TLS: tlsOpts})
	urls := shared.URLs()
	r := run(t, "nodes", ttlFlag, noGrace, "--nodes="+strings.Join([]string{urls[0], urls[1], "redis://" + cl.Addrs()[0]}, ","))
	if !strings.Contains(r.stdout, "write its URL as rediss://") {
		t.Fatalf("want a hint at rediss://, got %v", r)
	}
}
