package redlock

// Reentrancy, the Go way: a held lock travels in a context, never with a
// goroutine. Code that runs under a lock and calls, through any number of
// layers, code that takes the same lock gets a nested handle instead of
// waiting for itself until the lock expires.
//
// A nested handle adds no safety of its own: it is a view of the outer
// lock. The nodes hold one key per name and owner; the nested handle has no
// key, no token and no validity beyond the outer lock's (docs/PROTOCOL.md,
// "Reentrancy").

import (
	"context"
	"errors"
	"fmt"
)

// heldKey is the context key of the locks a context carries.
type heldKey struct{}

// heldLocks is what a context carries: the locks added by the innermost
// ContextWithLock, then those of the contexts it was derived from.
type heldLocks struct {
	locks []*Lock
	next  *heldLocks
}

// ContextWithLock returns a copy of ctx that carries the given held locks.
// Acquire, TryAcquire and Do called with that context (or one derived from
// it) for the name of one of them, on the same Client, return a nested
// handle of it at once instead of waiting for their own release. Do puts its
// lock in the context it gives its callback by itself; use ContextWithLock
// after Acquire, or with MultiLock.Locks.
//
// A lock of another Client is not reentered: that client is another owner
// and waits like any other. A lock that ended (released or lost) while the
// context still carries it is not reentered either: Acquire with that
// context fails with the lock's own error (matching ErrNotHeld or
// ErrLockLost), because the code holding the context believes it still runs
// under the lock, and a fresh acquisition would hide that it no longer does.
func ContextWithLock(ctx context.Context, locks ...*Lock) context.Context {
	var live []*Lock
	for _, l := range locks {
		if l != nil {
			live = append(live, l)
		}
	}
	if len(live) == 0 {
		return ctx
	}
	next, _ := ctx.Value(heldKey{}).(*heldLocks)
	return context.WithValue(ctx, heldKey{}, &heldLocks{locks: live, next: next})
}

// reenter looks in ctx for a lock of c called name. It returns a nested
// handle of it, or the error of the lock if it ended; ok is false when ctx
// carries no such lock and the caller must acquire as usual.
func (c *Client) reenter(ctx context.Context, name string) (nested *Lock, ok bool, err error) {
	for h, _ := ctx.Value(heldKey{}).(*heldLocks); h != nil; h = h.next {
		for _, l := range h.locks {
			// Only the name's own key is reentered (a mutex, plain or
			// fair): a reader, a writer or a permit of the same name is
			// not the mutex of that name.
			if l.c != c || l.a.name != name || !l.a.spec.nameKey {
				continue
			}
			if err := l.Err(); err != nil {
				return nil, true, fmt.Errorf("redlock: acquire %q: the context carries this lock, which has ended: %w", name, err)
			}
			outer := l
			if l.outer != nil {
				outer = l.outer
			}
			return &Lock{c: c, a: outer.a, token: outer.token, maxExtensions: outer.maxExtensions, outer: outer}, true, nil
		}
	}
	return nil, false, nil
}

// A nested handle (Lock.outer set) keeps in err its own release
// (ErrNotHeld), or the outer lock's end once its Done saw it; until then
// its state is read from the outer lock.

// nestedErr is Err for a nested handle.
func (l *Lock) nestedErr() error {
	l.mu.Lock()
	own := l.err
	l.mu.Unlock()
	if own != nil {
		return own
	}
	return l.outerEnded(l.outer.Err())
}

// outerEnded is the nested handle's view of the outer lock's error. The
// outer lock's release while the nested handle is still held is a loss for
// the nested holder: its work may now overlap another owner's.
func (l *Lock) outerEnded(err error) error {
	if errors.Is(err, ErrNotHeld) {
		return fmt.Errorf("%w: %q: the outer lock was released while a nested handle was held", ErrLockLost, l.a.name)
	}
	return err
}

// nestedDone is Done for a nested handle: closed when the outer lock ends
// or the nested handle is released, whichever comes first.
func (l *Lock) nestedDone() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		if l.err == nil {
			l.err = l.outerEnded(l.outer.Err()) // ended already: closed at once
		}
		if l.err != nil {
			close(l.done)
		} else {
			// It ends with the outer lock or with this handle's release,
			// both at the latest when the outer validity ends.
			outer, mine := l.outer.Done(), l.done
			go func() {
				select {
				case <-outer:
					err := l.outerEnded(l.outer.Err())
					l.mu.Lock()
					if l.err == nil { // not released meanwhile
						l.err = err // the outer lock reported the loss already
						close(l.done)
					}
					l.mu.Unlock()
				case <-mine:
				}
			}()
		}
	}
	return l.done
}

// nestedExtend is Extend for a nested handle: it extends the outer lock,
// which is the only lock on the nodes. Code that extends its lock works the
// same whether it runs nested or not; the extension outlives the nested
// handle, as the outer lock does.
func (l *Lock) nestedExtend(ctx context.Context) error {
	if err := l.nestedErr(); err != nil {
		return err
	}
	if err := l.outer.Extend(ctx); err != nil {
		if errors.Is(err, ErrNotHeld) {
			return l.nestedErr()
		}
		return err
	}
	return nil
}

// nestedRelease is Release for a nested handle: it ends the handle and
// leaves the outer lock held. It reports, as Release does, whether the
// lock was still held up to now.
func (l *Lock) nestedRelease() error {
	prior := l.nestedErr()
	if errors.Is(prior, ErrNotHeld) {
		return prior
	}
	l.mu.Lock()
	l.endLocked(notHeld(l.a.name, " (nested handle)"))
	l.mu.Unlock()
	return prior
}
