package redlock

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quorumlabs/redlock/observe"
)

// No silent waits. An Acquire that waits for a lock another owner holds is
// doing what it was asked; one that waits because the nodes cannot give a
// quorum at all is not, and its caller must hear of it:
//   - nodes that sit out the restart grace (fresh nodes without
//     persistence): the wait ends by itself, so it is told once, through
//     the Logger and an observe.GraceWait, with how long it may last and why;
//   - too few nodes can vote, because they cannot be reached or because
//     they answer with an error (a wrong password, LOADING, MISCONF, OOM, a
//     replica, ...): told through the Logger and an observe.Unreachable once
//     that has lasted unreachableReport, and a call with no bound of its
//     own (no deadline, no max wait) gives up with an error matching
//     ErrNoQuorum once it has lasted Options.UnreachableTimeout. A node
//     that answers an error is no nearer to voting than one that is down:
//     retrying in silence for it is the same silent wait.

// defaultUnreachableTimeout is the default of Options.UnreachableTimeout.
const defaultUnreachableTimeout = 30 * time.Second

// noUnreachableTimeout, as Options.UnreachableTimeout, lets an Acquire with
// no deadline wait for ever for nodes that cannot vote (still reported).
const noUnreachableTimeout time.Duration = -1

// unreachableReport is how long too few nodes must have been reachable
// before a waiting Acquire reports it: longer than a reconnection, short
// enough that a user does not wonder.
const unreachableReport = 2 * time.Second

// waitReport follows one Acquire call's wait and tells what it waits for.
type waitReport struct {
	c          *Client
	name       string
	unbounded  bool      // the call has no deadline and no max wait
	downSince  time.Time // since when fewer than a quorum of nodes could vote; zero if enough could
	downTold   bool
	graceUntil *atomic.Int64 // the client's: see Client.graceToldUntil
}

// unreachableErr is the error of a call that gave up on nodes that could
// not vote.
type unreachableErr struct {
	name  string
	after time.Duration
	last  error
}

func (e *unreachableErr) Error() string {
	return capText(fmt.Sprintf("redlock: acquire %q: gave up: fewer than a quorum of nodes could vote (unreachable, or answering errors) for %v (Options.UnreachableTimeout): %s",
		e.name, e.after, strings.TrimPrefix(e.last.Error(), fmt.Sprintf("redlock: acquire %q: ", e.name))))
}

// Unwrap gives ErrNoQuorum and the last attempt's error.
func (e *unreachableErr) Unwrap() []error { return []error{ErrNoQuorum, e.last} }

// failed looks at an attempt's failure; it returns an error when the wait
// must end (too few nodes could vote for too long).
func (w *waitReport) failed(err error) error {
	c := w.c
	now := c.clock.Now()
	var qe *QuorumError
	if !errors.As(err, &qe) {
		w.downSince, w.downTold = time.Time{}, false
		return nil
	}
	w.tellGrace(now)
	if cannotVote(qe) <= len(c.nodes)-c.quorum() {
		w.downSince, w.downTold = time.Time{}, false
		return nil
	}
	if w.downSince.IsZero() {
		w.downSince = now
	}
	down := now.Sub(w.downSince)
	if !w.downTold && down >= unreachableReport {
		w.downTold = true
		c.logger.Warn("redlock: waiting: too few nodes can vote (unreachable, or answering errors)", "lock", w.name, "for", down.Round(time.Millisecond), "err", err)
		c.emit(observe.Event{Kind: observe.Unreachable, Name: w.name, Elapsed: down, Err: err})
	}
	if t := c.opts.UnreachableTimeout; w.unbounded && t > 0 && down >= t {
		return &unreachableErr{name: w.name, after: down.Round(time.Millisecond), last: err}
	}
	return nil
}

// cannotVote counts the nodes of a failed round that cannot vote however
// long the lock is waited for: those that could not be reached (down, a
// network error, no answer in time) and those that answered an error (a
// wrong password, LOADING, MISCONF, OOM, READONLY, ...). Not counted: the
// nodes that refused because another owner holds the lock (not errors:
// QuorumError.Refused), and those sitting out, whose wait ends by itself
// and is told on its own (tellGrace, observe.NodeSitOut).
func cannotVote(qe *QuorumError) int {
	if qe.Errors == nil {
		return 0
	}
	n := 0
	for _, err := range qe.Errors.Errors {
		if !errors.Is(err, ErrNodeSittingOut) {
			n++
		}
	}
	return n
}

// tellGrace tells, once for the client until it ends, that a quorum waits
// for nodes in their restart grace: which, how long at most, and why.
func (w *waitReport) tellGrace(now time.Time) {
	c := w.c
	told := w.graceUntil.Load()
	if now.UnixNano() < told {
		return // told, and not over yet
	}
	key := c.lockKey(w.name)
	grace := c.graceFor()
	voting := 0
	var sitting []string
	var lefts []time.Duration
	var why *graceError
	for _, n := range c.nodes {
		g := n.guard.Load()
		if g == nil {
			continue
		}
		err := g.voteErr(now, grace, key)
		var ge *graceError
		switch {
		case err == nil && !c.down(n):
			voting++
		case errors.As(err, &ge):
			sitting = append(sitting, n.name)
			lefts = append(lefts, ge.Left)
			if why == nil || ge.Left > why.Left {
				why = ge
			}
		}
	}
	need := c.quorum() - voting
	if need <= 0 || len(lefts) < need {
		return // not waiting on the grace, or the grace alone will not end it
	}
	slices.Sort(lefts)
	wait := lefts[need-1] // when the need-th node votes in
	if !w.graceUntil.CompareAndSwap(told, now.Add(wait).UnixNano()) {
		return // another waiter tells it
	}
	msg := fmt.Sprintf("%d of %d nodes sit out the %v restart grace (the last to vote in %s, so it may have lost locks' keys): a quorum votes in at most %v",
		len(sitting), len(c.nodes), why.Grace, why.What, wait)
	c.logger.Warn("redlock: waiting for the restart grace", "lock", w.name, "wait", wait, "nodes", strings.Join(sitting, ","), "why", msg)
	c.emit(observe.Event{Kind: observe.GraceWait, Name: w.name, Wait: wait, Reason: sitOutRestart,
		Err: fmt.Errorf("%w: %s", ErrNodeSittingOut, msg)})
}
