package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// TestFaultsExample is the documentation's example (redistest/README.md,
// docs/TESTING.md): a test starts its own nodes, breaks some, and the lock
// still works with a majority.
func TestFaultsExample(t *testing.T) {
	nodes := redistest.StartT(t, 5, redistest.Options{Persistence: true})
	locker, err := redlock.New(nodes.Clients(), redlock.Options{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()

	if err := nodes.Servers[0].Kill(); err != nil { // SIGKILL, waits until reaped
		t.Fatal(err)
	}
	if err := nodes.Servers[0].Restart(false); err != nil { // same port, data dir wiped: a node that lost its disk
		t.Fatal(err)
	}
	if err := nodes.Servers[1].Pause(); err != nil { // SIGSTOP: connections stay open, nothing answers
		t.Fatal(err)
	}
	defer nodes.Servers[1].Resume()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := locker.Acquire(ctx, "job") // three of five nodes still answer
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
