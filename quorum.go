package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlabs/redlock/observe"
)

// tally decides a quorum round as early as the outcome is known: won at
// quorum yes votes, lost once so many nodes said no (refused, failed or sat
// out) that a quorum can no longer be reached. It never waits for the
// slowest node.
type tally struct {
	nodes, quorum int
	yes, no       int
}

func newTally(nodes int) tally { return tally{nodes: nodes, quorum: nodes/2 + 1} }

// add counts one node's answer and tells whether the round is decided.
func (t *tally) add(yes bool) (decided, won bool) {
	if yes {
		t.yes++
	} else {
		t.no++
	}
	switch {
	case t.yes >= t.quorum:
		return true, true
	case t.no > t.nodes-t.quorum:
		return true, false
	}
	return false, false
}

// Per-node record of an attempt, one atomic word each: how many calls that
// may set our key are running on the node (the acquire, later extends),
// whether one of them may have set it, and whether a release was asked.
// Whoever comes last of those calls and the release request sends the
// release, so a release never overtakes a call that could still create the
// key on that node (DESIGN §1): a late SET NX or an extend's repair would
// leave an orphan key blocking the lock for a whole TTL.
const (
	nodeMayHold      int32 = 1 << iota // a call said yes, or got no answer: our key may be there
	nodeUnsure                         // a call got no answer: it may still reach the server, after our release
	nodeReleaseAsked                   // release requested: no new call may be sent
	nodeCall                           // one running call; the count is state / nodeCall
)

// callOutcome is what a call that may set our key tells about the node.
type callOutcome uint8

const (
	callNoKey   callOutcome = iota // not sent, or answered that the key is not ours
	callMayHold                    // answered: the key may be ours
	callUnsure                     // no answer: the call may still set the key later
)

// An acquire script answers {1, ...} when the node gives us the lock, {0,
// the holder's PTTL, ...} when another owner holds it, and may answer {2,
// the PTTL of a record, ..., the recorded value} when the node records the
// name with parameters other than ours (how many keys of a kind there are):
// a refusal with a reason, which the kind turns into its own error once a
// quorum of nodes gave it (lockKind.refused).
const deniedStatus = 2

// attempt is one try at a lock on all nodes, and afterwards the record of
// which nodes may hold its key, for release.
type attempt struct {
	c        *Client
	kind     lockKind
	spec     *kindSpec // kind.spec(), read once
	name     string
	keys     [2]string // lock key, fence register
	extKeys  []string  // the extend and raise scripts' keys, if not keys
	value    string
	ttl      time.Duration
	proposal int64
	topic    string       // the waiters' topic its release wakes (topicOf)
	pick     int          // of a kind whose nodes pick one of several keys: the pick won (kindSpec.replyLen)
	settled  atomic.Int32 // the pick won + 1, once known; 0 before (see lockKind.won)

	// The commands, built once and shared by every node's call.
	acquireArgs []any
	releaseArgs []any
	nodeTimeout time.Duration
	// quieted: the release announces nothing (abandon), so it may be a
	// server's native compare-and-delete (native.go). Set, as releaseArgs
	// is changed, before any release call reads it.
	quieted bool

	replies chan nodeReply // acquire replies, then release results
	// releaseMu lets one release at a time read replies: a background
	// release (a loss found by an extension) and the holder's Release may
	// run together, and one must not take the other's results, or it
	// waits for them for ever.
	releaseMu sync.Mutex
	state     []atomic.Int32  // per node: running calls and the flags above (nodeCall)
	stateBuf  [8]atomic.Int32 // state's storage for up to 8 nodes
	calls     callGroup       // the acquire calls' context
}

type nodeReply struct {
	node int
	kind replyKind
	won  bool  // acquire: the lock is ours here; release: our key was deleted
	pick int32 // acquire, of a kind whose nodes pick one of several keys: the one the node gave us
	val  int64 // fence register before (won) or the holder's PTTL in ms (refused)
	// denied: refused for a record of other parameters (deniedStatus),
	// the value recorded; 0 for any other answer
	denied int64
	err    error // a *NodeError
}

type replyKind uint8

const (
	acquireReply replyKind = iota
	releaseReply           // a release that release sent
	owedRelease            // a release that the last call running on the node sent (leave)
)

// newAttempt prepares one try at the lock called name with the name's own
// key and fence register, and the mutex's commands, which kinds that use
// other keys or scripts replace (lockKind.attempt).
func (c *Client) newAttempt(kind lockKind, name string, ttl time.Duration) *attempt {
	a := &attempt{
		c:       c,
		kind:    kind,
		spec:    kind.spec(),
		name:    name,
		topic:   name,
		ttl:     ttl,
		replies: make(chan nodeReply, 2*len(c.nodes)), // per node one acquire reply and at most one release result
	}
	if len(c.nodes) <= len(a.stateBuf) {
		a.state = a.stateBuf[:len(c.nodes)]
	} else {
		a.state = make([]atomic.Int32, len(c.nodes))
	}
	// The lock key, the fence register, the release channel and the owner
	// value, in one allocation: "<lock key>:fence<lock key>:released<value>".
	// The keys and the value took one allocation each before; the one saved
	// pays for boxing the channel, which is per lock now, so an attempt
	// allocates no more than it did.
	p := c.opts.KeyPrefix
	keyLen := len(p) + len(name) + 2
	channelEnd := 2*keyLen + len(fenceSuffix) + len(releasedSuffix)
	var b strings.Builder
	b.Grow(channelEnd + ownerValueLen)
	b.WriteString(p)
	b.WriteByte('{')
	b.WriteString(name)
	b.WriteString("}" + fenceSuffix)
	b.WriteString(p)
	b.WriteByte('{')
	b.WriteString(name)
	b.WriteString("}" + releasedSuffix)
	var v [ownerValueLen]byte
	ownerValue(&v)
	b.Write(v[:])
	names := b.String()
	a.keys = [2]string{names[:keyLen], names[:keyLen+len(fenceSuffix)]}
	a.value = names[channelEnd:]
	if !c.opts.DisableFencing {
		a.proposal = max(c.lastToken.Load()+1, c.clock.Now().UnixMicro())
	}
	// Every value is boxed once, for both commands.
	var lockKey, value, ttlArg, channel any = a.keys[0], a.value, c.defaultTTLArg, names[keyLen+len(fenceSuffix) : channelEnd]
	if ttl != c.opts.TTL {
		ttlArg = ttl.Milliseconds()
	}
	args := make([]any, 15)
	acquireCmd, acquireCode := acquireScript.head()
	releaseCmd, releaseCode := releaseScript.head()
	a.acquireArgs = append(args[:0:9], acquireCmd, acquireCode, 2, lockKey, a.keys[1], value, ttlArg, a.proposal, c.fenceLifetimeArg)
	a.releaseArgs = append(args[9:9:15], releaseCmd, releaseCode, 1, lockKey, value, channel)
	return a
}

// acquireOn runs the acquire script on one node and reports to the decider.
// It runs to the end even after the decision, so that a late answer is
// still recorded and, if the lock was released meanwhile, released here.
func (a *attempt) acquireOn(n *node) {
	defer a.c.bg.done()
	defer a.calls.done()
	r, outcome := a.callAcquire(a.calls.ctx, n)
	// Record the outcome before reporting it, so that a release decided on
	// this reply finds the node answered and counts its own deletion. A
	// release asked while we were in flight goes out now, after our SET.
	a.leave(n, outcome)
	a.replies <- r // buffered for every node: never blocks
	if r.won {
		a.kind.answered(a, n, r) // after the reply is out: see lockKind.won
	}
}

// enter counts a call about to be sent to n that may set our key. It
// is false once a release was asked: the call must not be sent.
func (a *attempt) enter(n *node) bool {
	i := n.index
	for {
		s := a.state[i].Load()
		if s&nodeReleaseAsked != 0 {
			return false
		}
		if a.state[i].CompareAndSwap(s, s+nodeCall) {
			return true
		}
	}
}

// leave records the end of a call on n and what it tells. If a release was asked while calls were running and this
// was the last of them, it sends that release now (if the node may hold
// our key) and reports the result on replies.
func (a *attempt) leave(n *node, outcome callOutcome) {
	i := n.index
	for {
		s := a.state[i].Load()
		next := s - nodeCall
		switch outcome {
		case callMayHold:
			next |= nodeMayHold
		case callUnsure:
			next |= nodeMayHold | nodeUnsure
		}
		owed := next&nodeReleaseAsked != 0 && next < nodeCall
		release := owed && next&nodeMayHold != 0
		if owed {
			next &^= nodeMayHold // released once
		}
		if !a.state[i].CompareAndSwap(s, next) {
			continue
		}
		if owed {
			r := nodeReply{node: i, kind: owedRelease}
			if release {
				// The client's own socket timeouts bound this call.
				r.won, r.err = a.releaseOn(context.Background(), n)
			}
			a.replies <- r // buffered for one release result per node: never blocks
		}
		return
	}
}

// askRelease marks node i released. now tells that the caller must send
// the release: the node may hold our key and no call runs there. later
// tells that calls are running: the last of them sends the release (see
// leave), whose result then arrives on replies. Asked again, it does
// neither.
func (a *attempt) askRelease(i int) (now, later bool) {
	for {
		s := a.state[i].Load()
		next := s | nodeReleaseAsked
		now = s&nodeMayHold != 0 && s < nodeCall
		later = s&nodeReleaseAsked == 0 && s >= nodeCall
		if now {
			next &^= nodeMayHold // released once
		}
		if a.state[i].CompareAndSwap(s, next) {
			return now, later
		}
	}
}

// callAcquire asks one node, if its vote counts, and tells what the call
// leaves on the node.
func (a *attempt) callAcquire(ctx context.Context, n *node) (r nodeReply, outcome callOutcome) {
	r.node = n.index
	if err := a.c.ready(ctx, n, scriptKey(a.acquireArgs)); err != nil {
		r.err = &NodeError{Node: n.name, Err: err}
		return r, callNoKey
	}
	if err := a.c.registered(ctx, n, a.ttl, a.nodeTimeout); err != nil {
		r.err = &NodeError{Node: n.name, Err: err}
		return r, callNoKey
	}
	want := a.spec.replyLen
	sentAt := a.c.clock.Now()
	vals, err := n.run.run(ctx, a.spec.acquire, a.acquireArgs)
	recv := a.c.clock.Now()
	if err != nil {
		a.c.failed(n, err, a.nodeTimeout)
		if clusterRedirect(err) {
			n.stale.Store(true) // its slots changed since the probe: the next attempt looks again
		}
		r.err = &NodeError{Node: n.name, Err: err}
		if errors.Is(err, errNotSent) {
			return r, callNoKey
		}
		return r, callUnsure
	}
	if len(vals) != want {
		r.err = &NodeError{Node: n.name, Err: fmt.Errorf("redlock: unexpected acquire reply %v", vals)}
		return r, callMayHold
	}
	r.won, r.val = vals[0] == 1, vals[1]
	switch {
	case vals[0] == deniedStatus:
		r.denied = vals[len(vals)-1]
		if r.denied == 0 {
			r.denied = -1 // recorded, but not as a number
		}
	case want > 4:
		r.pick = int32(vals[4])
	}
	outcome = callNoKey
	if r.won {
		outcome = callMayHold
	}
	if err := a.c.recheck(ctx, n, scriptKey(a.acquireArgs), vals[2], vals[3], sentAt, recv, false); err != nil {
		r.won, r.err = false, &NodeError{Node: n.name, Err: err}
		outcome = callMayHold
	}
	return r, outcome
}

// release asks every node that may hold the key to delete it, and waits for
// the answers of those that already answered the acquire. Nodes still
// running a call that may set the key (a straggling acquire or extend)
// release by themselves once it is done; their results count only when the
// others fall short of a quorum. The calls have a context of their own: a
// cancelled caller must not leave keys behind.
//
// With nodes not nil, every node's result is appended to *nodes, for
// Event.Nodes. With atQuorum not nil, it is called once, as soon as a quorum
// of nodes deleted the key (the lock is free there: a waiter woken then
// overlaps its acquire with the release's wait for the slowest nodes), or
// when the release ends short of one.
func (a *attempt) release(nodes *[]observe.NodeResult, atQuorum func()) (deleted int, errs *multierror.Error) {
	a.releaseMu.Lock()
	defer a.releaseMu.Unlock()
	var start time.Time
	if nodes != nil {
		start = a.c.clock.Now()
	}
	note := func(n *node, ok bool, err error) {
		if nodes != nil {
			*nodes = append(*nodes, observe.NodeResult{Node: n.name, OK: ok, Elapsed: a.c.clock.Now().Sub(start), Err: err})
		}
	}
	var (
		first *node // released on this goroutine, while the others run
		sent  int   // releases sent by other goroutines, reporting on replies
		owed  int   // nodes whose running calls release when they end, reporting on replies
	)
	ctx, cancel := context.WithTimeout(context.Background(), a.c.releaseTimeout())
	defer cancel()
	for i, n := range a.c.nodes {
		now, later := a.askRelease(i)
		if later {
			owed++
		}
		if !now {
			continue
		}
		if a.c.down(n) {
			// It failed during our acquire, so it may hold the key, but
			// the caller is not kept waiting on a node that is down. Its
			// deletion is unknown: the release cannot count it, and must
			// not take it for a node that lost our key either.
			errs = multierror.Append(errs, &NodeError{Node: n.name, Err: ErrNodeDown})
			note(n, false, errs.Errors[len(errs.Errors)-1])
			a.c.bg.add()
			go func() {
				defer a.c.bg.done()
				ctx, cancel := context.WithTimeout(context.Background(), a.c.releaseTimeout())
				defer cancel()
				_, _ = a.releaseOn(ctx, n)
			}()
			continue
		}
		if first == nil {
			first = n
			continue
		}
		sent++
		a.c.bg.add()
		go func() {
			defer a.c.bg.done()
			r := nodeReply{node: n.index, kind: releaseReply}
			r.won, r.err = a.releaseOn(ctx, n)
			a.replies <- r // buffered for one release result per node: never blocks
		}()
	}
	if atQuorum != nil {
		defer func() {
			if deleted < a.c.quorum() {
				atQuorum()
			}
		}()
	}
	count := func(ok bool, err error) {
		if ok {
			if deleted++; deleted == a.c.quorum() && atQuorum != nil {
				atQuorum()
			}
		}
		if err != nil {
			errs = multierror.Append(errs, err)
		}
	}
	if first != nil {
		ok, err := a.releaseOn(ctx, first)
		note(first, ok, err)
		count(ok, err)
	}
	// Our own releases all report, bounded by ctx. Short of a quorum, the
	// releases that running calls owe may make up for it: a node whose
	// extend was still running when Extend returned holds our key all the
	// same. Otherwise nobody waits for them.
	for sent > 0 || (owed > 0 && deleted < a.c.quorum()) {
		var timeout <-chan struct{}
		if sent == 0 {
			timeout = ctx.Done() // only an owed release can outlast it
		}
		select {
		case r := <-a.replies:
			switch r.kind {
			case releaseReply:
				sent--
			case owedRelease:
				owed--
			default:
				continue // an acquire reply that came after the decision
			}
			note(a.c.nodes[r.node], r.won, r.err)
			count(r.won, r.err)
		case <-timeout:
			errs = multierror.Append(errs, fmt.Errorf("redlock: %d node(s) still running a call at release: %w", owed, ctx.Err()))
			return deleted, errs
		}
	}
	return deleted, errs
}

// abandon cleans up after a failed attempt, quietly (no release
// notification: nobody held the lock) and without making the caller wait.
func (a *attempt) abandon() {
	// Safe to change: the release calls that read it all start after this,
	// ordered by the state machine's atomics.
	a.kind.quiet(a)
	a.quieted = true
	a.releaseInBackground()
}

// releaseInBackground releases without making the caller wait;
// Client.Close waits for it.
func (a *attempt) releaseInBackground() {
	a.c.bg.add()
	go func() {
		defer a.c.bg.done()
		a.release(nil, nil)
	}()
}

// releaseOn deletes the key on one node if it is still ours, and sweeps the
// node once more later if a call there got no answer.
func (a *attempt) releaseOn(ctx context.Context, n *node) (bool, error) {
	if a.state[n.index].Load()&nodeUnsure != 0 {
		a.sweepLater(n)
	}
	return a.deleteOn(ctx, n)
}

// lateCallWait is how long after a release a node that left a call
// unanswered is swept once more. Such a call may still reach the server
// after our release, on its own connection, and set the key again, which
// would then block everyone for the rest of its TTL.
const lateCallWait = time.Second

// sweepLater releases on n once more, after min(lateCallWait, TTL/2): past
// the TTL the key is gone anyway. Client.Close waits for it.
func (a *attempt) sweepLater(n *node) {
	a.c.bg.add()
	time.AfterFunc(min(lateCallWait, a.ttl/2), func() {
		defer a.c.bg.done()
		ctx, cancel := context.WithTimeout(context.Background(), a.c.releaseTimeout())
		defer cancel()
		_, _ = a.deleteOn(ctx, n)
	})
}

// deleteOn runs the release script on n, or the server's own
// compare-and-delete where it does the whole job (native.go): it deletes
// the key if it is ours.
func (a *attempt) deleteOn(ctx context.Context, n *node) (bool, error) {
	deleted, done, err := a.nativeDelete(ctx, n)
	if !done {
		var vals []int64
		vals, err = n.run.run(ctx, a.spec.release, a.releaseArgs)
		deleted = len(vals) == 1 && vals[0] == 1
	}
	if err != nil {
		a.c.failed(n, err, a.nodeTimeout)
		return false, &NodeError{Node: n.name, Err: err}
	}
	return deleted, nil
}

// decision is what the caller learns from an attempt's replies.
type decision struct {
	won      bool
	winners  int   // nodes that said yes before the decision (the set S of DESIGN §2)
	maxFence int64 // highest fence register value among the winners
	minPTTL  int64 // shortest holder PTTL among refusals, -1 if none
	refused  int   // nodes that answered "held by another owner", denied included
	denied   int   // nodes that refused for a record of other parameters (deniedStatus)
	recorded int64 // the value the first of them recorded
	answered int   // nodes whose acquire reply (or timeout) was counted
	errs     *multierror.Error
	tally    tally     // the majority of yes votes, unless votes is set
	votes    voteTally // the kind's own tally (lockKind.tally); nil for the majority
	pick     int       // of a kind whose nodes pick one of several keys: the pick won

	// Only with an Observer: when the round started, and every node's
	// result as it came in, for Event.Nodes.
	start time.Time
	nodes []observe.NodeResult
}

// observe records r for Event.Nodes if the round is observed.
func (d *decision) observe(a *attempt, r nodeReply) {
	if !d.start.IsZero() {
		d.nodes = append(d.nodes, observe.NodeResult{Node: a.c.nodes[r.node].name, OK: r.won, Elapsed: a.c.clock.Now().Sub(d.start), Err: r.err})
	}
}

// decide reads replies until the outcome is known or ctx is done. Nodes
// that have not answered when the calls' deadline passes count as failed:
// go-redis honours context deadlines only with ContextTimeoutEnabled, so
// the node timeout is enforced here too.
//
// start is when the round started; with an Observer, the decision records
// every node's result against it.
func (a *attempt) decide(ctx context.Context, start time.Time) (decision, error) {
	nodeCtx := a.calls.ctx
	d := decision{minPTTL: -1, tally: newTally(len(a.c.nodes))}
	if a.c.opts.Observer != nil {
		d.start = start
	}
	d.votes = a.kind.tally(a)
	timeout := nodeCtx.Done()
	for {
		select {
		case r := <-a.replies:
			d.observe(a, r)
			if d.count(r) {
				return d, nil
			}
		case <-ctx.Done():
			return d, ctx.Err()
		case <-timeout:
			if nodeCtx.Err() == context.Canceled {
				timeout = nil // every node answered (the last one cancels): the replies wait in the channel
				continue
			}
			d.countLate(a, true)
			return d, nil
		}
	}
}

// countLate counts the replies that made it before the node timeout, then
// every node still running its acquire as timed out. With stopAtDecision,
// it stops at the reply that decides the round and tells so.
func (d *decision) countLate(a *attempt, stopAtDecision bool) bool {
	for len(a.replies) > 0 {
		r := <-a.replies
		d.observe(a, r)
		if d.count(r) && stopAtDecision {
			return true
		}
	}
	for i, n := range a.c.nodes {
		if a.state[i].Load() >= nodeCall { // the acquire is still running
			a.c.timedOut(n, a.nodeTimeout)
			r := nodeReply{node: i, err: &NodeError{Node: n.name, Err: errNodeTimeout}}
			d.observe(a, r)
			d.errs = multierror.Append(d.errs, r.err)
			d.answered++
		}
	}
	return false
}

// settle reads, after a lost round, the replies of the nodes that had not
// answered at the decision, until each answered or the node timeout passed.
// The error the caller sees depends on them (see Client.refusal): refusals
// that alone make a quorum impossible mean the lock is held, whatever the
// other nodes did, and a quorum error must name every node that failed, not
// only those that happened to answer before the decision. It stops as soon
// as the refusals alone decide: a busy lock is reported without waiting for
// a slow node.
func (a *attempt) settle(ctx context.Context, d *decision) {
	maxNo := len(a.c.nodes) - a.c.quorum()
	nodeCtx := a.calls.ctx
	timeout := nodeCtx.Done()
	for d.answered < len(a.c.nodes) && (d.refused <= maxNo || d.mayBeDenied(len(a.c.nodes), a.c.quorum())) {
		select {
		case r := <-a.replies:
			d.observe(a, r)
			d.count(r)
		case <-ctx.Done():
			return
		case <-timeout:
			if nodeCtx.Err() == context.Canceled {
				timeout = nil // every node answered: the replies wait in the channel
				continue
			}
			d.countLate(a, false)
			return
		}
	}
}

// count adds one reply and tells whether the attempt is decided.
func (d *decision) count(r nodeReply) bool {
	d.answered++
	switch {
	case r.won:
		d.winners++
		d.maxFence = max(d.maxFence, r.val)
	case r.err != nil:
		d.errs = multierror.Append(d.errs, r.err)
	default:
		d.refused++
		if r.val >= 0 && (d.minPTTL < 0 || r.val < d.minPTTL) {
			d.minPTTL = r.val
		}
		if r.denied != 0 {
			if d.denied == 0 {
				d.recorded = r.denied
			}
			d.denied++
		}
	}
	if d.votes != nil {
		decided, won := d.votes.add(r)
		if won {
			d.won = true
			d.pick, d.winners, d.maxFence = d.votes.winner()
		}
		return decided
	}
	decided, won := d.tally.add(r.won)
	d.won = won
	return decided
}

// mayBeDenied tells whether the denials seen so far may still grow into a
// quorum with the nodes yet to answer: the error the caller sees then
// depends on those answers (a quorum of denials is the kind's own error,
// see deniedStatus), even once the refusals alone lost the round.
func (d *decision) mayBeDenied(nodes, quorum int) bool {
	return d.denied > 0 && d.denied < quorum && d.denied+nodes-d.answered >= quorum
}

// errNodeTimeout stands for a node that had not answered when the node
// timeout passed.
var errNodeTimeout = fmt.Errorf("no answer within the node timeout: %w", context.DeadlineExceeded)

// broadcast runs op on every node in parallel and returns nil once a quorum
// said yes, or a *QuorumError as soon as that can no longer happen or the
// timeout passed. It is the fan-out of the operations off the acquire hot
// path: extend and the fencing slow path. The calls run in a callGroup of
// their own, which ctx's cancellation does not cut short.
func (c *Client) broadcast(ctx context.Context, opName, name string, timeout, nodeTimeout time.Duration, op func(ctx context.Context, n *node) (bool, error)) error {
	return c.broadcastObserved(ctx, opName, name, timeout, nodeTimeout, op, nil)
}

// broadcastObserved is broadcast that also appends every node's result to
// *nodes, unless nodes is nil, for Event.Nodes.
func (c *Client) broadcastObserved(ctx context.Context, opName, name string, timeout, nodeTimeout time.Duration, op func(ctx context.Context, n *node) (bool, error), nodes *[]observe.NodeResult) error {
	var start time.Time
	if nodes != nil {
		start = c.clock.Now()
	}
	type answer struct {
		node int
		yes  bool
		err  error
	}
	var calls callGroup
	calls.start(ctx, timeout, len(c.nodes))
	answers := make(chan answer, len(c.nodes))
	for i, n := range c.nodes {
		c.bg.add()
		go func() {
			defer c.bg.done()
			yes, err := op(calls.ctx, n)
			if err != nil {
				c.failed(n, err, nodeTimeout)
				err = &NodeError{Node: n.name, Err: err}
			}
			answers <- answer{i, yes, err}
			calls.done()
		}()
	}
	t := newTally(len(c.nodes))
	qe := &QuorumError{Op: opName, Name: name, Needed: t.quorum}
	answered := make([]bool, len(c.nodes))
	deadline := calls.ctx.Done()
	for {
		select {
		case a := <-answers:
			answered[a.node] = true
			if nodes != nil {
				*nodes = append(*nodes, observe.NodeResult{Node: c.nodes[a.node].name, OK: a.yes, Elapsed: c.clock.Now().Sub(start), Err: a.err})
			}
			if a.yes {
				qe.Won++
			} else if a.err != nil {
				qe.Errors = multierror.Append(qe.Errors, a.err)
			}
			if decided, won := t.add(a.yes); won {
				return nil
			} else if decided {
				return qe
			}
		case <-deadline:
			if calls.ctx.Err() == context.Canceled {
				deadline = nil // every call answered: the answers wait in the channel
				continue
			}
			for i, n := range c.nodes {
				if !answered[i] {
					c.timedOut(n, nodeTimeout)
					err := &NodeError{Node: n.name, Err: errNodeTimeout}
					if nodes != nil {
						*nodes = append(*nodes, observe.NodeResult{Node: n.name, Elapsed: c.clock.Now().Sub(start), Err: err})
					}
					qe.Errors = multierror.Append(qe.Errors, err)
				}
			}
			return qe
		}
	}
}

// callGroup is the context of one fan-out's node calls. It is detached from
// the caller's cancellation and ends at its timeout or when the last call
// finishes: a call still running after the decision must not be cut short,
// which would cost its connection and leave the command's fate unknown (an
// acquire's SET still in flight would race our cleanup).
type callGroup struct {
	ctx     context.Context
	cancel  context.CancelFunc
	running atomic.Int32
}

// start readies the group for calls under parent's values, bounded by
// timeout.
func (g *callGroup) start(parent context.Context, timeout time.Duration, calls int) {
	if parent.Done() != nil { // context.Background needs no detaching, and no allocation
		parent = context.WithoutCancel(parent)
	}
	g.ctx, g.cancel = context.WithTimeout(parent, timeout)
	g.running.Store(int32(calls))
}

// done marks one call finished; the last one ends the context.
func (g *callGroup) done() {
	if g.running.Add(-1) == 0 {
		g.cancel()
	}
}
