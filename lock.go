package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlabs/redlock/observe"
)

// Lock is a held lock. Its methods are safe for concurrent use.
//
// A lock ends in one of two ways: Release, after which Err matches
// ErrNotHeld, or a loss (its validity passed without an extension, or an
// extension found another owner), after which Err matches ErrLockLost. Done
// is closed at either moment.
//
// A nested handle (see ContextWithLock) is a view of an outer lock: its
// Token and Deadline are the outer lock's, Extend extends the outer lock,
// Release ends only the nested handle, and Done and Err report the end of
// either (the outer lock's release counts as a loss for the nested holder).
type Lock struct {
	c     *Client
	a     *attempt
	token int64
	// maxExtensions bounds the auto-extensions (0: no bound). The lock keeps
	// this one setting of its lockConfig: a smaller Lock is a smaller
	// allocation on every acquire.
	maxExtensions int
	outer         *Lock // set on a nested handle (reentrant.go): the lock it is a view of

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
//
// A reader of a read-write lock shares the lock, so its token need not be
// above every earlier holder's: it is at least the token of every writer
// whose lock ended before the reader's began, and below the token of every
// writer whose lock began after the reader's ended (see RWLock).
func (l *Lock) Token() int64 { return l.token }

// Deadline is when the lock's validity ends, unless extended. Past it, the
// lock may be held by someone else.
func (l *Lock) Deadline() time.Time {
	if l.outer != nil {
		return l.outer.Deadline()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Done is closed when the lock is released or lost.
func (l *Lock) Done() <-chan struct{} {
	if l.outer != nil {
		return l.nestedDone()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		switch {
		case l.err != nil:
			close(l.done)
		case l.expireLocked():
			// Its validity ended before anyone asked: expireLocked closed
			// the channel, so a holder that polls Done never sees an
			// ended lock as held (a timer of negative delay fires later).
		default:
			l.expiry = time.AfterFunc(l.deadline.Sub(l.c.clock.Now()), l.checkExpiry)
		}
	}
	return l.done
}

// Err is nil while the lock is held. After a release it matches ErrNotHeld;
// after a loss, ErrLockLost.
func (l *Lock) Err() error {
	if l.outer != nil {
		return l.nestedErr()
	}
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
		l.c.emit(observe.Event{Kind: observe.Lost, Name: l.a.name, Token: l.token, Err: err})
	}
}

// Extend renews the lock for its TTL on a quorum, counting validity from
// the start of this call. A node that lost our key (it restarted empty) gets
// it back, unless a newer token was issued there. It fails with an error
// matching ErrLockLost if the lock was already lost, if its validity passed
// before the call or before a quorum answered (another holder may have come
// and gone in between, whatever the nodes say now), or if another owner
// holds it on too many nodes; the lock is then lost for good and its keys
// are deleted in the background. It fails with ErrNoQuorum if too many
// nodes failed (the lock stays valid until Deadline; try again), or
// ErrNotHeld after Release.
func (l *Lock) Extend(ctx context.Context) error {
	if l.outer != nil {
		return l.nestedExtend(ctx)
	}
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	if err := l.endIfExpired(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redlock: extend %q: %w", l.a.name, err)
	}
	c := l.c
	timeout := l.nodeTimeout()
	args := l.extendArgs()
	start := c.clock.Now()
	var nodes *[]observe.NodeResult // per-node results, for an Observer
	if c.opts.Observer != nil {
		nodes = new([]observe.NodeResult)
	}
	err := c.broadcastObserved(ctx, "extend", l.a.name, timeout, timeout, func(ctx context.Context, n *node) (bool, error) {
		if err := c.readyToExtend(ctx, n, scriptKey(args)); err != nil {
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
		vals, err := l.extendOn(ctx, n, args)
		return l.extendAnswer(ctx, n, scriptKey(args), vals, err, sent, c.clock.Now())
	}, nodes)
	return l.extended(ctx, start, c.clock.Now(), err, nodes) // the round returns as soon as it is decided
}

// endIfExpired ends the lock as lost if its validity has passed, so that an
// extension sends nothing for it: past the deadline another holder may have
// taken the lock and let it go, and the extend script would renew our key,
// or without fencing re-create it, over that gap. Its keys, which may still
// live on the nodes for a moment, are deleted in the background (ordered
// after any call still running there, as every release). It returns how the
// lock ended, nil while it is held.
func (l *Lock) endIfExpired() error {
	l.mu.Lock()
	expired := l.expireLocked()
	err := l.err
	l.mu.Unlock()
	if expired {
		l.a.releaseInBackground()
	}
	return err
}

// nodeTimeout is the per-node timeout of the lock's TTL.
func (l *Lock) nodeTimeout() time.Duration {
	timeout, _ := l.c.opts.nodeTimeout(l.a.ttl, "TTL") // checked at acquire
	return timeout
}

// extendArgs builds the extend script's command for this lock, as its
// kind builds it.
func (l *Lock) extendArgs() []any { return l.a.kind.extendArgs(l) }

// extendAnswer records what an extend call sent to n at sent, and
// answered by recv, left on the node and tells whether the node still
// holds the lock for us.
func (l *Lock) extendAnswer(ctx context.Context, n *node, key string, vals []int64, err error, sent, recv time.Time) (bool, error) {
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
	if err := l.c.recheck(ctx, n, key, vals[1], vals[2], sent, recv, true); err != nil {
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
// round was decided at decided with err: the new validity, or why there is
// none. nodes are the round's per-node results, if observed. The caller
// holds extendMu.
//
// The answers count only if the quorum's came in before the deadline the
// extension was to move: a round that started in time but was answered
// after it cannot show that the lock was held without a gap (the keys may
// have expired and another holder come and gone before our extend reached
// the nodes). The lock is then lost, whatever the nodes answered.
func (l *Lock) extended(ctx context.Context, start, decided time.Time, err error, nodes *[]observe.NodeResult) error {
	c, a := l.c, l.a
	now := c.clock.Now()
	var results []observe.NodeResult
	if nodes != nil {
		results = *nodes
	}
	l.mu.Lock()
	deadline, ended := l.deadline, l.err
	l.mu.Unlock()
	if ended != nil || !decided.Before(deadline) {
		return l.extendedTooLate(ctx, start, now, decided, deadline, results)
	}
	if err != nil {
		var qe *QuorumError
		if errors.As(err, &qe) && l.refusedBy(qe) > len(c.nodes)-c.quorum() {
			lost := &lostError{err}
			c.emit(observe.Event{Kind: observe.ExtendFailed, Name: a.name, Token: l.token, Elapsed: now.Sub(start), Err: lost, Context: ctx, Nodes: results})
			l.mu.Lock()
			l.endLocked(lost)
			l.mu.Unlock()
			a.releaseInBackground() // whatever repairs this extend made
			return lost
		}
		c.emit(observe.Event{Kind: observe.ExtendFailed, Name: a.name, Token: l.token, Elapsed: now.Sub(start), Err: err, Context: ctx, Nodes: results})
		return err
	}
	valid := validity(a.ttl, now.Sub(start), c.opts.DriftFactor)
	if valid <= 0 {
		err := fmt.Errorf("%w: extending %q took %v of its %v TTL", ErrValidityTooShort, a.name, now.Sub(start), a.ttl)
		c.emit(observe.Event{Kind: observe.ExtendFailed, Name: a.name, Token: l.token, Elapsed: now.Sub(start), Err: err, Context: ctx, Nodes: results})
		return err
	}
	l.mu.Lock()
	if l.err != nil { // its validity ended at Done's timer meanwhile: it stays lost
		l.mu.Unlock()
		return l.extendedTooLate(ctx, start, now, decided, deadline, results)
	}
	l.deadline = now.Add(valid)
	l.mu.Unlock()
	c.emit(observe.Event{Kind: observe.Extended, Name: a.name, Token: l.token, Elapsed: now.Sub(start), Validity: valid, Context: ctx, Nodes: results})
	return nil
}

// extendedTooLate concludes an extension decided at decided, on or after
// the lock's deadline, or after the lock ended meanwhile: the lock is lost
// (if it was not already), and the keys the late round extended or
// re-created are deleted in the background.
func (l *Lock) extendedTooLate(ctx context.Context, start, now, decided, deadline time.Time, results []observe.NodeResult) error {
	c, a := l.c, l.a
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if errors.Is(err, ErrNotHeld) {
		return err // released: the release deleted the keys
	}
	if err == nil {
		err = fmt.Errorf("%w: %q: its validity ended at %v, %v before a quorum answered the extension", ErrLockLost, a.name, deadline.Format(time.RFC3339Nano), decided.Sub(deadline))
	}
	c.emit(observe.Event{Kind: observe.ExtendFailed, Name: a.name, Token: l.token, Elapsed: now.Sub(start), Err: err, Context: ctx, Nodes: results})
	l.mu.Lock()
	l.endLocked(err)
	err = l.err
	l.mu.Unlock()
	a.releaseInBackground()
	return err
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
	if l.outer != nil {
		return l.nestedRelease()
	}
	l.extendMu.Lock()
	defer l.extendMu.Unlock()
	l.mu.Lock()
	l.expireLocked()
	prior := l.err
	if errors.Is(prior, ErrNotHeld) {
		l.mu.Unlock()
		return prior
	}
	l.endLocked(notHeld(l.a.name, ""))
	l.mu.Unlock()

	c, a := l.c, l.a
	var nodes *[]observe.NodeResult // per-node results, for an Observer
	var start time.Time
	if c.opts.Observer != nil {
		nodes, start = new([]observe.NodeResult), c.clock.Now()
	}
	var wake func() // the kind's wake-up rule, for this client's waiters
	switch a.spec.wakes {
	case wakeOne:
		wake = func() { c.waiters.notify(a.topic, a.value, true) }
	case wakeEvery:
		announced := wakeAllMark + a.value // as the script published it
		wake = func() { c.waiters.notify(a.topic, announced, true) }
	}
	deleted, errs := a.release(nodes, wake)
	var err error
	switch {
	case prior != nil:
		err = prior
	case deleted >= c.quorum():
	case errs != nil:
		err = &QuorumError{Op: "release", Name: a.name, Won: deleted, Needed: c.quorum(), Errors: errs}
	default:
		err = fmt.Errorf("%w: %q: only %d of the %d needed nodes still held it at release", ErrLockLost, a.name, deleted, c.quorum())
		// Found lost only now: told as a loss too, as the other losses are.
		c.emit(observe.Event{Kind: observe.Lost, Name: a.name, Token: l.token, Err: err, Context: ctx})
	}
	if nodes != nil {
		c.emit(observe.Event{Kind: observe.Released, Name: a.name, Token: l.token, Err: err, Elapsed: c.clock.Now().Sub(start), Context: ctx, Nodes: *nodes})
	}
	return err
}
