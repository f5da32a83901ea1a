package redlock

// The fair lock (DESIGN §5): waiters are served in the order of a ticket
// they pick once per Acquire call, the same order on every node, and a
// release hands the lock straight to the head of the queue.
//
// Each node keeps the queue beside the lock key (lua/fair_queue.lua) and
// gives its key only to the live head of its queue: on a release, when the
// key is free, or when a grant nobody claimed yet belongs to someone other
// than the head. A grant is not yet a lock: the grantee does not know when
// a node set its key. Every round of a waiter is a take: it joins the
// queue (or refreshes its entry) and, where the key is ours after that,
// claims it in the same call (extends it to the TTL, pins the grant so it
// stops moving, raises the fence register to a proposal of that round).
// Validity counts from the round's start, so an uncontended acquire, and a
// waiter whose grants arrived by pub/sub, hold after one round. The
// holder's extends pin too (lua/fair_extend.lua): a key an extend counted
// never moves. Exclusion comes, as for the mutex, from the lock key on a
// quorum; a node that lost its queue only serves waiters out of order.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlabs/redlock/observe"
)

// The kind's scripts, in lua/: newScript registers them for the probes to
// load (scripts.go).
var (
	fairQueueScript  = newScript("fair_queue.lua")
	fairExtendScript = newRenewalScript("fair_extend.lua")
)

// WithFairness makes Acquire, TryAcquire and Do take the lock as a fair
// lock: the caller joins a queue on every node, ordered by a ticket (its
// wall clock in µs when the call began, ties broken at random), and the
// holder's release hands the lock to the head of the queue directly. A
// waiter that gives up leaves the queue at once; one that dies leaves it
// when its entry expires, one TTL after its last refresh. The lock's name,
// keys, fence register and Lock handle are the mutex's: a plain Acquire of
// the same name excludes the fair holders, but does not queue.
func WithFairness() LockOption { return func(lc *lockConfig) { lc.kind = fairKind } }

// fairLock is the fair lock's kind: the mutex's key, but its release hands
// the key to the head of the queue (and tells it, so the releasing client
// wakes none of its own waiters: a hand-off announces itself), and its
// extend also pins the key on the node, so that the queue never moves a
// key an extend counted. Its release is a vote: it may give the key to a
// waiter. It waits by a strategy of its own (fairWaiting): a queue, not
// retries.
type fairLock struct{ baseKind }

var fairSpec = kindSpec{
	acquire: acquireScript, release: fairQueueScript, extend: fairExtendScript, raise: raiseScript,
	replyLen: 4, nameKey: true, wakes: wakeNone, releaseVotes: true,
}

func init() {
	registerKind(&fairSpec, "")
	registerMessage(grantedPrefix)
}

// fairKind is the kind of every call WithFairness.
var fairKind lockKind = fairLock{}

func (fairLock) spec() *kindSpec { return &fairSpec }

// attempt is a fair wait's attempt; newFairWait sets its queue commands.
func (fairLock) attempt(c *Client, name string, ttl time.Duration) *attempt {
	return c.newAttempt(fairKind, name, ttl)
}

func (fairLock) extendArgs(l *Lock) []any { return keyedExtendArgs(l) }

// quiet: nobody held the lock, so its release announces none.
func (fairLock) quiet(a *attempt) { a.releaseArgs[fairQuietArg] = "1" }

// grantedPrefix starts the message a node publishes on the lock's channel
// when it gives its key to a waiter; the owner value follows.
const grantedPrefix = "granted "

// The keys of the fair lock's queue, beside the lock key in its hash slot.
const (
	queueSuffix    = ":queue"          // ZSET: ticket -> owner value
	expirySuffix   = ":queue:expiry"   // ZSET: node time in ms the entry expires -> owner value
	settingsSuffix = ":queue:settings" // HASH: owner value -> its TTL in ms
	grantSuffix    = ":grant"          // HASH: the grant on this node (owner, claimed: 0, a take round, or "held")
)

// fair queue script arguments, after EVALSHA and the SHA (or EVAL and the
// source), 6 and the six keys.
const (
	fairOpArg    = 9
	fairQuietArg = 18
)

// fairEntryTTL is how long a waiter's queue entry lives without a refresh:
// the waiter's own timeout, after which a waiter that died leaves the queue.
// It is the lock's TTL, so a dead waiter at the head of the queue costs the
// others no more than a dead holder does.
func fairEntryTTL(ttl time.Duration) time.Duration { return ttl }

// listensTo and heard make a fair wait a listener (kind.go) of the grant
// messages of its lock's channel.
func (f *fairWait) listensTo(name, prefix string) bool {
	return prefix == grantedPrefix && name == f.a.name
}

// heard records that node gave the lock to the owner value msg: this
// waiter now has a grant there if msg is its value, and none otherwise.
func (f *fairWait) heard(node int, msg string) { f.grantHeard(node, f.a.value == msg) }

// fairWait is one fair Acquire call: its attempt (owner value, per-node
// call record for the ordered cleanup), its ticket and which nodes granted
// it the key.
type fairWait struct {
	c      *Client
	a      *attempt
	ticket int64
	args   func(op string, failed, round, proposal int64) []any // a fair-queue command of ours

	// Take rounds are numbered from 1. A take pins the grants it finds
	// with its number; every call carries the number of the last take
	// round that fell short, and un-pins only pins up to that number. A
	// call that reaches a node late, after a take that won, leaves that
	// take's pin alone. Only the Acquire call's goroutine touches them.
	takes  int64 // take rounds started
	failed int64 // the last take round that fell short; 0 none
	// pinnable tells, once the last take's call to node i ended, whether
	// that call may have pinned a grant: it did not answer no. The calls
	// that read it keep their own copy.
	pinnable func(i int) bool

	// Per node, closed when the last call sent there is done: each call
	// waits for the one before on its node (the guards before a call may
	// take a round trip of their own, on another connection). A call that
	// timed out on the client may still reach the node after the next one:
	// the round numbers (takes, failed) make a late call harmless.
	turns []chan struct{}

	mu      sync.Mutex
	grants  []bool
	news    []uint64 // by node: grant messages heard from it
	count   int
	minPTTL int64         // the shortest holder PTTL the last round saw, -1 if none
	signal  chan struct{} // told when the grants reach a quorum
}

func (c *Client) newFairWait(name string, ttl, nodeTimeout time.Duration) *fairWait {
	a := fairKind.attempt(c, name, ttl)
	a.nodeTimeout = nodeTimeout
	f := &fairWait{
		c:      c,
		a:      a,
		ticket: c.clock.Now().UnixMicro(),
		grants: make([]bool, len(c.nodes)),
		news:   make([]uint64, len(c.nodes)),
		signal: make(chan struct{}, 1),
		turns:  make([]chan struct{}, len(c.nodes)),
	}
	for i := range f.turns {
		f.turns[i] = make(chan struct{})
		close(f.turns[i])
	}
	lock := c.lockKey(name)
	keys := []string{lock, lock + fenceSuffix, lock + queueSuffix, lock + expirySuffix, lock + settingsSuffix, lock + grantSuffix}
	channel := c.releaseChannel(name)
	f.args = func(op string, failed, round, proposal int64) []any {
		return fairQueueScript.args(keys, op, a.value, f.ticket, ttl.Milliseconds(), failed, proposal,
			c.fenceLifetimeArg, fairEntryTTL(ttl).Milliseconds(), channel, "0", round)
	}
	a.releaseArgs, a.extKeys = f.args("release", 0, 0, 0), keys
	return f
}

// grantHeard records a grant message of node: whether it gave us the key.
func (f *fairWait) grantHeard(node int, yes bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.news[node]++
	f.setLocked(node, yes)
}

// newsOf is how many grant messages node sent us so far: a reply of a call
// sent after that many may be older than a message heard later.
func (f *fairWait) newsOf(node int) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.news[node]
}

// replied records what a call's reply said of node's key. The reply and
// the messages come on different connections: a grant published after
// the call ran can be heard before its reply arrives. So a "not ours" is
// taken only when no message came since the call was sent (news is what
// newsOf said then); in doubt the grant stands, and costs at most a take
// that fails.
func (f *fairWait) replied(node int, yes bool, news uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if yes || f.news[node] == news {
		f.setLocked(node, yes)
	}
}

func (f *fairWait) setLocked(node int, yes bool) {
	if f.grants[node] == yes {
		return
	}
	f.grants[node] = yes
	if yes {
		f.count++
	} else {
		f.count--
	}
	// Told once, when the grants reach a quorum, not at every change
	// above it (each hand-off to another waiter changes some).
	if yes && f.count == f.c.quorum() {
		select {
		case f.signal <- struct{}{}:
		default:
		}
	}
}

func (f *fairWait) granted() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count >= f.c.quorum()
}

// fairWaiting is the fair lock's wait strategy: one fair Acquire
// (wait) or TryAcquire (!wait) call. Its waiter listens for releases and
// grants before it joins the queue, and each try is a take round
// (fairWait.take). Between rounds it waits for a quorum of grants, a
// release that did not hand the key on (a plain holder's), the refresh
// that keeps its entry queued, or the holder's key to expire.
type fairWaiting struct {
	c            *Client
	f            *fairWait
	lc           lockConfig
	wait         bool
	wake         *waiter
	woken        <-chan bool // releases of the name that did not hand the key on (a plain holder's)
	start        time.Time
	refreshEvery time.Duration
	backoff      time.Duration
	last         error // the last take's failure
	// round: a round is owed (the first, a refresh, a release); mayTake:
	// a quorum of grants calls for a take. The next round is owed at a
	// time fixed when the last one ended (next), so that wake-ups for
	// grant messages, which come with every hand-off to another waiter,
	// cannot keep putting it off: the refresh that keeps our entry
	// queued, the backoff after a take that failed, or the holder's key
	// expiring.
	round, mayTake bool
	next           time.Time
	timer          *time.Timer
}

func (fairLock) waiting(ctx context.Context, c *Client, name string, lc lockConfig, timeout time.Duration, wait bool) (waitStrategy, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redlock: acquire %q: %w", name, err)
	}
	if lc.metadata != "" {
		// The release hands the key on inside the queue script, which
		// keeps no holder key beside it.
		return nil, configErr("metadata", fmt.Sprintf("%.20q", lc.metadata), "is not kept for a fair lock (WithFairness)")
	}
	c.noteTTL(lc.ttl)
	if err := c.checkIndependence(ctx, timeout); err != nil {
		return nil, err
	}
	if err := c.slotsServed(name); err != nil {
		return nil, err
	}
	w := &fairWaiting{c: c, f: c.newFairWait(name, lc.ttl, timeout), lc: lc, wait: wait, round: true, mayTake: true,
		refreshEvery: fairEntryTTL(lc.ttl) / 3, backoff: c.opts.RetryDelayMin}
	if wait {
		// Listen before joining the queue: no grant message can be missed.
		w.wake = c.waiters.add(ctx, name, timeout)
		w.woken = w.wake.ch
	}
	c.messages.add(w.f)
	w.start = c.clock.Now()
	return w, nil
}

// try joins the queue, or refreshes our entry, and claims the key wherever
// it is ours: uncontended, or when the grants of a hand-off arrived, this
// one round is the whole acquire.
func (w *fairWaiting) try(ctx context.Context) (*Lock, attemptInfo, error) {
	c, f := w.c, w.f
	blind := !f.granted()
	began := time.Now()
	l, err := f.take(ctx, w.lc)
	if err == nil {
		return l, attemptInfo{}, nil
	}
	w.last, w.round = err, false
	if w.wait && ctx.Err() == nil {
		// Give back at once the grants this round pinned short of a
		// quorum, so that every node can hand its key to the head of
		// its queue; waiters that start together would otherwise each
		// keep a minority till their next refresh.
		f.giveBack(ctx, f.pinnable)
	}
	w.next = began.Add(w.refreshEvery)
	if p := f.holderPTTL(); p > 0 && p < w.refreshEvery {
		// The holder's key expires: a round then lets the node hand it on.
		w.next = began.Add(p + jitter(c.opts.RetryDelayMin))
	}
	// A take that a quorum of grants called for and that still failed (a
	// node counted as granted sits out) must not spin: the next one
	// waits for the backoff.
	if w.mayTake = blind; !w.mayTake {
		w.next = time.Now().Add(jitter(w.backoff))
		w.backoff = min(2*w.backoff, c.opts.RetryDelayMax)
	}
	return nil, attemptInfo{}, err
}

// pause waits until a take round is due.
func (w *fairWaiting) pause(ctx context.Context, _ error, _ attemptInfo) {
	if w.timer == nil {
		w.timer = time.NewTimer(time.Until(w.next))
	} else {
		w.timer.Reset(time.Until(w.next))
	}
	for {
		select {
		case <-w.f.signal:
		case <-w.woken:
			// The key is free on a quorum: a round lets the nodes give it
			// to the head of their queues.
			w.round, w.mayTake = true, true
		case <-w.timer.C:
			w.round, w.mayTake = true, true
		case <-ctx.Done():
		}
		if !w.timer.Stop() {
			select {
			case <-w.timer.C:
			default:
			}
		}
		if ctx.Err() != nil || w.round || w.mayTake && w.f.granted() {
			return
		}
		w.timer.Reset(time.Until(w.next))
	}
}

// stop ends the call. A call that gave up leaves the queue on every node
// (fairWait.leave) and reports the last take's failure.
func (w *fairWaiting) stop(ctx context.Context, l *Lock, err error) (*Lock, error) {
	c, f := w.c, w.f
	c.messages.remove(f)
	if w.wake != nil {
		c.waiters.remove(f.a.name, w.wake)
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	if l != nil {
		return l, nil
	}
	f.leave()
	last := w.last
	if last == nil {
		last = &LockedError{Name: f.a.name}
	}
	c.emit(observe.Event{Kind: observe.AcquireFailed, Name: f.a.name, Elapsed: c.clock.Now().Sub(w.start), Err: last})
	if werr := waitErr(ctx); werr != nil {
		return nil, fmt.Errorf("redlock: acquire %q: gave up waiting: %w: %w", f.a.name, werr, last)
	}
	return nil, err
}

func (f *fairWait) holderPTTL() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Duration(f.minPTTL) * time.Millisecond
}

// giveBack follows a take round that fell short: a wait, carrying the
// round's number as the last that failed, to every node where the take's
// call may have pinned a grant (it did not answer no), after that call.
// The wait turns those pins back into movable grants, registers us again
// (a pin's claim had dropped our entry) and lets the node give its key to
// the head of its queue. Its replies tell whether that is us.
func (f *fairWait) giveBack(ctx context.Context, pinnable func(i int) bool) {
	c, a := f.c, f.a
	turns := f.nextTurns()
	args := f.args("wait", f.failed, 0, 0)
	_ = c.broadcast(ctx, "acquire", a.name, a.nodeTimeout, a.nodeTimeout, func(ctx context.Context, n *node) (bool, error) {
		t := turns[n.index]
		if <-t.prev; !pinnable(n.index) {
			close(t.done)
			return false, nil
		}
		news := f.newsOf(n.index)
		vals, err := f.call(ctx, n, args, t)
		if err != nil {
			return false, err
		}
		yes := vals[0] == 1
		f.replied(n.index, yes, news)
		return yes, nil
	})
}

// turn is one call's place in the order of a waiter's calls to a node.
type turn struct{ prev, done chan struct{} }

// nextTurns gives the calls of a round their place after the previous
// round's calls, node by node.
func (f *fairWait) nextTurns() []turn {
	turns := make([]turn, len(f.turns))
	for i := range turns {
		turns[i] = turn{prev: f.turns[i], done: make(chan struct{})}
		f.turns[i] = turns[i].done
	}
	return turns
}

// call runs one fair-queue operation on n if its vote counts, after the
// waiter's previous call there and in order with the attempt's release
// (the call may register us or give us the key), and checks the node's
// clock on the way.
func (f *fairWait) call(ctx context.Context, n *node, args []any, t turn) ([]int64, error) {
	c, a := f.c, f.a
	// The call before ours is bounded by its own timeout, so waiting for
	// it past our deadline ends.
	<-t.prev
	defer close(t.done)
	if ctx.Err() != nil {
		// The round was decided without this node while the call before
		// ours ran. Send it all the same, under a timeout of its own: a
		// holder whose take skipped a node would leave its entry queued
		// there until it releases.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), a.nodeTimeout)
		defer cancel()
	}
	if err := c.ready(ctx, n, scriptKey(args)); err != nil {
		return nil, err
	}
	if err := c.registered(ctx, n, a.ttl, a.nodeTimeout); err != nil {
		return nil, err
	}
	if !a.enter(n) {
		return nil, ErrNotHeld
	}
	sent := c.clock.Now()
	vals, err := n.run.run(ctx, fairQueueScript, args)
	outcome := callMayHold // an answered call registered us, at least
	switch {
	case errors.Is(err, errNotSent):
		outcome = callNoKey
	case err != nil:
		outcome = callUnsure
	}
	a.leave(n, outcome)
	if err != nil {
		return nil, err
	}
	if len(vals) != 4 {
		return nil, fmt.Errorf("redlock: unexpected fair queue reply %v", vals)
	}
	if err := c.recheck(ctx, n, scriptKey(args), vals[2], vals[3], sent, c.clock.Now(), false); err != nil {
		return nil, err
	}
	return vals, nil
}

// take is one round that joins the queue (or refreshes our entry) on every
// node and claims the key where it is ours: it extends the key to the TTL,
// pins the grant (no longer movable) and raises the fence register to the
// round's proposal. A quorum of claims holds the lock. Validity counts from
// the round's start, before any of those extensions (PROTOCOL §8): a grant
// made before the round, by a release, is dated by the round's extension,
// not by the grant. The token comes from the fence values the claims read,
// as the acquire's does from the values its SETs read (fast path, or the
// slow path's raise). The proposal is taken when the round starts, not
// when the Acquire call began: a plain holder that came and went meanwhile
// on nodes this round does not reach had a lower one (DESIGN §2's
// time-based line of defence).
func (f *fairWait) take(ctx context.Context, lc lockConfig) (_ *Lock, err error) {
	c, a := f.c, f.a
	var (
		mu        sync.Mutex
		maxBefore int64
	)
	start := c.clock.Now()
	f.takes++
	round := f.takes
	defer func() {
		if err != nil {
			f.failed = round // the next call gives this round's pins back
		}
	}()
	var proposal int64
	if !c.opts.DisableFencing {
		proposal = max(c.lastToken.Load()+1, start.UnixMicro())
	}
	f.mu.Lock()
	f.minPTTL = -1
	f.mu.Unlock()
	args := f.args("take", f.failed, round, proposal)
	turns := f.nextTurns()
	refusedBy := make([]bool, len(c.nodes)) // the call answered no: it left our entry queued there, and pinned nothing
	pinnable := func(i int) bool {
		mu.Lock()
		defer mu.Unlock()
		return !refusedBy[i]
	}
	f.pinnable = pinnable
	err = c.broadcast(ctx, "acquire", a.name, a.nodeTimeout, a.nodeTimeout, func(ctx context.Context, n *node) (bool, error) {
		news := f.newsOf(n.index)
		vals, err := f.call(ctx, n, args, turns[n.index])
		if err != nil {
			return false, err
		}
		if vals[0] != 1 {
			f.replied(n.index, false, news)
			f.mu.Lock()
			if p := vals[1]; p > 0 && (f.minPTTL < 0 || p < f.minPTTL) {
				f.minPTTL = p
			}
			f.mu.Unlock()
			mu.Lock()
			refusedBy[n.index] = true
			mu.Unlock()
			return false, nil
		}
		mu.Lock()
		maxBefore = max(maxBefore, vals[1])
		mu.Unlock()
		return true, nil
	})
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		refused := 0 // nodes where another owner holds the key
		for _, r := range refusedBy {
			if r {
				refused++
			}
		}
		var qe *QuorumError
		if errors.As(err, &qe) && refused > len(c.nodes)-c.quorum() {
			// The refusals alone lose the round: the lock is held, as
			// the mutex's attempt reports it.
			err = &LockedError{Name: a.name, Remaining: f.holderPTTL(), Refused: refused, Nodes: len(c.nodes), Errors: qe.Errors}
		}
		return nil, err
	}
	// Claims that answer after the quorum may raise maxBefore further:
	// a token above a superset of the quorum's values is still safe.
	mu.Lock()
	before := maxBefore
	mu.Unlock()
	c.noteToken(before)
	var token int64
	if !c.opts.DisableFencing {
		a.proposal, token = proposal, proposal
		if before >= proposal {
			token = before + 1
			if err := a.raiseFence(token); err != nil {
				return nil, fmt.Errorf("redlock: acquire %q: %w", a.name, err)
			}
		}
		c.noteToken(token)
	}
	decided := c.clock.Now()
	elapsed := decided.Sub(start)
	valid := validity(lc.ttl, elapsed, c.opts.DriftFactor)
	if valid <= 0 {
		return nil, fmt.Errorf("%w: taking %q took %v of its %v TTL", ErrValidityTooShort, a.name, elapsed, lc.ttl)
	}
	f.leaveQueues(pinnable) // we hold: we wait in no queue
	l := &Lock{c: c, a: a, token: token, maxExtensions: lc.maxExtensions, deadline: decided.Add(valid)}
	c.emit(observe.Event{Kind: observe.Acquired, Name: a.name, Token: token, Elapsed: elapsed, Validity: valid})
	if lc.autoExtend {
		c.renewals.add(l, lc.leanRenewal)
	}
	return l, nil
}

// leaveQueues takes the new holder's entry out of the queues its winning
// take round left it in: a node that refused the take (its call came late,
// after another waiter's) registered us there, and the entry, now at the
// head, would keep that node's key from the others until we release. In
// the background, each after the take's call on its node ended (pinnable
// tells then whether that call was refused); a Release that begins first
// drops the entries itself.
func (f *fairWait) leaveQueues(pinnable func(i int) bool) {
	c := f.c
	turns := f.nextTurns()
	args := f.args("leave", f.failed, 0, 0)
	c.bg.add()
	go func() {
		defer c.bg.done()
		for i, n := range c.nodes {
			t := turns[i]
			if <-t.prev; pinnable(i) {
				close(t.done)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), f.a.nodeTimeout)
			_, _ = f.call(ctx, n, args, t)
			cancel()
		}
	}()
}

// leave cleans up after a fair Acquire that gave up: on every node, in
// order after our calls there and with a context of its own, our entry
// leaves the queue and a grant made to us goes on to the next waiter.
func (f *fairWait) leave() {
	f.a.kind.quiet(f.a) // nobody held the lock: no release to announce
	f.a.releaseInBackground()
}
