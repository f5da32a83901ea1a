package redlock

// Deterministic tests of the read-write lock's quorum decisions over fake
// nodes that run the rw scripts' logic in memory (without expiry). The
// public behaviours are tested against real servers in rwlock_test.go.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// rwFake is one node's read-write lock state, changed by the rw scripts
// one call at a time, as one Redis would.
type rwFake struct {
	mu      sync.Mutex
	writer  string
	fence   int64
	readers map[string]bool
	intents map[string]bool
	calls   []string      // "<script>:<value or intent>", in the order they ran
	gate    chan struct{} // if set, acquires answer only once it is closed
	arrived chan struct{} // if set, told when an acquire waits at the gate
	ran     chan struct{} // if set, told when an acquire ran (after the gate)
	late    chan struct{} // if set, an acquire that gave up at the gate still runs once it opens, as a request stuck in the network does, and tells here
	cleared chan struct{} // if set, told when an intent removal ran
	scripts map[*script]string
}

func newRWFake() *rwFake {
	return &rwFake{readers: map[string]bool{}, intents: map[string]bool{}, scripts: map[*script]string{
		rwReadAcquireScript: "racquire", rwReadReleaseScript: "rrelease", rwReadExtendScript: "rextend",
		rwWriteAcquireScript: "wacquire", rwWriteReleaseScript: "wrelease", rwWriteExtendScript: "wextend",
		rwIntentClearScript: "clear", raiseScript: "raise", rwReadRaiseScript: "rraise",
	}}
}

func (f *rwFake) run(ctx context.Context, s *script, args []any) ([]int64, error) {
	f.mu.Lock()
	gate, arrived, ran, late, cleared := f.gate, f.arrived, f.ran, f.late, f.cleared
	f.mu.Unlock()
	acquire := s == rwReadAcquireScript || s == rwWriteAcquireScript
	if acquire && gate != nil {
		if arrived != nil {
			arrived <- struct{}{}
		}
		if late == nil {
			<-gate // deaf to ctx: the call is on its way, as a request in the network is
		} else {
			select {
			case <-gate:
			case <-ctx.Done():
				go func() {
					<-gate
					_, _ = f.exec(s, args)
					late <- struct{}{}
				}()
				return nil, ctx.Err()
			}
		}
	}
	vals, err := f.exec(s, args)
	if acquire && ran != nil {
		ran <- struct{}{}
	}
	if s == rwIntentClearScript && cleared != nil {
		cleared <- struct{}{}
	}
	return vals, err
}

func (f *rwFake) exec(s *script, args []any) ([]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	nkeys := args[2].(int)
	argv := args[3+nkeys:]
	str := func(i int) string { return fmt.Sprint(argv[i]) }
	num := func(i int) int64 {
		var n int64
		fmt.Sscan(fmt.Sprint(argv[i]), &n)
		return n
	}
	name, ok := f.scripts[s]
	if !ok {
		return nil, errors.New("fake: unknown script")
	}
	f.calls = append(f.calls, name+":"+str(0))
	switch s {
	case rwReadAcquireScript:
		switch {
		case f.readers[str(0)]:
		case f.writer != "":
			return []int64{0, 5000, 0, 0}, nil
		case len(f.intents) > 0:
			return []int64{0, -1, 0, 0}, nil
		}
		f.readers[str(0)] = true
		before := f.fence
		f.fence = max(f.fence, num(2))
		return []int64{1, before, 0, 0}, nil
	case rwWriteAcquireScript:
		if f.writer != str(0) && (f.writer != "" || len(f.readers) > 0) {
			if str(4) != "" {
				f.intents[str(4)] = true
			}
			return []int64{0, 5000, 0, 0}, nil
		}
		f.writer = str(0)
		delete(f.intents, str(4))
		before := f.fence
		f.fence = max(f.fence, num(2))
		return []int64{1, before, 0, 0}, nil
	case raiseScript:
		if f.writer != str(0) || f.fence > num(1) {
			return []int64{0}, nil
		}
		f.fence = num(1)
		return []int64{1}, nil
	case rwReadRaiseScript:
		if !f.readers[str(0)] {
			return []int64{0}, nil
		}
		f.fence = max(f.fence, num(1))
		return []int64{1}, nil
	case rwReadReleaseScript:
		if !f.readers[str(0)] {
			return []int64{0}, nil
		}
		delete(f.readers, str(0))
		return []int64{1}, nil
	case rwWriteReleaseScript:
		if f.writer != str(0) {
			return []int64{0}, nil
		}
		f.writer = ""
		return []int64{1}, nil
	case rwReadExtendScript:
		switch {
		case f.readers[str(0)]:
			return []int64{1, 0, 0}, nil
		case f.writer != "":
			return []int64{0, 0, 0}, nil
		case num(2) > 0 && f.fence > num(2):
			return []int64{-1, 0, 0}, nil
		}
		f.readers[str(0)] = true
		f.fence = max(f.fence, num(2))
		return []int64{2, 0, 0}, nil
	case rwWriteExtendScript:
		switch {
		case f.writer == str(0):
			return []int64{1, 0, 0}, nil
		case f.writer != "" || len(f.readers) > 0:
			return []int64{0, 0, 0}, nil
		}
		f.writer = str(0)
		return []int64{2, 0, 0}, nil
	case rwIntentClearScript:
		if !f.intents[str(0)] {
			return []int64{0}, nil
		}
		delete(f.intents, str(0))
		return []int64{1}, nil
	}
	return nil, errors.New("fake: unhandled script")
}

// state is what the node holds: the writer, and how many readers and
// intents.
func (f *rwFake) state() (writer string, readers, intents int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writer, len(f.readers), len(f.intents)
}

func (f *rwFake) history() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func newRWFakeClient(t *testing.T, fs []*rwFake, opts Options) *Client {
	t.Helper()
	return newClientOverRunners(t, fs, opts)
}

func rwFakes(n int) []*rwFake {
	fs := make([]*rwFake, n)
	for i := range fs {
		fs[i] = newRWFake()
	}
	return fs
}

func TestRWReaderWinsAMajorityBesideAWriterOnAMinority(t *testing.T) {
	fs := rwFakes(5)
	for _, f := range fs[:2] {
		f.writer = "stale-writer" // a minority: it holds no valid lock
	}
	c := newRWFakeClient(t, fs, Options{TTL: time.Minute})
	r, err := c.RWLock("doc").TryRLock(context.Background())
	if err != nil {
		t.Fatalf("reader with 3 of 5 nodes free: %v", err)
	}
	if err := r.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	for i, f := range fs {
		if _, readers, _ := f.state(); readers != 0 {
			t.Errorf("node %d kept %d readers after the release", i, readers)
		}
	}
}

func TestRWReaderLosesToAWriterOnAMajorityAndCleansUp(t *testing.T) {
	fs := rwFakes(5)
	for _, f := range fs[:3] {
		f.writer = "writer"
	}
	c := newRWFakeClient(t, fs, Options{TTL: time.Minute})
	_, err := c.RWLock("doc").TryRLock(context.Background())
	var locked *LockedError
	if !errors.As(err, &locked) {
		t.Fatalf("reader against a writer on 3 of 5: got %v, want a *LockedError", err)
	}
	_ = c.Close() // waits for the cleanup of the two nodes that admitted it
	for i, f := range fs {
		if _, readers, _ := f.state(); readers != 0 {
			t.Errorf("node %d kept the failed reader", i)
		}
	}
}

func TestRWWriterNeedsAMajorityWithoutReaders(t *testing.T) {
	for _, tc := range []struct {
		withReaders int
		wins        bool
	}{{0, true}, {2, true}, {3, false}, {5, false}} {
		t.Run(fmt.Sprintf("readers on %d of 5", tc.withReaders), func(t *testing.T) {
			fs := rwFakes(5)
			for _, f := range fs[:tc.withReaders] {
				f.readers["reader"] = true
			}
			c := newRWFakeClient(t, fs, Options{TTL: time.Minute})
			w, err := c.RWLock("doc").TryLock(context.Background())
			if tc.wins != (err == nil) {
				t.Fatalf("got %v, want a win: %v", err, tc.wins)
			}
			if err == nil {
				if w.Token() == 0 {
					t.Error("a writer got no fencing token")
				}
				if err := w.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			_ = c.Close()
			for i, f := range fs {
				writer, readers, intents := f.state()
				if writer != "" || intents != 0 {
					t.Errorf("node %d kept writer %q and %d intents", i, writer, intents)
				}
				if want := map[bool]int{true: 1, false: 0}[i < tc.withReaders]; readers != want {
					t.Errorf("node %d has %d readers, want %d", i, readers, want)
				}
			}
		})
	}
}

// Registers ahead of the reader's proposal (clients whose clocks run
// ahead, or tokens pushed up by the writers' slow path): the reader takes
// the highest its quorum returned, without the +1 a writer adds, and writes
// it on a quorum before it counts, so a writer after it draws more.
func TestRWReaderTakesTheHighestFenceOfItsQuorumAboveItsProposal(t *testing.T) {
	fs := rwFakes(3)
	ahead := time.Now().Add(24 * time.Hour).UnixMicro()
	fs[0].fence, fs[1].fence, fs[2].fence = ahead+7, ahead+9, ahead+8
	c := newRWFakeClient(t, fs, Options{TTL: time.Minute})
	r, err := c.RWLock("doc").TryRLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The decision comes at the second answer: 8 or 9, never only 7.
	if r.Token() != ahead+8 && r.Token() != ahead+9 {
		t.Fatalf("reader token %d, want the highest fence of a quorum (%d or %d)", r.Token(), ahead+8, ahead+9)
	}
	raised := 0
	for _, f := range fs {
		f.mu.Lock()
		if f.fence >= r.Token() {
			raised++
		}
		if f.fence > ahead+9 {
			t.Errorf("a register went to %d, above every value there (%d)", f.fence, ahead+9)
		}
		f.mu.Unlock()
	}
	if raised < 2 {
		t.Fatalf("the reader's token %d is in %d registers, want a quorum", r.Token(), raised)
	}
}

// The intent withdrawal must not overtake the last attempt's call still on
// its way to a node: that call would record the intent again behind it,
// and keep readers out of that node until it expires.
func TestRWIntentIsWithdrawnAfterTheLastAttemptsCalls(t *testing.T) {
	fs := rwFakes(3)
	for _, f := range fs {
		f.readers["reader"] = true
	}
	c := newRWFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 20 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	arrived := make(chan struct{}, 100)
	ran := make(chan struct{}, 100)
	gate, openGate := newGate()
	t.Cleanup(openGate) // before the client's Close, which waits for the held call
	slow := fs[2]
	slow.mu.Lock()
	slow.ran = ran
	slow.mu.Unlock()
	done := lockInBackground(ctx, c)
	// Wait for the second attempt (the first carrying the intent) to run
	// on the slow node, then gate the node's next call.
	<-ran
	<-ran
	slow.mu.Lock()
	slow.gate, slow.arrived, slow.ran = gate, arrived, nil
	slow.mu.Unlock()
	<-arrived // an attempt carrying the intent is held on its way
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	// While the call is held, the withdrawal must not start anywhere. A
	// bounded look for a non-event: it cannot fail a correct client.
	for range 20 {
		for i, f := range fs {
			for _, call := range f.history() {
				if strings.HasPrefix(call, "clear:") {
					t.Fatalf("node %d: the withdrawal ran while an attempt was still on its way", i)
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	openGate()
	_ = c.Close()
	for i, f := range fs {
		if _, _, intents := f.state(); intents != 0 {
			t.Errorf("node %d kept the intent of a writer that gave up: %v", i, f.history())
		}
	}
	h := slow.history()
	if last := h[len(h)-1]; !strings.HasPrefix(last, "clear:") {
		t.Fatalf("the slow node's last call was %q, want the withdrawal after the held acquire: %v", last, h)
	}
}

// A call of the last attempt that got no answer may still reach its node
// after the withdrawal and record the intent again there; the node is
// cleared once more, as the mutex sweeps a key after a late call.
func TestRWIntentRecordedAgainByALateCallIsClearedOnceMore(t *testing.T) {
	fs := rwFakes(3)
	for _, f := range fs {
		f.readers["reader"] = true
	}
	c := newRWFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 100 * time.Millisecond, RetryDelayMax: 5 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{}, 100)
	arrived := make(chan struct{}, 100)
	late := make(chan struct{}, 1)
	gate, openGate := newGate()
	t.Cleanup(openGate)
	slow := fs[2]
	slow.mu.Lock()
	slow.ran = ran
	slow.mu.Unlock()
	done := lockInBackground(ctx, c)
	// The second attempt (the first carrying the intent) ran on the slow
	// node; its next call there is held and times out on the client.
	<-ran
	<-ran
	slow.mu.Lock()
	cleared := make(chan struct{}, 10)
	slow.gate, slow.arrived, slow.late, slow.ran, slow.cleared = gate, arrived, late, nil, cleared
	slow.mu.Unlock()
	<-arrived
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	// The withdrawal reaches the slow node once the held call timed out;
	// only then does that call land, recording the intent behind it.
	<-cleared
	openGate()
	<-late
	if _, _, intents := slow.state(); intents == 0 {
		t.Fatalf("the late call did not record the intent again: %v", slow.history())
	}
	_ = c.Close() // waits for the second clear
	for i, f := range fs {
		if _, _, intents := f.state(); intents != 0 {
			t.Errorf("node %d kept the intent of a writer that gave up: %v", i, f.history())
		}
	}
}

// heldFirstIntent holds the first writer acquire that carries an intent
// until gate closes, deaf to its context: a call of an earlier attempt
// still on its way while later attempts run.
type heldFirstIntent struct {
	*rwFake
	once          sync.Once
	gate, arrived chan struct{}
}

func (h *heldFirstIntent) run(ctx context.Context, s *script, args []any) ([]int64, error) {
	if s == rwWriteAcquireScript {
		nkeys := args[2].(int)
		if intent := fmt.Sprint(args[3+nkeys+4]); intent != "" {
			held := false
			h.once.Do(func() { held = true })
			if held {
				h.arrived <- struct{}{}
				<-h.gate
			}
		}
	}
	return h.rwFake.run(ctx, s, args)
}

// The withdrawal follows every attempt that carried the intent, not only
// the last: an earlier one's call may land after the last one answered.
func TestRWIntentRecordedByAnEarlierAttemptsLateCallIsCleared(t *testing.T) {
	fs := rwFakes(3)
	for _, f := range fs {
		f.readers["reader"] = true
	}
	slow := &heldFirstIntent{rwFake: fs[2], gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	var open sync.Once
	openGate := func() { open.Do(func() { close(slow.gate) }) }
	c := newClientOverRunners(t, []scriptRunner{fs[0], fs[1], slow},
		Options{TTL: time.Minute, NodeTimeout: 100 * time.Millisecond, RetryDelayMax: 5 * time.Second})
	t.Cleanup(openGate)
	ran, cleared := make(chan struct{}, 100), make(chan struct{}, 10)
	fs[2].mu.Lock()
	fs[2].ran, fs[2].cleared = ran, cleared
	fs[2].mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := lockInBackground(ctx, c)
	<-slow.arrived // the second attempt's call to the slow node is on its way
	<-ran          // the first attempt ran there
	<-ran          // and the third, answered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	<-cleared
	openGate()
	_ = c.Close()
	if _, _, intents := fs[2].state(); intents != 0 {
		t.Errorf("the slow node kept the intent of a writer that gave up: %v", fs[2].history())
	}
}

func TestRWWriterExtendRepairsOnlyANodeWithoutReaders(t *testing.T) {
	fs := rwFakes(3)
	c := newRWFakeClient(t, fs, Options{TTL: time.Minute})
	w, err := c.RWLock("doc").TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Node 0 lost everything and a reader got in there; node 1 lost the
	// writer only. Node 1 is repaired, node 0 is not: still a quorum.
	fs[0].mu.Lock()
	fs[0].writer, fs[0].readers["reader"] = "", true
	fs[0].mu.Unlock()
	fs[1].mu.Lock()
	fs[1].writer = ""
	fs[1].mu.Unlock()
	if err := w.Extend(context.Background()); err != nil {
		t.Fatalf("extend with a quorum left after the repair: %v", err)
	}
	if writer, _, _ := fs[0].state(); writer != "" {
		t.Fatal("the repair put a writer beside a reader")
	}
	if writer, _, _ := fs[1].state(); writer == "" {
		t.Fatal("the node without readers was not repaired")
	}
}

// newGate is a gate for a fake node's calls and the function that opens
// it, safe to call more than once (a test's cleanup opens it too).
func newGate() (chan struct{}, func()) {
	gate := make(chan struct{})
	var open sync.Once
	return gate, func() { open.Do(func() { close(gate) }) }
}

// lockInBackground takes the read-write lock "doc" as a writer, and tells
// how the call ended.
func lockInBackground(ctx context.Context, c *Client) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.RWLock("doc").Lock(ctx)
		done <- err
	}()
	return done
}
