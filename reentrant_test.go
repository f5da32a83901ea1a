package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// noSelfWait bounds an Acquire that reentrancy should answer at once: if it
// waited for its own lock instead, the test fails rather than hangs.
var noSelfWait = redlock.WithMaxWait(2 * time.Second)

func TestAcquireWithTheLockInContextReturnsANestedHandle(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	bg := context.Background()

	outer, err := c.Acquire(bg, "reenter")
	if err != nil {
		t.Fatal(err)
	}
	ctx := redlock.ContextWithLock(bg, outer)
	nested, err := c.Acquire(ctx, "reenter", noSelfWait)
	if err != nil {
		t.Fatalf("nested acquire: %v", err)
	}
	if nested == outer || nested.Token() != outer.Token() || !nested.Deadline().Equal(outer.Deadline()) || nested.Name() != "reenter" {
		t.Fatalf("nested handle: token %d deadline %v, outer: token %d deadline %v", nested.Token(), nested.Deadline(), outer.Token(), outer.Deadline())
	}
	// TryAcquire reenters too, and so does a nested handle's own context.
	again, err := c.TryAcquire(redlock.ContextWithLock(bg, nested), "reenter")
	if err != nil || again.Token() != outer.Token() {
		t.Fatalf("TryAcquire through a nested handle's context: %v", err)
	}

	if err := nested.Release(bg); err != nil {
		t.Fatalf("nested release: %v", err)
	}
	if !errors.Is(nested.Err(), redlock.ErrNotHeld) {
		t.Fatalf("nested Err after its release: %v", nested.Err())
	}
	select {
	case <-nested.Done():
	default:
		t.Fatal("nested Done still open after its release")
	}
	if err := nested.Release(bg); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("second nested release: %v, want ErrNotHeld", err)
	}
	if err := outer.Err(); err != nil {
		t.Fatalf("the nested release ended the outer lock: %v", err)
	}
	if left := keysLeft(t, cl, c, "reenter"); len(left) < c.Quorum() {
		t.Fatalf("after the nested release the key is on %v only, want a quorum", left)
	}
	if err := again.Release(bg); err != nil {
		t.Fatal(err)
	}
	if err := outer.Release(bg); err != nil {
		t.Fatalf("outer release: %v", err)
	}
	keysGone(t, cl, c, "reenter")
}

func TestDoReentersItsOwnLock(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	bg := context.Background()
	var outerToken, innerToken int64
	err := c.Do(bg, "do-reenter", func(ctx context.Context, l *redlock.Lock) error {
		outerToken = l.Token()
		return c.Do(ctx, "do-reenter", func(ctx context.Context, inner *redlock.Lock) error {
			innerToken = inner.Token()
			return nil
		}, noSelfWait)
	})
	if err != nil {
		t.Fatalf("nested Do: %v", err)
	}
	if innerToken == 0 || innerToken != outerToken {
		t.Fatalf("inner token %d, outer %d", innerToken, outerToken)
	}
	keysGone(t, cl, c, "do-reenter")
}

func TestNestedHandleFollowsTheOuterLock(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	bg := context.Background()

	t.Run("outer released", func(t *testing.T) {
		outer, err := c.Acquire(bg, "follow-release")
		if err != nil {
			t.Fatal(err)
		}
		nested, err := c.Acquire(redlock.ContextWithLock(bg, outer), "follow-release", noSelfWait)
		if err != nil {
			t.Fatal(err)
		}
		done := nested.Done()
		if err := outer.Release(bg); err != nil {
			t.Fatal(err)
		}
		<-done
		if err := nested.Err(); !errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("nested Err after the outer release: %v, want ErrLockLost", err)
		}
		if err := nested.Extend(bg); !errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("nested Extend after the outer release: %v, want ErrLockLost", err)
		}
		if err := nested.Release(bg); !errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("nested Release after the outer release: %v, want ErrLockLost", err)
		}
	})

	t.Run("outer expired", func(t *testing.T) {
		outer, err := c.Acquire(bg, "follow-expiry", redlock.WithTTL(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		nested, err := c.Acquire(redlock.ContextWithLock(bg, outer), "follow-expiry", noSelfWait)
		if err != nil {
			t.Fatal(err)
		}
		<-nested.Done() // closes when the outer validity ends
		if err := nested.Err(); !errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("nested Err after the outer expired: %v", err)
		}
		if !errors.Is(outer.Err(), redlock.ErrLockLost) {
			t.Fatalf("outer Err: %v", outer.Err())
		}
	})

	t.Run("nested extend extends the outer lock", func(t *testing.T) {
		outer, err := c.Acquire(bg, "follow-extend")
		if err != nil {
			t.Fatal(err)
		}
		defer outer.Release(bg)
		nested, err := c.Acquire(redlock.ContextWithLock(bg, outer), "follow-extend", noSelfWait)
		if err != nil {
			t.Fatal(err)
		}
		before := outer.Deadline()
		if err := nested.Extend(bg); err != nil {
			t.Fatalf("nested extend: %v", err)
		}
		if !outer.Deadline().After(before) || !nested.Deadline().Equal(outer.Deadline()) {
			t.Fatalf("outer deadline %v -> %v, nested %v", before, outer.Deadline(), nested.Deadline())
		}
		if err := nested.Release(bg); err != nil {
			t.Fatal(err)
		}
		if err := nested.Extend(bg); !errors.Is(err, redlock.ErrNotHeld) {
			t.Fatalf("extend of a released nested handle: %v, want ErrNotHeld", err)
		}
		if outer.Err() != nil {
			t.Fatalf("outer ended: %v", outer.Err())
		}
	})
}

func TestContextWithAnEndedLockDoesNotAcquire(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	bg := context.Background()

	released, err := c.Acquire(bg, "ended")
	if err != nil {
		t.Fatal(err)
	}
	ctx := redlock.ContextWithLock(bg, released)
	if err := released.Release(bg); err != nil {
		t.Fatal(err)
	}
	// A node that answered after the quorum deletes its key once its call
	// is done, after Release returned: wait for that, so a key seen below
	// can only come from a new acquire.
	eventually(t, 5*time.Second, "the released lock's keys are gone", func() bool { return len(keysLeft(t, cl, c, "ended")) == 0 })
	if l, err := c.Acquire(ctx, "ended", noSelfWait); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("acquire with a released lock in the context: %v, %v; want ErrNotHeld", l, err)
	}
	if left := keysLeft(t, cl, c, "ended"); len(left) != 0 {
		t.Fatalf("an acquire was attempted: keys on %v", left)
	}

	lost, err := c.Acquire(bg, "lost", redlock.WithTTL(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-lost.Done()
	if _, err := c.TryAcquire(redlock.ContextWithLock(bg, lost), "lost"); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("acquire with a lost lock in the context: %v; want ErrLockLost", err)
	}
}

func TestReentrancyNeedsTheSameClientAndName(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c1 := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	c2 := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	bg := context.Background()

	outer, err := c1.Acquire(bg, "mine")
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Release(bg)
	ctx := redlock.ContextWithLock(bg, outer)
	if _, err := c2.TryAcquire(ctx, "mine"); !errors.Is(err, redlock.ErrLocked) {
		t.Fatalf("another client with the lock in its context: %v, want ErrLocked", err)
	}
	other, err := c1.TryAcquire(ctx, "other")
	if err != nil {
		t.Fatalf("another name: %v", err)
	}
	if other.Token() == outer.Token() {
		t.Fatal("another name got the outer lock's token")
	}
	if err := other.Release(bg); err != nil {
		t.Fatal(err)
	}
	keysGone(t, cl, c1, "other")
}
