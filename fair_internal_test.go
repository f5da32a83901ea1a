package redlock

// Deterministic tests of the fair lock's quorum decisions over scripted
// fake nodes: which grants count, when a claim round holds the lock, which
// token it takes, and that a failed attempt is cleaned up on every node.
// The same behaviours run against real servers in fair_test.go.

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// fairFake answers the fair-queue script with fixed replies per operation
// and records the operations it ran.
type fairFake struct {
	mu     sync.Mutex
	wait   []int64 // reply to "wait"
	claim  []int64 // reply to "claim"
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
		case "claim":
			return f.claim, nil
		}
		return []int64{1}, nil
	case raiseScript:
		f.raised = append(f.raised, args[6].(int64))
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
	nodes := make([]*node, len(fs))
	for i, f := range fs {
		nodes[i] = &node{index: i, name: "fake", run: f}
	}
	c, err := newClient(nodes, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var (
	granted    = []int64{1, 1000, 0, 0}
	notGranted = []int64{0, 1000, 0, 0}
)

func claimed(before int64) []int64 { return []int64{1, before, 0, 0} }

func TestFairClaimNeedsAQuorumOfClaims(t *testing.T) {
	fs := []*fairFake{
		{wait: granted, claim: claimed(0)},
		{wait: granted, claim: notGranted}, // the grant moved on before our claim
		{fail: errors.New("connection refused")},
	}
	c := newFairFakeClient(t, fs)
	if l, err := c.TryAcquire(context.Background(), "x", WithFairness()); !errors.Is(err, ErrNoQuorum) || l != nil {
		t.Fatalf("one claim of three: %v, %v; want ErrNoQuorum and no lock", l, err)
	}
	_ = c.Close() // waits for the cleanup
	for i, f := range fs[:2] {
		if !f.saw("release") {
			t.Errorf("node %d: no cleanup after the failed claim (ops %v)", i, f.ops)
		}
	}
}

func TestFairGrantsFromAMinorityDoNotClaim(t *testing.T) {
	fs := []*fairFake{{wait: granted, claim: claimed(0)}, {wait: notGranted}, {wait: notGranted}}
	c := newFairFakeClient(t, fs)
	if _, err := c.TryAcquire(context.Background(), "x", WithFairness()); !errors.Is(err, ErrLocked) {
		t.Fatalf("granted by one node of three: %v, want ErrLocked", err)
	}
	_ = c.Close()
	if fs[0].saw("claim") {
		t.Fatal("claimed with grants from a minority")
	}
	// The call to node 0 may not have been sent before the waiter gave
	// up; if it was, the cleanup followed it.
	if fs[0].saw("wait") && !fs[0].saw("release") {
		t.Fatal("the grant made to the waiter that gave up was not handed on")
	}
}

func TestFairClaimTakesTheTokenFromTheGrants(t *testing.T) {
	// Fast path: every node's register was below our proposal.
	fs := []*fairFake{{wait: granted, claim: claimed(5)}, {wait: granted, claim: claimed(7)}, {wait: granted, claim: claimed(3)}}
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
	fs = []*fairFake{{wait: granted, claim: claimed(high)}, {wait: granted, claim: claimed(high)}, {wait: granted, claim: claimed(high)}}
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
	f := c.newFairWait("x", c.opts.TTL, DefaultNodeTimeout)
	c.fair.add(f)
	defer c.fair.remove(f)
	c.fair.granted(0, "x", f.a.value)
	c.fair.granted(0, "x", f.a.value) // a copy counts once
	if f.granted() {
		t.Fatal("one node's grant counted as a quorum")
	}
	c.fair.granted(1, "y", f.a.value) // another lock's channel
	if f.granted() {
		t.Fatal("a grant of another lock counted")
	}
	c.fair.granted(2, "x", f.a.value)
	select {
	case <-f.signal:
	default:
		t.Fatal("a quorum of grants did not signal the waiter")
	}
	c.fair.granted(2, "x", "someone else") // the grant moved on
	if f.granted() {
		t.Fatal("a grant that moved to another waiter still counted")
	}
}
