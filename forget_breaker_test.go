package redlock_test

// Schedules of issue 25 tried by its breaker: nodes that forget, under
// settings and timings nobody designed for.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// An operator turns the AOF off at run time (CONFIG SET appendonly no, to
// spare the disk during a bulk load, say) on persistent nodes, and a
// client sees it at a probe. X takes a lock; the nodes restart with their
// config file's settings (appendonly yes, appendfsync always) and load the
// AOF as it was when it was turned off: X's key is not in it. The restart
// looks persistent, and the data-kept marker, written before, is in the
// old AOF. A client that saw the nodes without persistence must not count
// them at once.
func TestPersistenceTurnedOffAtRunTimeThenARestartIsALoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := redistest.StartT(t, 3, redistest.Options{Persistence: true})
	newClient := func() *redlock.Client {
		c, err := redlock.New(cl.Clients(), redlock.Options{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	x, y := newClient(), newClient()
	for _, c := range []*redlock.Client{x, y} { // both meet persistent nodes
		for i, info := range c.Nodes(ctx) {
			if info.Err != nil || !info.Voting {
				t.Fatalf("node %d, persistent: %+v, want it voting", i, info)
			}
		}
	}
	off := cl.Servers[:2]
	for _, s := range off {
		if err := s.Client().ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	y.Nodes(ctx) // Y sees them without persistence
	const name = "job"
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	eventually(t, 5*time.Second, "X's key on every node", func() bool {
		for _, s := range cl.Servers {
			if n, err := s.Client().Exists(ctx, x.LockKey(name)).Result(); err != nil || n != 1 {
				return false
			}
		}
		return true
	})
	for _, s := range off {
		if err := s.Restart(true); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Client().Exists(ctx, x.LockKey(name)).Result(); err != nil || n != 0 {
			t.Fatalf("%s kept X's key across its restart (%d, %v): nothing was lost", s.Addr, n, err)
		}
	}
	left := time.Until(held.Deadline())
	l, err := y.TryAcquire(ctx, name)
	if err == nil {
		_ = l.Release(ctx)
		t.Fatalf("Y took lock %q after 2 of 3 nodes restarted from an AOF turned off at run time, while X holds it for %.1fs more", name, left.Seconds())
	}
	if !errors.Is(err, redlock.ErrNodeSittingOut) || !strings.Contains(err.Error(), "persist") {
		t.Fatalf("want the restarted nodes sitting out, got %v", err)
	}
}

// A client that saw a quorum of persistent nodes flushed during a hold
// makes them sit out the grace. Then they restart (a rolling restart, a
// crash): persistent, they come back as they were, without X's key, and
// with the data-kept marker the client's probe wrote after the flush. The
// restart must not end the sit-out the flush began.
func TestAFlushedNodeThatRestartsStillSitsOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := redistest.StartT(t, 3, redistest.Options{Persistence: true})
	newClient := func() *redlock.Client {
		c, err := redlock.New(cl.Clients(), redlock.Options{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	x, y := newClient(), newClient()
	y.Nodes(ctx) // Y meets the nodes and their markers
	const name = "job"
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	eventually(t, 5*time.Second, "X's key on every node", func() bool {
		for _, s := range cl.Servers {
			if n, err := s.Client().Exists(ctx, x.LockKey(name)).Result(); err != nil || n != 1 {
				return false
			}
		}
		return true
	})
	flushed := cl.Servers[:2]
	for _, s := range flushed {
		if err := s.Client().FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, info := range y.Nodes(ctx)[:2] {
		if info.Voting {
			t.Fatalf("node %d votes right after it was flushed: %+v", i, info)
		}
	}
	for _, s := range flushed {
		if err := s.Restart(true); err != nil {
			t.Fatal(err)
		}
	}
	// Y meets the restarted servers (a probe, as its next call after a
	// dial would make).
	for i, info := range y.Nodes(ctx)[:2] {
		t.Logf("node %d after its restart: voting %v, %s", i, info.Voting, info.SitOutReason)
	}
	left := time.Until(held.Deadline())
	l, err := y.TryAcquire(ctx, name)
	if err == nil {
		_ = l.Release(ctx)
		t.Fatalf("Y took lock %q after 2 of 3 nodes were flushed and restarted, while X holds it for %.1fs more", name, left.Seconds())
	}
	if !errors.Is(err, redlock.ErrNodeSittingOut) || !strings.Contains(err.Error(), "data-kept marker") {
		t.Fatalf("want the flushed nodes still sitting out for the flush, got %v", err)
	}
}
