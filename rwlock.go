package redlock

// The read-write lock across N independent masters (DESIGN §5).
//
// A node admits a reader only while no writer holds the lock there and no
// writer waits (a writer intent), and a writer only while no live reader
// and no other writer is there. Both sides need a majority quorum, and any
// two majorities share a node, which never admitted a reader and a writer
// at once: a reader and a writer are never valid together, and neither are
// two writers. The writer key is the mutex's lock key and the writer takes
// its fencing token from the mutex's fence register, in the same round trip
// and by the same rules, so writers' tokens strictly increase and a
// resource can reject a stale writer. A reader takes a token too, from its
// own time-based proposal and the same register (readers may share one):
// at least every writer's whose lock ended before the reader's began, and
// below every writer's whose lock began after the reader's ended.
// docs/PROTOCOL.md has the proofs.
//
// A writer that waits records its intent on every node that refuses it;
// the intent keeps new readers out of that node, so the readers already in
// drain away and a stream of new readers cannot starve the writer. The
// intent expires unless the writer's next attempt refreshes it, so a writer
// that dies blocks readers for a few retry periods at most; a writer that
// got the lock or gave up withdraws it at once.

import (
	"context"
	"fmt"
	"time"
)

// The kind's scripts, in lua/: newScript registers them for the probes to
// load (scripts.go).
var (
	rwReadAcquireScript  = newScript("rw_read_acquire.lua")
	rwReadReleaseScript  = newScript("rw_read_release.lua")
	rwReadExtendScript   = newRenewalScript("rw_read_extend.lua")
	rwReadRaiseScript    = newScript("rw_read_raise.lua")
	rwWriteAcquireScript = newScript("rw_write_acquire.lua")
	rwWriteReleaseScript = newScript("rw_write_release.lua")
	rwWriteExtendScript  = newRenewalScript("rw_write_extend.lua")
	rwIntentClearScript  = newScript("rw_intent_clear.lua")
)

const (
	readersSuffix = ":readers" // ZSET of the live readers: owner value -> expiry (µs, node clock)
	intentsSuffix = ":writers" // ZSET of the waiting writers: intent id -> expiry (µs, node clock)
)

// The two sides' specs. Readers share the lock and its token (their raise
// writes the highest fence value, not one above it). A writer's release
// wakes every waiter: the readers get in together. The intent's withdrawal
// only removes, as a release does: no vote.
var (
	readerSpec = kindSpec{
		acquire: rwReadAcquireScript, release: rwReadReleaseScript, extend: rwReadExtendScript, raise: rwReadRaiseScript,
		replyLen: 4, shared: true, wakes: wakeOne,
	}
	writerSpec = kindSpec{
		acquire: rwWriteAcquireScript, release: rwWriteReleaseScript, extend: rwWriteExtendScript, raise: raiseScript,
		replyLen: 4, wakes: wakeEvery, unvoted: []*script{rwIntentClearScript},
	}
)

func init() {
	registerKind(&readerSpec, "")
	registerKind(&writerSpec, "")
}

// RWLock is a read-write lock called name: many readers at once, or one
// writer. Its handles are *Lock values, with the same validity, extension,
// release, Done and Err as the mutex's. A writer's Token is a fencing token
// from the same register as the mutex of the same name, strictly
// increasing. A reader's Token is max(its proposal, the highest fence value
// its quorum returned), written into the register of a quorum: at least the
// token of every writer whose lock ended before the reader's began, and
// below the token of every writer whose lock began after the reader's
// ended. Readers' tokens do not increase strictly: two readers may share
// one, and a reader may share the last writer's. Without fencing
// (DisableFencing) a reader's Token is 0, as a writer's is.
//
// The write side uses the mutex's key: a mutex and the writers of the same
// name exclude each other, but a mutex does not exclude readers. Do not use
// one name both as a mutex and as a read-write lock.
//
// An RWLock holds no state: it is a name on the client, cheap to make and
// safe for concurrent use. A bad name is reported by the first call.
type RWLock struct {
	c    *Client
	name string
}

// RWLock returns the read-write lock called name.
func (c *Client) RWLock(name string) *RWLock { return &RWLock{c: c, name: name} }

// Name is the lock's name.
func (rw *RWLock) Name() string { return rw.name }

// RLock waits for a read lock, as Client.Acquire waits for the mutex: until
// no writer holds the lock or waits for it on a quorum of nodes, ctx is done
// or MaxWait passes. A reader is refused while a writer waits, so a writer
// is not starved by a stream of readers; the readers then get in together
// when the writer releases.
func (rw *RWLock) RLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return rw.lock(ctx, false, true, opts)
}

// TryRLock makes one attempt at a read lock. It fails with an error matching
// ErrLocked if a writer holds the lock or waits for it, and otherwise as
// Client.TryAcquire does.
func (rw *RWLock) TryRLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return rw.lock(ctx, false, false, opts)
}

// Lock waits for the write lock: until no reader and no other writer holds
// it on a quorum of nodes, ctx is done or MaxWait passes. While it waits it
// keeps new readers out; when it returns, lock or not, it withdraws that
// intent from every node (in the background, after its last attempt's
// calls ended).
func (rw *RWLock) Lock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return rw.lock(ctx, true, true, opts)
}

// TryLock makes one attempt at the write lock. It fails with an error
// matching ErrLocked if a reader or another writer holds it, and otherwise
// as Client.TryAcquire does. It records no intent: nobody waits.
func (rw *RWLock) TryLock(ctx context.Context, opts ...LockOption) (*Lock, error) {
	return rw.lock(ctx, true, false, opts)
}

// DoRead runs fn under a read lock, as Client.Do runs it under the mutex:
// the lock is waited for, kept extended, and released when fn returns; fn's
// context is cancelled the moment the lock is lost. If the lock is not
// acquired, fn does not run and the error is RLock's; otherwise DoRead
// returns fn's error, joined with one matching ErrLockLost if the lock was
// lost before fn returned.
func (rw *RWLock) DoRead(ctx context.Context, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error {
	l, err := rw.RLock(ctx, append(opts[:len(opts):len(opts)], WithAutoExtend())...)
	return rw.c.run(ctx, l, err, fn)
}

// DoWrite runs fn under the write lock, as Client.Do runs it under the
// mutex. Pass l.Token() to the resource with every write. If the lock is
// not acquired, fn does not run and the error is Lock's; otherwise DoWrite
// returns fn's error, joined with one matching ErrLockLost if the lock was
// lost before fn returned.
func (rw *RWLock) DoWrite(ctx context.Context, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error {
	l, err := rw.Lock(ctx, append(opts[:len(opts):len(opts)], WithAutoExtend())...)
	return rw.c.run(ctx, l, err, fn)
}

func (rw *RWLock) lock(ctx context.Context, write, wait bool, opts []LockOption) (*Lock, error) {
	c := rw.c
	lc, timeout, err := c.params(rw.name, opts)
	if err != nil {
		return nil, err
	}
	if lc.metadata != "" {
		// The holder key is one per lock name: readers share the name.
		return nil, configErr("metadata", fmt.Sprintf("%.20q", lc.metadata), "is for the mutex only: a read-write lock has many holders at once")
	}
	if lc.kind == fairKind {
		return nil, configErr("WithFairness", "set", "is for the mutex only, not a read-write lock")
	}
	call := &rwCall{write: write}
	lc.kind = call
	if !wait {
		return c.tryOnce(ctx, rw.name, lc, timeout)
	}
	if write {
		var id [ownerValueLen]byte
		ownerValue(&id)
		call.intent = string(id[:])
		call.intentTTL = c.intentTTL(timeout)
	}
	l, err := c.acquire(ctx, rw.name, lc, timeout)
	call.withdraw(c)
	return l, err
}

// intentTTL is how long a waiting writer's intent lives on a node unless
// its next attempt refreshes it. The attempts of a waiting writer come at
// most RetryDelayMax apart, each taking up to a node timeout and its
// subscription's confirmation another: twice that keeps the intent alive
// while the writer waits, and lets it lapse soon after a writer died.
func (c *Client) intentTTL(nodeTimeout time.Duration) time.Duration {
	return 2 * (c.opts.RetryDelayMax + 2*nodeTimeout)
}

// rwCall is one RLock, TryRLock, Lock or TryLock call: its side, and for a
// waiting writer the intent it records. It is the kind of the call's
// attempts and lock.
type rwCall struct {
	baseKind
	write     bool
	intent    string // the waiting writer's id on the nodes; "" records none
	intentTTL time.Duration
	attempts  int      // made so far
	last      *attempt // the latest, whose calls the withdrawal must follow
	// earlier are the attempts before last that carried the intent and
	// whose calls may still run; unanswered marks, per node, where one of
	// those whose calls ended left a call without an answer in time (see
	// noteUnanswered). The withdrawal follows them too.
	earlier    []*attempt
	unanswered []bool
}

func (r *rwCall) spec() *kindSpec {
	if r.write {
		return &writerSpec
	}
	return &readerSpec
}

func (r *rwCall) attempt(c *Client, name string, ttl time.Duration) *attempt {
	a := c.newAttempt(r, name, ttl)
	r.prepare(a)
	return a
}

func (r *rwCall) extendArgs(l *Lock) []any { return keyedExtendArgs(l) }

// prepare makes a an attempt at this call's side of the lock. A writer's
// first attempt records no intent: if it wins, which is the common case,
// there is nothing to withdraw; if it loses, the next attempt follows at
// once (Acquire's loop retries right after subscribing) and records it.
func (r *rwCall) prepare(a *attempt) {
	writer, fence := a.keys[0], a.keys[1]
	readers, intents := writer+readersSuffix, writer+intentsSuffix
	channel := a.releaseArgs[len(a.releaseArgs)-1] // the release channel, last (newAttempt)
	ttl := a.ttl.Milliseconds()
	a.extKeys = []string{writer, fence, readers}
	if r.write {
		intent := ""
		if r.attempts > 0 {
			intent = r.intent
		}
		a.acquireArgs = writerSpec.acquire.args([]string{writer, fence, readers, intents}, a.value, ttl, a.proposal, a.c.fenceLifetimeArg, intent, r.intentTTL.Milliseconds())
		a.releaseArgs = writerSpec.release.args([]string{writer}, a.value, channel)
	} else {
		a.acquireArgs = readerSpec.acquire.args([]string{writer, fence, readers, intents}, a.value, ttl, a.proposal, a.c.fenceLifetimeArg)
		a.releaseArgs = readerSpec.release.args([]string{readers}, a.value, channel)
	}
	if r.intent != "" && r.attempts >= 2 { // the attempt before a carried the intent
		r.earlier = append(r.earlier, r.last)
		r.settleEarlier(false)
	}
	r.attempts++
	r.last = a
}

// settleEarlier moves the earlier attempts whose calls ended into
// unanswered; with wait, it first waits for every one's calls to end.
func (r *rwCall) settleEarlier(wait bool) {
	kept := r.earlier[:0]
	for _, e := range r.earlier {
		if wait {
			<-e.calls.ctx.Done()
		}
		select {
		case <-e.calls.ctx.Done():
			r.noteUnanswered(e)
		default:
			kept = append(kept, e)
		}
	}
	clear(r.earlier[len(kept):])
	r.earlier = kept
}

// noteUnanswered marks the nodes where a's calls, which ended (their
// context is done), got no answer in time: a call still running when the
// context ended at its timeout, or one that left as unsure. Such a call
// may still reach its node and record the intent there.
func (r *rwCall) noteUnanswered(a *attempt) {
	if r.unanswered == nil {
		r.unanswered = make([]bool, len(a.state))
	}
	for i := range a.state {
		if s := a.state[i].Load(); s&nodeUnsure != 0 || s >= nodeCall {
			r.unanswered[i] = true
		}
	}
}

// withdraw removes the writer's intent from every node once the call is
// over, if an attempt recorded one: in the background, on a context of its
// own (a cancelled caller must not leave its intent keeping readers out),
// and only after the calls of every attempt that carried it ended, so that
// none of them records the intent again behind the withdrawal. A call that
// ended unanswered may still reach its node later, and a removal that
// failed may not have: such a node is cleared once more after
// min(lateCallWait, intentTTL/2), as the mutex sweeps a key
// (attempt.sweepLater). Client.Close waits for both.
func (r *rwCall) withdraw(c *Client) {
	if r.intent == "" || r.attempts < 2 {
		return
	}
	last := r.last
	intents := last.keys[0] + intentsSuffix
	args := rwIntentClearScript.args([]string{intents}, r.intent, c.releaseChannel(last.name))
	removeOn := func(n *node) bool {
		ctx, cancel := context.WithTimeout(context.Background(), c.releaseTimeout())
		defer cancel()
		if _, err := n.run.run(ctx, rwIntentClearScript, args); err != nil {
			c.failed(n, err, last.nodeTimeout)
			return false
		}
		return true
	}
	c.bg.add()
	go func() {
		defer c.bg.done()
		r.settleEarlier(true)
		<-last.calls.ctx.Done()
		// Read before the removals: a call still running then got no
		// answer in time (the calls' context ends at its timeout too),
		// and one that answered ran before them.
		r.noteUnanswered(last)
		c.each(func(_ int, n *node) {
			if removeOn(n) && !r.unanswered[n.index] {
				return
			}
			c.bg.add()
			time.AfterFunc(min(lateCallWait, r.intentTTL/2), func() {
				defer c.bg.done()
				removeOn(n)
			})
		})
	}()
}
