package redlock

// Deterministic tests of the fair lock's quorum decisions over scripted
// fake nodes: which grants count, when a take round holds the lock, which
// token it takes, and that a failed attempt is cleaned up on every node.
// The same behaviours run against real servers in fair_test.go.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorumlabs/redlock/redistest"
)

// fairFake answers the fair-queue script with fixed replies per operation
// and records the operations it ran.
type fairFake struct {
	mu     sync.Mutex
	wait   []int64 // reply to "wait"
	take   []int64 // reply to "take"
	fail   error   // every call fails with it
	ops    []string
	raised []int64 // tokens the slow path raised the fence register to
}

func (f *fairFake) run(_ context.Context, s *script, args []any) ([]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	switch s {
	case fairQueueScript:
		op := args[fairOpArg].(string)
		f.ops = append(f.ops, op)
		switch op {
		case "wait":
			return f.wait, nil
		case "take":
			return f.take, nil
		}
		return []int64{1}, nil
	case raiseScript: // EVALSHA sha numkeys keys... value token lifetime
		f.raised = append(f.raised, args[3+args[2].(int)+1].(int64))
		return []int64{1}, nil
	}
	return []int64{1}, nil
}

func (f *fairFake) saw(op string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.ops {
		if o == op {
			return true
		}
	}
	return false
}

func newFairFakeClient(t *testing.T, fs []*fairFake) *Client {
	t.Helper()
	return newClientOverRunners(t, fs, Options{})
}

var (
	granted    = []int64{1, 1000, 0, 0}
	notGranted = []int64{0, 1000, 0, 0}
)

func claimed(before int64) []int64 { return []int64{1, before, 0, 0} }

func TestFairClaimNeedsAQuorumOfClaims(t *testing.T) {
	fs := []*fairFake{
		{take: claimed(0)},
		{take: notGranted}, // the grant moved on before our claim
		{fail: errors.New("connection refused")},
	}
	c := newFairFakeClient(t, fs)
	if l, err := c.TryAcquire(context.Background(), "x", WithFairness()); !errors.Is(err, ErrNoQuorum) || l != nil {
		t.Fatalf("one claim of three: %v, %v; want ErrNoQuorum and no lock", l, err)
	}
	_ = c.Close() // waits for the cleanup
	// A node's call may not have been sent before the attempt was decided
	// (two of three answers make a quorum impossible); one that was sent
	// is cleaned up after.
	for i, f := range fs[:2] {
		if f.saw("take") && !f.saw("release") {
			t.Errorf("node %d: no cleanup after the failed claim (ops %v)", i, f.ops)
		}
	}
}

func TestFairTakeOfAMinorityDoesNotHold(t *testing.T) {
	fs := []*fairFake{{take: claimed(0)}, {take: notGranted}, {take: notGranted}}
	c := newFairFakeClient(t, fs)
	if l, err := c.TryAcquire(context.Background(), "x", WithFairness()); !errors.Is(err, ErrLocked) || l != nil {
		t.Fatalf("claimed on one node of three: %v, %v; want ErrLocked and no lock", l, err)
	}
	_ = c.Close()
	// The call to node 0 may not have been sent before the waiter gave
	// up; if it was, the cleanup followed it and handed the key on.
	if fs[0].saw("take") && !fs[0].saw("release") {
		t.Fatal("the key the waiter that gave up claimed was not handed on")
	}
}

func TestFairClaimTakesTheTokenFromTheGrants(t *testing.T) {
	// Fast path: every node's register was below our proposal.
	fs := []*fairFake{{take: claimed(5)}, {take: claimed(7)}, {take: claimed(3)}}
	c := newFairFakeClient(t, fs)
	l, err := c.TryAcquire(context.Background(), "x", WithFairness())
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != l.a.proposal {
		t.Fatalf("fast path: token %d, want the proposal %d", l.Token(), l.a.proposal)
	}
	for _, f := range fs {
		if len(f.raised) > 0 {
			t.Fatal("fast path raised the register")
		}
	}

	// Slow path: a grant saw a register at or above our proposal.
	const high = int64(1) << 60
	fs = []*fairFake{{take: claimed(high)}, {take: claimed(high)}, {take: claimed(high)}}
	c = newFairFakeClient(t, fs)
	l, err = c.TryAcquire(context.Background(), "x", WithFairness())
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() != high+1 {
		t.Fatalf("slow path: token %d, want %d", l.Token(), high+1)
	}
	_ = c.Close()
	raised := 0
	for _, f := range fs {
		if len(f.raised) == 1 && f.raised[0] == high+1 {
			raised++
		}
	}
	if raised < c.quorum() {
		t.Fatalf("slow path raised the register on %d nodes, want a quorum", raised)
	}
}

func TestFairGrantMessagesCountPerNode(t *testing.T) {
	c := newFairFakeClient(t, []*fairFake{{}, {}, {}})
	f := c.newFairWait("x", c.opts.TTL, defaultNodeTimeout)
	c.messages.add(f)
	defer c.messages.remove(f)
	c.messages.deliver(0, "x", grantedPrefix+f.a.value)
	c.messages.deliver(0, "x", grantedPrefix+f.a.value) // a copy counts once
	if f.granted() {
		t.Fatal("one node's grant counted as a quorum")
	}
	c.messages.deliver(1, "y", grantedPrefix+f.a.value) // another lock's channel
	if f.granted() {
		t.Fatal("a grant of another lock counted")
	}
	c.messages.deliver(2, "x", grantedPrefix+f.a.value)
	select {
	case <-f.signal:
	default:
		t.Fatal("a quorum of grants did not signal the waiter")
	}
	c.messages.deliver(2, "x", grantedPrefix+"someone else") // the grant moved on
	if f.granted() {
		t.Fatal("a grant that moved to another waiter still counted")
	}
}

// holdBack runs a node's scripts through to the real server, except one
// fair-queue operation it was armed for: that call is either not sent at
// all (skip: as when the node sits out, or is in its down hold-off) or held
// back past the node timeout and handed to the test, which sends it later,
// as a call that timed out on the client may still reach the server after
// the next one.
type holdBack struct {
	inner scriptRunner
	mu    sync.Mutex
	op    string // the operation armed for, once; "" none
	skip  bool
	held  chan func() []int64
	ran   chan *script // told of every other script once the node answered it
}

func (h *holdBack) arm(op string, skip bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.op, h.skip = op, skip
}

func (h *holdBack) run(ctx context.Context, s *script, args []any) ([]int64, error) {
	h.mu.Lock()
	hit := s == fairQueueScript && h.op != "" && args[fairOpArg] == h.op
	skip := h.skip
	if hit && !skip {
		h.op = "" // hold back one call
	}
	h.mu.Unlock()
	if !hit {
		vals, err := h.inner.run(ctx, s, args)
		select {
		case h.ran <- s:
		default: // nobody listens: the buffer is full
		}
		return vals, err
	}
	if skip {
		return nil, fmt.Errorf("held back by the test: %w", errNotSent)
	}
	h.held <- func() []int64 {
		vals, err := h.inner.run(context.Background(), s, args)
		if err != nil {
			panic(err)
		}
		return vals
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// fairClients are a holder's and a waiter's clients over cl, each with go-redis
// clients of its own; the waiter's calls to node i go through hold[i].
func fairClients(t *testing.T, cl *redistest.Cluster, opts Options) (holder, waiter *Client, hold []*holdBack) {
	t.Helper()
	opts.RestartGrace = NoRestartGrace // the nodes just started
	for _, c := range []**Client{&holder, &waiter} {
		var err error
		if *c, err = NewFromURLs(cl.URLs(), opts); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = (*c).Close() })
	}
	for _, n := range waiter.nodes {
		h := &holdBack{inner: n.run, held: make(chan func() []int64, 1), ran: make(chan *script, 64)}
		n.run = h
		hold = append(hold, h)
	}
	return holder, waiter, hold
}

// ghostCall runs one fair-queue operation on s for a waiter the test plays
// by hand (value, ticket), with a TTL and an entry lifetime of a minute.
func ghostCall(t *testing.T, s *redistest.Server, c *Client, name, op, value string, ticket int64) []int64 {
	t.Helper()
	lock := c.lockKey(name)
	keys := []string{lock, lock + fenceSuffix, lock + queueSuffix, lock + expirySuffix, lock + settingsSuffix, lock + grantSuffix}
	// Its first round (1), no round failed before it; proposal 1.
	vals, err := s.Client().Eval(context.Background(), fairQueueScript.src, keys, op, value, ticket, time.Minute.Milliseconds(), 0, 1,
		0, time.Minute.Milliseconds(), c.releaseChannel(name), "0", 1).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// awaitOwner waits until s holds key for value.
func awaitOwner(t *testing.T, s *redistest.Server, key, value string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if owner, _ := s.Client().Get(context.Background(), key).Result(); owner == value {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s never held by %s", s.Addr, key, value)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func queueLen(t *testing.T, s *redistest.Server, c *Client, name string) int64 {
	t.Helper()
	n, err := s.Client().ZCard(context.Background(), c.lockKey(name)+queueSuffix).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func awaitQueues(t *testing.T, cl *redistest.Cluster, c *Client, name string, want ...int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; i < len(want); {
		if queueLen(t, cl.Servers[i], c, name) == want[i] {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d: queue of %q never reached %d entries", i, name, want[i])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Issue 17 item 2. A's claim skips l (l sits out at that moment), so l's
// key is A's by an unclaimed grant. A's extend then counts l: from then on
// A's validity rests on l's key staying A's until it expires, as a mutex's
// does. A waiter B with an earlier ticket that registers on l must not get
// it (with j restarting empty, B would hold j and l while A holds).
func TestFairLockExtendedGrantDoesNotMove(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	cH, cA, hold := fairClients(t, cl, Options{TTL: 5 * time.Second})
	ctx := context.Background()
	const name = "fair-extended-grant"
	l := cl.Servers[2]
	holder, err := cH.Acquire(ctx, name, WithFairness(), WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, ctx, cA, name, WithFairness())
	awaitQueues(t, cl, cA, name, 1, 1, 1)
	hold[2].arm("take", true) // A's take is not sent to l
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a := awaitGot(t, got)
	hold[2].arm("", false)
	for len(hold[2].ran) > 0 {
		<-hold[2].ran
	}
	if err := a.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	// The extend decides on a quorum, possibly before l answered: wait
	// until l ran it, so that it is one of the nodes the extend counted.
	for s := range hold[2].ran {
		if s.renewal {
			break
		}
	}
	if r := ghostCall(t, l, cA, name, "wait", "B-earlier-ticket", 1); r[0] == 1 {
		t.Fatal("l's key, which A's extend counted, moved to a waiter with an earlier ticket")
	}
	if owner, err := l.Client().Get(ctx, cA.lockKey(name)).Result(); err != nil || owner != a.a.value {
		t.Fatalf("l's key is %q (%v), want A's", owner, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Issue 17 item 3. A's refresh to j is held back past the node timeout,
// and A claims j and k before it arrives. B, with an earlier ticket, is
// queued on l and gets l's key from the release. The late refresh must not
// make j's key movable again: B would then get it, claim j and l, and hold
// the lock beside A.
func TestFairLockLateWaitDoesNotUnclaim(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	cH, cA, hold := fairClients(t, cl, Options{TTL: 3 * time.Second})
	ctx := context.Background()
	const name = "fair-late-wait"
	j, l := cl.Servers[0], cl.Servers[2]
	holder, err := cH.Acquire(ctx, name, WithFairness(), WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The take decides on two nodes: its call to l may still be on its way.
	awaitOwner(t, l, cH.lockKey(name), holder.a.value)
	const b = "B-earlier-ticket"
	if r := ghostCall(t, l, cA, name, "wait", b, 1); r[0] != 0 {
		t.Fatal("B got the held lock")
	}
	got := acquireAsync(t, ctx, cA, name, WithFairness())
	awaitQueues(t, cl, cA, name, 1, 1, 2)
	hold[0].arm("take", false)
	late := <-hold[0].held // A's next refresh to j, held back
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a := awaitGot(t, got)
	late() // reaches j after A's claim there
	ghostCall(t, j, cA, name, "wait", b, 1)
	claimed := 0
	for _, s := range []*redistest.Server{j, l} {
		if ghostCall(t, s, cA, name, "take", b, 1)[0] == 1 {
			claimed++
		}
	}
	if claimed >= cA.quorum() && a.Err() == nil {
		t.Fatalf("B claimed %d nodes, a quorum, while A holds: the late refresh un-claimed A's key on j", claimed)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
