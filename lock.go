package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lock is a held lock. Its methods are safe for concurrent use.
//
// A lock ends in one of two ways: Release, after which Err matches
// ErrNotHeld, or a loss (its validity passed without an extension, or an
// extension found another owner), after which Err matches ErrLockLost. Done
// is closed at either moment.
type Lock struct {
	c     *Client
	a     *attempt
	token int64
	cfg   lockConfig

	extendMu sync.Mutex // one extend or release at a time: a repair must not follow a release

	mu       sync.Mutex
	deadline time.Time
	err      error
	done     chan struct{} // made on first use of Done
	expiry   *time.Timer   // closes done when the validity ends
}

// Name is the lock's name.
func (l *Lock) Name() string { return l.a.name }

// Token is the fencing token of this acquisition: strictly greater than the
// token of every earlier holder of the lock. Pass it to the guarded
// resource, which must reject tokens lower than one it has seen. It is 0
// when fencing is disabled.
func (l *Lock) Token() int64 { return l.token }

// Deadline is when the lock's validity ends, unless extended. Past it, the
// lock may be held by someone else.
func (l *Lock) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Done is closed when the lock is released or lost.
func (l *Lock) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		if l.err != nil {
			close(l.done)
		} else {
			l.expiry = time.AfterFunc(l.deadline.Sub(l.c.clock.Now()), l.checkExpiry)
		}
	}
	return l.done
}

// Err is nil while the lock is held. After a release it matches ErrNotHeld;
// after a loss, ErrLockLost.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked()
	return l.err
}

func (l *Lock) checkExpiry() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.expireLocked() || l.err != nil {
		return
	}
	l.expiry.Reset(l.deadline.Sub(l.c.clock.Now())) // extended meanwhile
}

// expireLocked marks the lock lost if its validity has passed.
func (l *Lock) expireLocked() bool {
	if l.err != nil || l.c.clock.Now().Before(l.deadline) {
		return false
	}
	l.endLocked(fmt.Errorf("%w: %q: its validity ended at %v", ErrLockLost, l.a.name, l.deadline.Format(time.RFC3339Nano)))
	return true
}

// endLocked records how the lock ended and tells whoever waits on Done.
func (l *Lock) endLocked(err error) {
	if l.err != nil {
		return
	}
	l.err = err
	if l.done != nil {
		close(l.done)
	}
	if l.expiry != nil {
		l.expiry.Stop()
	}
	if errors.Is(err, ErrLockLost) {
		l.c.logger.Warn("redlock: lock lost", "name", l.a.name, "token", l.token, "err", err)
		l.c.emit(Event{Kind: EventLost, Name: l.a.name, Token: l.token, Err: err})
	}
}

// Extend renews the lock for its TTL on a quorum, counting validity from
// the start of this call. A node that lost our key (it restarted empty) gets
// it back, unless a newer token was issued there. It fails with an error
// matching ErrLockLost if the lock was already lost or another owner holds
// it on too many nodes (then the lock is lost for good), ErrNoQuorum if too
// many nodes failed (the lock stays valid until Deadline; try again), or
// ErrNotHeld after Release.
func (l *Lock) Extend(ctx context.Context) error {
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	if err := l.Err(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redlock: extend %q: %w", l.a.name, err)
	}
	c := l.c
	timeout := l.nodeTimeout()
	args := l.extendArgs()
	start := c.clock.Now()
	err := c.broadcast(ctx, "extend", l.a.name, timeout, timeout, func(ctx context.Context, n *node) (bool, error) {
		if err := c.ready(ctx, n); err != nil {
			return false, err
		}
		if err := c.registered(ctx, n, l.a.ttl, timeout); err != nil {
			return false, err
		}
		// The extend may re-create our key (a repair), so a release on
		// this node must wait for it, as for the acquire. It can still
		// be running after Extend returned: broadcast decides early.
		if !l.a.enter(n) {
			return false, ErrNotHeld
		}
		sent := c.clock.Now()
		vals, err := n.run.run(ctx, extendScript, args)
		return l.extendAnswer(ctx, n, vals, err, sent)
	})
	return l.extended(start, err)
}

// nodeTimeout is the per-node timeout of the lock's TTL.
func (l *Lock) nodeTimeout() time.Duration {
	timeout, _ := l.c.opts.nodeTimeout(l.a.ttl, "TTL") // checked at acquire
	return timeout
}

// extendArgs builds the extend script's command for this lock.
func (l *Lock) extendArgs() []any {
	a := l.a
	return extendScript.args(a.keys[:], a.value, a.ttl.Milliseconds(), l.token, l.c.fenceLifetimeArg)
}

// extendAnswer records what an extend call sent to n at sent left on the
// node and tells whether the node still holds the lock for us.
func (l *Lock) extendAnswer(ctx context.Context, n *node, vals []int64, err error, sent time.Time) (bool, error) {
	outcome := callUnsure // no answer: the script may still run
	var status int64 = 1  // an unexpected reply counts as ours
	if errors.Is(err, errNotSent) {
		outcome = callNoKey
	}
	if err == nil {
		if len(vals) == 3 {
			status = vals[0]
		}
		outcome = callNoKey
		if status == 1 || status == 2 {
			outcome = callMayHold
		}
	}
	l.a.leave(n, outcome)
	if err != nil {
		return false, err
	}
	if len(vals) != 3 {
		return false, fmt.Errorf("redlock: unexpected extend reply %v", vals)
	}
	if err := l.c.recheck(ctx, n, vals[1], vals[2], sent, l.c.clock.Now()); err != nil {
		return false, err
	}
	switch status {
	case 1, 2:
		return true, nil
	case -1:
		return false, errNewerToken
	}
	return false, errOtherOwner
}

// extended concludes an extension that started at start and whose quorum
// round ended with err: the new validity, or why there is none.
func (l *Lock) extended(start time.Time, err error) error {
	c, a := l.c, l.a
	now := c.clock.Now()
	if err != nil {
		c.emit(Event{Kind: EventExtendFailed, Name: a.name, Token: l.token, Elapsed: now.Sub(start), Err: err})
		var qe *QuorumError
		if errors.As(err, &qe) && l.refusedBy(qe) > len(c.nodes)-c.quorum() {
			lost := &lostError{err}
			l.mu.Lock()
			l.endLocked(lost)
			l.mu.Unlock()
			a.releaseInBackground() // whatever repairs this extend made
			return lost
		}
		return err
	}
	valid := validity(a.ttl, now.Sub(start), c.opts.DriftFactor)
	if valid <= 0 {
		return fmt.Errorf("%w: extending %q took %v of its %v TTL", ErrValidityTooShort, a.name, now.Sub(start), a.ttl)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.deadline = now.Add(valid)
	}
	c.emit(Event{Kind: EventExtended, Name: a.name, Token: l.token, Elapsed: now.Sub(start), Validity: valid})
	return nil
}

var (
	errOtherOwner = errors.New("another owner holds the lock here")
	errNewerToken = errors.New("a newer fencing token was issued here")
)

// refusedBy counts the nodes that definitely no longer hold our lock.
func (l *Lock) refusedBy(qe *QuorumError) int {
	n := 0
	if qe.Errors != nil {
		for _, err := range qe.Errors.Errors {
			if errors.Is(err, errOtherOwner) || errors.Is(err, errNewerToken) {
				n++
			}
		}
	}
	return n
}

// Release deletes the lock on every node where it is still ours, with a
// context of its own and a bounded wait, so a cancelled caller leaves no key
// behind; ctx is not used for the node calls. It returns nil if the lock was
// still held by us, an error matching ErrLockLost if it had been lost
// meanwhile (the guarded work may have overlapped another holder's),
// ErrNoQuorum if too many nodes failed to answer (their keys expire with the
// TTL), or ErrNotHeld if it was already released.
func (l *Lock) Release(ctx context.Context) error {
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	l.mu.Lock()
	l.expireLocked()
	prior := l.err
	if errors.Is(prior, ErrNotHeld) {
		l.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrNotHeld, l.a.name)
	}
	l.endLocked(ErrNotHeld)
	l.mu.Unlock()

	c, a := l.c, l.a
	deleted, errs := a.release()
	c.waiters.notify(a.topic, a.value, true)
	c.emit(Event{Kind: EventReleased, Name: a.name, Token: l.token, Err: prior})
	switch {
	case prior != nil:
		return prior
	case deleted >= c.quorum():
		return nil
	case errs != nil:
		return &QuorumError{Op: "release", Name: a.name, Won: deleted, Needed: c.quorum(), Errors: errs}
	}
	return fmt.Errorf("%w: %q: only %d of the %d needed nodes still held it at release", ErrLockLost, a.name, deleted, c.quorum())
}
