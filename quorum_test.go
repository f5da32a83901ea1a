package redlock

// Deterministic tests of the quorum logic over fake nodes: in-memory
// stand-ins for the Lua scripts, whose answers a test can hold back with a
// gate. The same behaviours are tested against real servers in
// redlock_test.go.

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestTallyDecidesAsSoonAsTheOutcomeIsKnown(t *testing.T) {
	cases := []struct {
		nodes     int
		votes     []bool
		decidedAt int // index of the vote that decides, -1 if none
		won       bool
	}{
		{nodes: 5, votes: []bool{true, true, true, false, false}, decidedAt: 2, won: true},
		{nodes: 5, votes: []bool{false, false, false, true, true}, decidedAt: 2, won: false},
		{nodes: 5, votes: []bool{true, false, true, false, true}, decidedAt: 4, won: true},
		{nodes: 5, votes: []bool{true, false, true, false, false}, decidedAt: 4, won: false},
		{nodes: 3, votes: []bool{false, true, true}, decidedAt: 2, won: true},
		{nodes: 3, votes: []bool{true, false, false}, decidedAt: 2, won: false},
		{nodes: 1, votes: []bool{true}, decidedAt: 0, won: true},
		{nodes: 4, votes: []bool{true, true, false}, decidedAt: -1}, // quorum of 4 is 3
		{nodes: 4, votes: []bool{true, false, false}, decidedAt: 2, won: false},
	}
	for _, tc := range cases {
		tl := newTally(tc.nodes)
		at := -1
		var won bool
		for i, v := range tc.votes {
			if decided, w := tl.add(v); decided {
				at, won = i, w
				break
			}
		}
		if at != tc.decidedAt || won != tc.won {
			t.Errorf("%d nodes, votes %v: decided at %d (won %v), want at %d (won %v)", tc.nodes, tc.votes, at, won, tc.decidedAt, tc.won)
		}
	}
}

// closedKeepsNoKey closes c, which waits for what it sent in the
// background, and reports (t.Errorf) each node of fs that still holds key,
// after what.
func closedKeepsNoKey(t *testing.T, fs []*fakeNode, c *Client, key, after string) {
	t.Helper()
	_ = c.Close()
	for i, f := range fs {
		if v, held := f.get(key); held {
			t.Errorf("node %d kept %q %s", i, v, after)
		}
	}
}

func TestAcquireDoesNotWaitForTheSlowestNodes(t *testing.T) {
	fs := fakes(5)
	gate := make(chan struct{})
	fs[3].gate, fs[4].gate = gate, gate // before any call: no lock needed
	c := newFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 20 * time.Second})

	l, err := c.TryAcquire(context.Background(), "slow")
	if err != nil {
		t.Fatalf("acquire with 2 of 5 nodes stuck: %v", err)
	}
	for _, f := range fs[3:] {
		if _, held := f.get(c.lockKey("slow")); held {
			t.Fatal("a gated node answered before the decision")
		}
	}
	close(gate) // the stragglers now take the key for us
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
	closedKeepsNoKey(t, fs, c, c.lockKey("slow"), "after release")
}

func TestAcquireLosesAtNMinusQuorumPlusOneRefusalsAndCleansUpStragglers(t *testing.T) {
	fs := fakes(5)
	for _, f := range fs[:3] {
		f.set("redlock:{busy}", "someone-else")
	}
	gate := make(chan struct{})
	fs[3].gate, fs[4].gate = gate, gate
	c := newFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 20 * time.Second})

	_, err := c.TryAcquire(context.Background(), "busy")
	var locked *LockedError
	if !errors.As(err, &locked) || !errors.Is(err, ErrLocked) || locked.Remaining != 5*time.Second {
		t.Fatalf("got %v, want a *LockedError with 5s remaining", err)
	}
	// The stragglers answer after the decision, and win their nodes: the
	// cleanup must come after their acquire, or their keys stay behind.
	close(gate)
	_ = c.Close()
	for i, f := range fs[3:] {
		if v, held := f.get(c.lockKey("busy")); held {
			t.Errorf("straggler node %d kept %q: the release overtook the acquire", i+3, v)
		}
		h := f.history()
		if len(h) != 2 || h[0][:8] != "acquire:" || h[1][:8] != "release:" || h[0][8:] != h[1][8:] {
			t.Errorf("straggler node %d saw %v, want its acquire then the release of the same value", i+3, h)
		}
	}
	for i, f := range fs[:3] {
		if v, _ := f.get(c.lockKey("busy")); v != "someone-else" {
			t.Errorf("node %d: the other owner's key became %q", i, v)
		}
	}
}

// acquireEverywhere takes name and waits until the last node has run its
// acquire too: the acquire decides without waiting for it, and a test that
// gates the node afterwards must not catch that straggler instead.
func acquireEverywhere(t *testing.T, c *Client, fs []*fakeNode, name string) *Lock {
	t.Helper()
	last := make(chan struct{})
	fs[len(fs)-1].onAcquire = func() { close(last) }
	l, err := c.TryAcquire(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	<-last
	return l
}

func TestReleaseWaitsForAnExtendStillRunningOnANode(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 20 * time.Second})
	ctx := context.Background()
	l := acquireEverywhere(t, c, fs, "ext")
	key := c.lockKey("ext")
	// Node 2 lost our key (it restarted empty) and its extend is slow: the
	// extend succeeds on the other two and returns with that call running.
	fs[2].del(key)
	gate, arrived := fs[2].hold()
	if err := l.Extend(ctx); err != nil {
		t.Fatalf("extend with one slow node: %v", err)
	}
	<-arrived // node 2's extend is running
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	// The slow extend now repairs node 2; the release must follow it there.
	close(gate)
	_ = c.Close()
	if v, held := fs[2].get(key); held {
		t.Fatalf("node 2 kept %q: the release overtook the running extend's repair", v)
	}
	h := fs[2].history()
	if len(h) != 3 || h[0][:8] != "acquire:" || h[1][:7] != "extend:" || h[2][:8] != "release:" {
		t.Fatalf("node 2 saw %v, want acquire, extend, release", h)
	}
}

func TestReleaseCountsTheDeletionARunningExtendOwes(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 20 * time.Second})
	ctx := context.Background()
	l := acquireEverywhere(t, c, fs, "owed")
	key := c.lockKey("owed")
	gate, arrived := fs[2].hold()
	if err := l.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	<-arrived
	// Node 1 restarts empty: only node 0 and the node whose extend is
	// still running hold our key, which is still a quorum.
	fs[1].del(key)
	released := make(chan error, 1)
	go func() { released <- l.Release(ctx) }()
	for l.a.state[2].Load()&nodeReleaseAsked == 0 {
		runtime.Gosched() // until Release has found node 2's extend running
	}
	close(gate)
	if err := <-released; err != nil {
		t.Fatalf("release: %v, want nil: node 2 still held our key", err)
	}
	closedKeepsNoKey(t, fs, c, key, "after release")
}

func TestANodeWhoseCallGotNoAnswerIsSweptAfterTheRelease(t *testing.T) {
	fs := fakes(3)
	gate, late, gaveUp := make(chan struct{}), make(chan error, 1), make(chan struct{}, 1)
	fs[2].gate, fs[2].late, fs[2].gaveUp = gate, late, gaveUp
	c := newFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 50 * time.Millisecond})
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "late-set")
	if err != nil {
		t.Fatal(err)
	}
	// Node 2's acquire timed out without an answer, but the request is
	// still on its way: it sets our key after the release deleted nothing.
	<-gaveUp
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if err := <-late; err != nil {
		t.Fatal(err)
	}
	_ = c.Close() // waits for the sweep
	if v, held := fs[2].get(c.lockKey("late-set")); held {
		t.Fatalf("node 2 kept %q: nobody swept the key the late call set", v)
	}
}

func TestReleaseReachesANodeThatOnlyAnExtendWon(t *testing.T) {
	fs := fakes(3)
	fs[2].set("redlock:{late}", "someone-else") // refuses our acquire
	c := newFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 20 * time.Second})
	ctx := context.Background()
	l := acquireEverywhere(t, c, fs, "late")
	key := c.lockKey("late")
	// The other owner's key expired there, and node 1 is slow: the extend
	// needs node 2, which it repairs.
	fs[2].del(key)
	gate, _ := fs[1].hold()
	if err := l.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := fs[2].get(key); v == "" || v == "someone-else" {
		t.Fatalf("node 2 holds %q after the extend, want our key put there", v)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	close(gate)
	closedKeepsNoKey(t, fs, c, key, "after release")
}

func TestNoQuorumCarriesEveryNodeError(t *testing.T) {
	fs := fakes(3)
	boom := errors.New("connection refused")
	fs[0].fail, fs[1].fail = boom, boom
	c := newFakeClient(t, fs, Options{TTL: time.Minute})

	_, err := c.TryAcquire(context.Background(), "down")
	var qe *QuorumError
	if !errors.As(err, &qe) || !errors.Is(err, ErrNoQuorum) || !errors.Is(err, boom) {
		t.Fatalf("got %v, want a *QuorumError wrapping the node errors", err)
	}
	var ne *NodeError
	if !errors.As(err, &ne) || (ne.Node != "fake-0" && ne.Node != "fake-1") {
		t.Fatalf("no *NodeError naming a failed node in %v", err)
	}
	if qe.Needed != 2 || qe.Errors.Len() != 2 {
		t.Fatalf("got %+v, want 2 node errors and a quorum of 2", qe)
	}
	_ = c.Close()
	if v, held := fs[2].get(c.lockKey("down")); held {
		t.Fatalf("the one node that said yes kept %q", v)
	}
}

func TestValidityIsTTLLessElapsedLessDrift(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	clock := &manualClock{t: t0}
	f := newFakeNode()
	f.onAcquire = func() { clock.advance(300 * time.Millisecond) } // the round trip takes 300ms
	c := newFakeClient(t, []*fakeNode{f}, Options{TTL: 10 * time.Second, Clock: clock})
	l, err := c.TryAcquire(context.Background(), "v")
	if err != nil {
		t.Fatal(err)
	}
	// decided at t0+300ms, valid for 10s - 300ms - (1% of 10s + 2ms)
	want := t0.Add(10*time.Second - 100*time.Millisecond - 2*time.Millisecond)
	if !l.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want %v", l.Deadline().Sub(t0), want.Sub(t0))
	}
}

func TestValidityTooShortFailsAndReleases(t *testing.T) {
	fs := fakes(3)
	clock := &manualClock{t: time.Unix(1_700_000_000, 0), step: time.Second}
	c := newFakeClient(t, fs, Options{TTL: time.Second, NodeTimeout: 100 * time.Millisecond, Clock: clock})
	_, err := c.TryAcquire(context.Background(), "short")
	if !errors.Is(err, ErrValidityTooShort) {
		t.Fatalf("got %v, want ErrValidityTooShort", err)
	}
	closedKeepsNoKey(t, fs, c, c.lockKey("short"), "after an acquire of too short a validity")
}

func TestFencingFastAndSlowPath(t *testing.T) {
	fs := fakes(5)
	c := newFakeClient(t, fs, Options{TTL: time.Minute})
	ctx := context.Background()

	l1, err := c.TryAcquire(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	fast := l1.Token()
	if at := countFence(fs, c.fenceKey("f"), fast); at < c.Quorum() {
		t.Errorf("fast path: %d nodes hold the token %d in their fence, want a quorum", at, fast)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A fence far in the future on every node forces the slow path.
	future := fast + 1_000_000_000
	for _, f := range fs {
		f.set(c.fenceKey("f"), strconv.FormatInt(future, 10))
	}
	l2, err := c.TryAcquire(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() != future+1 {
		t.Fatalf("slow path token %d, want %d", l2.Token(), future+1)
	}
	if raised := countFence(fs, c.fenceKey("f"), future+1); raised < c.Quorum() {
		t.Fatalf("slow path raised the fence on %d nodes, want a quorum", raised)
	}
	_ = l2.Release(ctx)

	l3, err := c.TryAcquire(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	if l3.Token() <= l2.Token() {
		t.Fatalf("token after the slow path %d, want above %d", l3.Token(), l2.Token())
	}
}

func countFence(fs []*fakeNode, key string, token int64) int {
	n := 0
	for _, f := range fs {
		if v, _ := f.get(key); v == strconv.FormatInt(token, 10) {
			n++
		}
	}
	return n
}

func TestCancelledAcquireReturnsContextErrorAndLeavesNoKey(t *testing.T) {
	fs := fakes(3)
	gate := make(chan struct{})
	for _, f := range fs {
		f.gate = gate
	}
	c := newFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 20 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "cancel")
		done <- err
	}()
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	close(gate) // the nodes now answer, and win, after the caller left
	closedKeepsNoKey(t, fs, c, c.lockKey("cancel"), "after a cancelled acquire")
}

func TestNodeTimeoutIsEnforcedEvenWhenTheClientIgnoresDeadlines(t *testing.T) {
	fs := fakes(3)
	gate := make(chan struct{})
	for _, f := range fs[1:] {
		f.gate, f.deaf = gate, true
	}
	c := newFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 50 * time.Millisecond})
	defer close(gate) // before the client's Close, which waits for the silent calls
	_, err := c.TryAcquire(context.Background(), "deaf")
	var qe *QuorumError
	if !errors.As(err, &qe) || !errors.Is(err, context.DeadlineExceeded) || qe.Errors.Len() != 2 {
		t.Fatalf("got %v, want no quorum with an error for each silent node", err)
	}
}

func TestExtendIsBoundedByTheNodeTimeout(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 50 * time.Millisecond})
	l, err := c.TryAcquire(context.Background(), "deaf-extend")
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	defer close(gate)
	for _, f := range fs[1:] {
		f.mu.Lock()
		f.gate, f.deaf = gate, true
		f.mu.Unlock()
	}
	if err := l.Extend(context.Background()); !errors.Is(err, ErrNoQuorum) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("extend with two silent nodes: %v", err)
	}
	if l.Err() != nil {
		t.Fatalf("a failed extend lost the lock before its validity: %v", l.Err())
	}
}

func TestUnreachableNodeIsLeftOutForAShortHoldoff(t *testing.T) {
	fs := fakes(3)
	fs[0].fail = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	clock := &manualClock{t: time.Unix(1_700_000_000, 0)}
	c := newFakeClient(t, fs, Options{TTL: 10 * time.Second, Clock: clock})
	ctx := context.Background()
	tries := func() int {
		c.bg.wait() // every call of the attempts so far is done
		fs[0].mu.Lock()
		defer fs[0].mu.Unlock()
		return fs[0].tries
	}

	for i := range 3 {
		l, err := c.TryAcquire(ctx, "breaker")
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := tries(); got != 1 {
			t.Fatalf("after attempt %d the refusing node was asked %d times, want once in the hold-off", i, got)
		}
	}

	fs[0].mu.Lock()
	fs[0].fail = nil
	fs[0].mu.Unlock()
	clock.advance(time.Second + time.Millisecond) // past the hold-off
	l, err := c.TryAcquire(ctx, "breaker")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	if got := tries(); got < 2 {
		t.Fatalf("the node was not asked again after the hold-off (%d calls)", got)
	}
}

func TestRefusalsDoNotMarkANodeDown(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, Options{TTL: 10 * time.Second})
	for _, f := range fs {
		f.set(c.lockKey("taken"), "other")
	}
	if _, err := c.TryAcquire(context.Background(), "taken"); !errors.Is(err, ErrLocked) {
		t.Fatalf("got %v", err)
	}
	c.bg.wait()
	for _, n := range c.nodes {
		if n.downUntil.Load() != 0 {
			t.Fatalf("%s marked down for refusing", n.name)
		}
	}
}

// A node skipped at release because it is down may still hold our key: the
// release cannot count its deletion, and must say so (no quorum), not that
// the lock had been lost.
func TestReleaseSkippingADownNodeIsNoQuorumNotALoss(t *testing.T) {
	fs := fakes(3)
	c := newFakeClient(t, fs, Options{TTL: 10 * time.Second})
	l := acquireEverywhere(t, c, fs, "skipped")
	c.bg.wait()                     // every acquire call has ended
	fs[1].del(c.lockKey("skipped")) // node 1 lost it (restarted, say)
	c.markDown(c.nodes[2], 100*time.Millisecond)
	err := l.Release(context.Background())
	if errors.Is(err, ErrLockLost) || !errors.Is(err, ErrNoQuorum) || !errors.Is(err, ErrNodeDown) {
		t.Fatalf("got %v, want no quorum with node 2 down, not a lost lock", err)
	}
}

// A lock that another owner holds on enough nodes to make a quorum impossible
// is busy, whatever the other nodes did: one node failing first must not turn
// "held" into "no quorum" (the CLI would say the lock service is down).
func TestRefusalsThatAloneLoseAreLockedEvenWithAFailedNode(t *testing.T) {
	fs := fakes(5)
	boom := errors.New("connection refused")
	fs[0].fail = boom
	for _, f := range fs[1:] {
		f.set("redlock:{busy}", "someone-else")
	}
	// Two of the refusals come after the decision (a failure and two
	// refusals lose the round at once).
	gate := make(chan struct{})
	arrived := make(chan struct{}, 2)
	for _, f := range fs[3:] {
		f.gate, f.arrived = gate, arrived
	}
	go func() {
		<-arrived
		<-arrived
		close(gate)
	}()
	c := newFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 20 * time.Second})

	_, err := c.TryAcquire(context.Background(), "busy")
	var locked *LockedError
	if !errors.As(err, &locked) || !errors.Is(err, ErrLocked) || errors.Is(err, ErrNoQuorum) {
		t.Fatalf("held on 4 of 5 nodes, 1 failed: got %v, want a *LockedError that is not ErrNoQuorum", err)
	}
	if locked.Refused < 3 || locked.Nodes != 5 {
		t.Fatalf("got %+v, want at least 3 of 5 refusals", locked)
	}
	// The failed node's error is kept when it came in before the refusals
	// alone decided (settle stops there): on a loaded machine its answer
	// may come later, and a nil Errors then is right. No other error may
	// be there.
	if locked.Errors != nil && (locked.Errors.Len() != 1 || !errors.Is(err, boom)) {
		t.Fatalf("got %+v, want no error but the failed node's", locked)
	}
}

// When the failures were needed to lose, the answer is no quorum, and it
// names every node that failed, also those that answered after the decision,
// and how many nodes the other owner holds.
func TestNoQuorumNamesEveryFailedNodeAndCountsTheRefusals(t *testing.T) {
	fs := fakes(5)
	boom := errors.New("connection refused")
	for _, f := range fs[:3] {
		f.fail = boom
	}
	for _, f := range fs[3:] {
		f.set("redlock:{busy}", "someone-else")
	}
	c := newFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 20 * time.Second})

	_, err := c.TryAcquire(context.Background(), "busy")
	var qe *QuorumError
	if !errors.As(err, &qe) || errors.Is(err, ErrLocked) {
		t.Fatalf("3 of 5 failed, 2 held: got %v, want a *QuorumError that is not ErrLocked", err)
	}
	if qe.Errors.Len() != 3 || qe.Refused != 2 {
		t.Fatalf("got %v (%d node errors, %d refusals), want all 3 failed nodes named and 2 refusals", err, qe.Errors.Len(), qe.Refused)
	}
}
