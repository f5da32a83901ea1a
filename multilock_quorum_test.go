package redlock

// The multi-lock's quorum decisions over fake nodes: a name won on some
// nodes only, and a name refused at extend, each decided on its own.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quorumlabs/redlock/observe"
)

func TestMultiLockPartialWinLeavesNoKeyOnAnyNode(t *testing.T) {
	fs := fakes(3)
	var mu sync.Mutex
	var attempts []string // the names attempted, in order, and how each ended
	c := newFakeClient(t, fs, Options{TTL: time.Minute, Observer: observe.Func(func(e observe.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Kind {
		case observe.Acquired:
			attempts = append(attempts, e.Name+":won")
		case observe.AcquireFailed:
			attempts = append(attempts, e.Name+":lost")
		}
	})})
	// "b" is held by another owner on two nodes: our attempt wins it on the
	// third alone, which is no quorum, after "a" was taken everywhere.
	fs[0].set(c.lockKey("b"), "other")
	fs[1].set(c.lockKey("b"), "other")

	_, err := c.TryAcquireMulti(context.Background(), []string{"c", "b", "a"})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("multi-lock with b held on 2 of 3 nodes: %v, want ErrLocked", err)
	}
	_ = c.Close() // waits for the background cleanups
	for i, f := range fs {
		if v, ok := f.get(c.lockKey("a")); ok {
			t.Errorf("node %d still holds a (%s)", i, v)
		}
		if _, ok := f.get(c.lockKey("c")); ok {
			t.Errorf("node %d holds c, which sorts after the name that failed", i)
		}
		if v, _ := f.get(c.lockKey("b")); i < 2 && v != "other" {
			t.Errorf("node %d: the other owner's b became %q", i, v)
		}
	}
	if _, ok := fs[2].get(c.lockKey("b")); ok {
		t.Error("node 2 still holds our partial win of b")
	}
	// Sorted order: a, then b, which failed; c was never tried.
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"a:won", "b:lost"}; !slices.Equal(attempts, want) {
		t.Errorf("attempts %v, want %v", attempts, want)
	}
}

func TestMultiLockExtendDecidesEachNameByItsOwnQuorum(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, Options{TTL: time.Minute})
	m, err := c.TryAcquireMulti(context.Background(), []string{"x", "y"})
	if err != nil {
		t.Fatal(err)
	}
	done := m.Done()
	// y passes to another owner on two nodes (its keys expired, say); x
	// stays ours everywhere.
	fs[0].set(c.lockKey("y"), "other")
	fs[1].set(c.lockKey("y"), "other")

	err = m.Extend(context.Background())
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("extend with y taken on 2 of 3 nodes: %v, want ErrLockLost", err)
	}
	<-done
	if !errors.Is(m.Err(), ErrLockLost) || m.Lock("x").Err() != nil {
		t.Fatalf("after the extend: multi %v, x %v", m.Err(), m.Lock("x").Err())
	}
	if err := m.Release(context.Background()); !errors.Is(err, ErrLockLost) {
		t.Fatalf("release: %v, want the loss of y", err)
	}
	_ = c.Close()
	for i, f := range fs {
		if _, ok := f.get(c.lockKey("x")); ok {
			t.Errorf("node %d still holds x", i)
		}
	}
	// Each node got both extends: one batch per node, not one round per name.
	for i, f := range fs {
		n := 0
		for _, call := range f.history() {
			if len(call) > 7 && call[:7] == "extend:" {
				n++
			}
		}
		if n != 2 {
			t.Errorf("node %d ran %d extends, want 2 (x and y)", i, n)
		}
	}
}
