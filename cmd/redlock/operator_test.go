package main

import (
	"context"
	"path/filepath"
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
