package redlock

// A counting semaphore across N independent masters: DESIGN §5, design (b).
//
// The K permits of a semaphore are K slot mutexes. Slot i has a lock key
// "<prefix>{<name>}:permit:<i>" and a fence register beside it, and is taken,
// extended, fenced and released exactly as the mutex's key is, with the same
// majority quorum: at most one valid holder per slot, hence at most K valid
// holders, whatever K. The only new part is finding a free slot without a
// round trip per slot: the acquire script takes, on each node, the first
// free slot in an order the client chose for the attempt (a rotation that
// starts at a random slot, so that contenders spread over the slots). Nodes
// in the same state thus pick the same slot. When they do not (a split),
// the client wins the slot a quorum gave it, if any, and otherwise cleans up
// as after any failed attempt and tries again. docs/PROTOCOL.md has the
// proof; per-node admission of K holders with a majority quorum would not
// bound the holders by K (DESIGN §5 shows three holders of a K=2 semaphore).
//
// Slot i is the same key whatever K, so the nodes record K beside the slots
// ("<prefix>{<name>}:permits") while any slot is held there, and refuse an
// acquire with another K: two clients of one name with different K would
// otherwise let the larger K of holders in, the smaller K's keeping none
// of its slots free. A quorum of such refusals is a *PermitsMismatchError.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// The kind's scripts, in lua/: newScript registers them for the probes to
// load (scripts.go).
var (
	semaphoreAcquireScript = newScript("semaphore_acquire.lua")
	semaphoreReleaseScript = newScript("semaphore_release.lua")
	semaphoreExtendScript  = newRenewalScript("semaphore_extend.lua")
)

// MaxPermits is the largest number of permits a Semaphore accepts. Every
// acquire scans the slots on each node (one GET per slot inside the script)
// and carries their 2K keys, so the cost grows with K; a semaphore of more
// than a few hundred permits is better served by a counter.
const MaxPermits = 256

// semaphoreTopic ends the waiters' topic of a semaphore (see waiters): the
// NUL byte keeps it apart from any mutex name a user would pick.
const semaphoreTopic = "\x00permits"

// permitsSuffix ends the key that records a semaphore's number of permits
// on a node while any of its slots is held there: "<prefix>{<name>}:permits".
const permitsSuffix = ":permits"

// permitSlotInfix comes between a semaphore's lock key and a slot's index.
const permitSlotInfix = ":permit:"

// semaphoreChannelSuffix ends a semaphore's release channel:
// "<prefix>{<name>}:permits:released", in the slot keys' hash slot.
const semaphoreChannelSuffix = ":permits" + releasedSuffix

// Semaphore lets at most Permits holders of a name hold a permit at once.
// Each permit is a lock of its own (a *Permit): its own validity, extension,
// Done and fencing token, the token strictly increasing per slot. A
// Semaphore is safe for concurrent use; make one per name and share it.
//
// Every client of a name must use the same number of permits while any
// permit of it lives: the nodes record the number with the permits
// (Keys.Permits) and refuse another, and a quorum of refusals is a
// *PermitsMismatchError. Once every permit is released or expired,
// the name is free for another number.
type Semaphore struct {
	baseKind // a Semaphore is the kind of its permits' locks (lockKind)
	c        *Client
	name     string
	permits  int
	keys     []string // the K slot keys, their K fence registers, then the record of K
	keyArgs  []any    // keys, boxed once for every attempt's commands
	kArg     any      // permits, boxed once
	channel  string   // where releases are announced
	topic    string   // the waiters' topic of that channel
}

// Permit is one held permit of a Semaphore: a Lock on one slot. Its Token
// is strictly greater than the token of every earlier holder of the same
// slot; tokens of different slots are not ordered (K holders are allowed at
// once), so a fenced resource keeps the highest token per slot.
type Permit struct {
	*Lock
	slot int
}

// Slot is the index of the permit's slot, from 0 to Permits-1.
func (p *Permit) Slot() int { return p.slot }

// Semaphore makes a semaphore of permits permits named name. It does no
// network I/O. It refuses permits below 1 or above MaxPermits. With design
// (b) the semaphore tolerates the failure of N - (N/2+1) nodes whatever
// the number of permits, as the mutex does: none below 3 nodes, which New
// accepts only with Options.AllowNoFaultTolerance.
func (c *Client) Semaphore(name string, permits int) (*Semaphore, error) {
	if _, _, err := c.params(name, nil); err != nil {
		return nil, err
	}
	switch {
	case permits < 1:
		return nil, configErr("permits", permits, "must be at least 1")
	case permits > MaxPermits:
		return nil, configErr("permits", permits, fmt.Sprintf("must be at most %d (MaxPermits)", MaxPermits))
	}
	s := &Semaphore{c: c, name: name, permits: permits, topic: name + semaphoreTopic, kArg: permits}
	s.channel = c.semaphoreChannel(name)
	s.keys = make([]string, 2*permits+1)
	s.keyArgs = make([]any, 2*permits+1)
	for i := range permits {
		s.keys[i] = s.slotKey(i)
		s.keys[permits+i] = s.keys[i] + fenceSuffix
	}
	s.keys[2*permits] = s.permitsKey()
	for i, k := range s.keys {
		s.keyArgs[i] = k
	}
	return s, nil
}

// semaphoreChannel is the release channel of the semaphore called name.
func (c *Client) semaphoreChannel(name string) string {
	return c.lockKey(name) + semaphoreChannelSuffix
}

// Name is the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// slotKey is Keys.Permit(i) of the semaphore's name.
func (s *Semaphore) slotKey(i int) string {
	return s.c.lockKey(s.name) + permitSlotInfix + strconv.Itoa(i)
}

// permitsKey is Keys.Permits of the semaphore's name.
func (s *Semaphore) permitsKey() string { return s.c.lockKey(s.name) + permitsSuffix }

// TryAcquire makes one attempt at a permit. It fails with an error matching
// ErrLocked if all permits are held by others (or contenders took the free
// ones at the same moment), ErrNoQuorum if too many nodes failed,
// ErrValidityTooShort if the attempt took too long, a *PermitsMismatchError
// (matching ErrInvalidConfig) if a quorum of nodes hold permits taken with another
// number of permits. On failure no key of the attempt stays behind.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...LockOption) (*Permit, error) {
	lc, timeout, err := s.params(opts)
	if err != nil {
		return nil, err
	}
	l, _, err := s.c.attemptLock(ctx, s.name, lc, timeout)
	return s.permit(l), err
}

// Acquire waits for a permit until one is acquired, ctx is done or MaxWait
// passes, as Client.Acquire waits for a lock: a release of any permit of the
// semaphore wakes one waiter per client at once. It does not wait out a
// *PermitsMismatchError: it returns it at once.
func (s *Semaphore) Acquire(ctx context.Context, opts ...LockOption) (*Permit, error) {
	lc, timeout, err := s.params(opts)
	if err != nil {
		return nil, err
	}
	l, err := s.c.acquire(ctx, s.name, lc, timeout)
	return s.permit(l), err
}

// Do runs fn while holding a permit, as Client.Do runs it under a lock: it
// waits for a permit, keeps it extended, releases it when fn returns, and
// cancels fn's context (cause matching ErrLockLost) if the permit is lost.
// If no permit is acquired, fn does not run and the error is Acquire's;
// otherwise Do returns fn's error, joined with one matching ErrLockLost if
// the permit was lost before fn returned.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context, p *Permit) error, opts ...LockOption) error {
	p, err := s.Acquire(ctx, append(opts[:len(opts):len(opts)], WithAutoExtend())...)
	if err != nil {
		return err
	}
	return runHeld(ctx, p.Lock, func(ctx context.Context) error { return fn(ctx, p) })
}

// params are a permit's lock parameters. Holder metadata is refused: the
// holder key is one per name, and a semaphore has many holders.
func (s *Semaphore) params(opts []LockOption) (lockConfig, time.Duration, error) {
	lc, timeout, err := s.c.params(s.name, opts)
	if err != nil {
		return lc, 0, err
	}
	if lc.metadata != "" {
		return lc, 0, configErr("metadata", fmt.Sprintf("%.20q", lc.metadata), "is for the mutex only: a semaphore has many holders at once")
	}
	if lc.kind == fairKind {
		return lc, 0, configErr("WithFairness", "set", "is for the mutex only, not a semaphore")
	}
	lc.kind = s
	return lc, timeout, nil
}

func (s *Semaphore) permit(l *Lock) *Permit {
	if l == nil {
		return nil
	}
	return &Permit{Lock: l, slot: l.a.pick}
}

// semaphoreChannelArg is the index of the release channel in the release
// command of a semaphore of k permits (evalsha sha k+1 <k slot keys>
// <record> value channel won keep k); the slot won follows it.
func semaphoreChannelArg(k int) int { return 3 + k + 1 + 1 }

// semaphoreSpec: the acquire takes one of K slot mutexes and answers with
// the slot too; once the slot is won the permit is that slot's mutex,
// extended as the mutex is by a script that also keeps the record of the
// number of permits alive. A release wakes one waiter of the semaphore,
// whichever permit it waits for, on the semaphore's own channel.
var semaphoreSpec = kindSpec{
	acquire: semaphoreAcquireScript, release: semaphoreReleaseScript, extend: semaphoreExtendScript, raise: raiseScript,
	replyLen: 5, wakes: wakeOne, topicSuffix: semaphoreTopic,
}

func init() { registerKind(&semaphoreSpec, semaphoreChannelSuffix) }

func (s *Semaphore) spec() *kindSpec { return &semaphoreSpec }

// attempt prepares one try at a permit: a new owner value, a proposal,
// a first slot, and the acquire and release commands over all the slots.
func (s *Semaphore) attempt(c *Client, _ string, ttl time.Duration) *attempt {
	k := s.permits
	a := &attempt{
		c:       c,
		kind:    s,
		spec:    &semaphoreSpec,
		name:    s.name,
		topic:   s.topic,
		ttl:     ttl,
		pick:    -1,
		replies: make(chan nodeReply, 2*len(c.nodes)),
	}
	a.state = make([]atomic.Int32, len(c.nodes))
	var v [ownerValueLen]byte
	ownerValue(&v)
	a.value = string(v[:])
	if !c.opts.DisableFencing {
		a.proposal = max(c.lastToken.Load()+1, c.clock.Now().UnixMicro())
	}
	var value, ttlArg any = a.value, c.defaultTTLArg
	if ttl != c.opts.TTL {
		ttlArg = ttl.Milliseconds()
	}
	acquireCmd, acquireCode := semaphoreAcquireScript.head()
	releaseCmd, releaseCode := semaphoreReleaseScript.head()
	a.acquireArgs = make([]any, 0, 3+2*k+1+6)
	a.acquireArgs = append(a.acquireArgs, acquireCmd, acquireCode, 2*k+1)
	a.acquireArgs = append(a.acquireArgs, s.keyArgs...)
	a.acquireArgs = append(a.acquireArgs, value, ttlArg, a.proposal, c.fenceLifetimeArg, rand.N(k), s.kArg)
	a.releaseArgs = make([]any, 0, 3+k+1+5)
	a.releaseArgs = append(a.releaseArgs, releaseCmd, releaseCode, k+1)
	a.releaseArgs = append(a.releaseArgs, s.keyArgs[:k]...)
	a.releaseArgs = append(a.releaseArgs, s.keyArgs[2*k], value, s.channel, -1, -1, s.kArg)
	return a
}

// won records the slot a quorum gave the attempt: its keys are the ones
// the fencing slow path, the extensions and the release count on. It runs
// before any release of the attempt is asked, which the attempt's per-node
// state orders after it, so changing the shared command is safe. The nodes
// that had answered with another slot clear it at once, in the background:
// nothing else of the attempt writes that slot there any more (the acquire
// has answered, extensions touch only the won slot), and left alone it
// would keep a permit of that node taken until the release or its TTL.
//
// A node that answers after the decision is covered too: its acquire call
// sends its reply, then looks at a.settled (see answered); won stores
// a.settled, then takes the replies that came after the decision. So a
// late reply is either seen here or sees the slot won, and cleans itself.
func (s *Semaphore) won(a *attempt, d decision) {
	slot := d.pick
	a.pick = slot
	a.keys = [2]string{s.keys[slot], s.keys[s.permits+slot]}
	a.extKeys = []string{a.keys[0], a.keys[1], s.keys[2*s.permits]}
	a.releaseArgs[semaphoreChannelArg(s.permits)+1] = slot
	a.settled.Store(int32(slot) + 1)
	for i, given := range d.votes.(*slotTally).given {
		if given >= 0 && int(given) != slot {
			s.clearOtherSlots(a, a.c.nodes[i], slot)
		}
	}
	// Only acquire replies can be waiting: no release was asked yet, and
	// release() skips acquire replies anyway.
	for len(a.replies) > 0 {
		if r := <-a.replies; r.kind == acquireReply && r.won && int(r.pick) != slot {
			s.clearOtherSlots(a, a.c.nodes[r.node], slot)
		}
	}
}

// answered clears, on a node whose acquire reply gave another slot than
// the one won, the slot it gave: after the reply is out, either won's
// sweep of the replies sees it, or this sees the slot won.
func (s *Semaphore) answered(a *attempt, n *node, r nodeReply) {
	if won := a.settled.Load(); won > 0 && r.pick != won-1 {
		s.clearOtherSlots(a, n, int(won-1))
	}
}

// tally decides an attempt by the votes per slot (slotTally).
func (s *Semaphore) tally(a *attempt) voteTally { return newSlotTally(len(a.c.nodes), s.permits) }

// quiet empties the release's channel argument, which is not the last.
func (s *Semaphore) quiet(a *attempt) { a.releaseArgs[semaphoreChannelArg(s.permits)] = "" }

// clearOtherSlots deletes, in the background, the attempt's owner value
// from every slot but keep on node n. Run twice for one node, it finds
// nothing the second time.
func (s *Semaphore) clearOtherSlots(a *attempt, n *node, keep int) {
	args := slices.Clone(a.releaseArgs)
	channel := semaphoreChannelArg(s.permits)
	args[channel] = "" // frees nothing anyone waits for: the slot was never held
	args[channel+1] = -1
	args[channel+2] = keep
	a.c.bg.add()
	go func() {
		defer a.c.bg.done()
		ctx, cancel := context.WithTimeout(context.Background(), a.c.releaseTimeout())
		defer cancel()
		if _, err := n.run.run(ctx, semaphoreReleaseScript, args); err != nil {
			a.c.failed(n, err, a.nodeTimeout)
		}
	}()
}

// extendArgs is the extend command of a permit: lua/semaphore_extend.lua
// on the won slot's two keys and the record of K (a.extKeys, set by won),
// with K.
func (s *Semaphore) extendArgs(l *Lock) []any {
	a := l.a
	return semaphoreExtendScript.args(a.extKeys, a.value, a.ttl.Milliseconds(), l.token, l.c.fenceLifetimeArg, s.permits)
}

// refused is the error of a lost attempt. A quorum of nodes that record
// another number of permits is a *PermitsMismatchError; fewer are counted
// as refusals (held by others): the record lives only while slots taken
// with that number are held there, so a minority of them may be a failed
// attempt's leftovers, gone with its cleanup. The core's refusal calls it
// a lost quorum when no node refused; for a semaphore that also happens
// when every node answered but gave us different slots: the permits were
// free and contenders split them, which is contention, not a node failure.
func (s *Semaphore) refused(_ *attempt, d decision, err error) error {
	if d.denied >= s.c.quorum() {
		return &PermitsMismatchError{Name: s.name, Permits: s.permits, Recorded: d.recorded, Denied: d.denied, Nodes: len(s.c.nodes)}
	}
	if d.errs == nil && d.refused == 0 && d.winners > 0 {
		return &LockedError{Name: s.name}
	}
	return err
}

// slotTally decides a semaphore attempt: won once a quorum of nodes gave
// us the same slot, lost once no slot can reach a quorum any more with the
// nodes that have not answered yet.
type slotTally struct {
	nodes, quorum int
	answered      int
	best          int     // the most votes any slot has
	yes           []int   // per slot
	maxFence      []int64 // per slot: the highest fence register among its winners
	given         []int32 // per node: the slot it gave, -1 if none (yet)
	won           int     // the slot won, once add said so
}

func newSlotTally(nodes, permits int) *slotTally {
	t := &slotTally{nodes: nodes, quorum: nodes/2 + 1, yes: make([]int, permits), maxFence: make([]int64, permits), given: make([]int32, nodes)}
	for i := range t.given {
		t.given[i] = -1
	}
	return t
}

// add counts one node's answer and tells whether the round is decided. On
// a win the winners and highest fence (winner) are the winning slot's alone:
// its fencing token must exceed every fence register of that slot's quorum
// (DESIGN §2), and the other slots' registers have no bearing on it.
func (t *slotTally) add(r nodeReply) (decided, won bool) {
	t.answered++
	if r.won && int(r.pick) >= 0 && int(r.pick) < len(t.yes) {
		i := int(r.pick)
		t.given[r.node] = r.pick
		t.yes[i]++
		t.maxFence[i] = max(t.maxFence[i], r.val)
		t.best = max(t.best, t.yes[i])
		if t.yes[i] >= t.quorum {
			t.won = i
			return true, true
		}
	}
	return t.best+t.nodes-t.answered < t.quorum, false
}

func (t *slotTally) winner() (pick, winners int, maxFence int64) {
	return t.won, t.yes[t.won], t.maxFence[t.won]
}
