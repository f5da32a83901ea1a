package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quorumlabs/redlock/redistest"
)

// The shared fixtures of the package's internal tests: fake nodes that run
// the scripts in memory, a clock the test moves, and clients over them;
// for the tests on real servers, locks held and renewed in one round, and
// keys set on the servers behind the client's back.

// fakeNode runs the scripts' logic on a map, in order, like one Redis.
type fakeNode struct {
	mu        sync.Mutex
	keys      map[string]string
	gate      chan struct{} // if set, acquire and extend answer only once it is closed
	arrived   chan struct{} // if set, told when a call waits at the gate
	deaf      bool          // the gate ignores the context, as go-redis does without ContextTimeoutEnabled
	late      chan error    // if set, a call that gave up at the gate still runs once it opens, as a request stuck in the network does, and reports here
	gaveUp    chan struct{} // with late: told when a call gives up at the gate
	onAcquire func()        // if set, runs inside every acquire
	fail      error         // if set, every call fails with it
	calls     []string      // "acquire:<value>", "extend:<value>", "release:<value>", in the order they ran
	tries     int           // acquire calls, failed ones included
}

func newFakeNode() *fakeNode { return &fakeNode{keys: map[string]string{}} }

func (f *fakeNode) run(ctx context.Context, s *script, args []any) ([]int64, error) {
	f.mu.Lock()
	gate, deaf, arrived, late, gaveUp := f.gate, f.deaf, f.arrived, f.late, f.gaveUp
	f.mu.Unlock()
	if (s == acquireScript || s == semaphoreAcquireScript || s == extendScript) && gate != nil {
		select {
		case arrived <- struct{}{}:
		default: // already told that a call waits
		}
		done := ctx.Done()
		if deaf {
			done = nil
		}
		select {
		case <-gate:
		case <-done:
			if late != nil {
				gaveUp <- struct{}{}
				go func() {
					<-gate
					_, err := f.exec(s, args)
					late <- err
				}()
			}
			return nil, ctx.Err()
		}
	}
	return f.exec(s, args)
}

// exec runs one script, as the server does once the call reaches it.
func (f *fakeNode) exec(s *script, args []any) ([]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s == acquireScript {
		f.tries++
	}
	if f.fail != nil {
		return nil, f.fail
	}
	nkeys := args[2].(int)
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = args[3+i].(string)
	}
	argv := args[3+nkeys:]
	str := func(i int) string { return fmt.Sprint(argv[i]) }
	num := func(i int) int64 { n, _ := strconv.ParseInt(fmt.Sprint(argv[i]), 10, 64); return n }
	fence := func() int64 { n, _ := strconv.ParseInt(f.keys[keys[1]], 10, 64); return n }
	if s == semaphoreAcquireScript || s == semaphoreReleaseScript {
		return f.execSemaphore(s, keys, argv)
	}
	switch s {
	case acquireScript:
		if f.onAcquire != nil {
			f.onAcquire()
		}
		f.calls = append(f.calls, "acquire:"+str(0))
		if cur, held := f.keys[keys[0]]; held && cur != str(0) {
			return []int64{0, 5000, 0, 0}, nil
		}
		f.keys[keys[0]] = str(0)
		before := fence()
		if p := num(2); p > before {
			f.keys[keys[1]] = str(2)
		}
		return []int64{1, before, 0, 0}, nil
	case raiseScript:
		if f.keys[keys[0]] != str(0) || fence() > num(1) {
			return []int64{0}, nil
		}
		f.keys[keys[1]] = str(1)
		return []int64{1}, nil
	case releaseScript:
		f.calls = append(f.calls, "release:"+str(0))
		if f.keys[keys[0]] == str(0) {
			delete(f.keys, keys[0])
			return []int64{1}, nil
		}
		return []int64{0}, nil
	case extendScript, semaphoreExtendScript:
		f.calls = append(f.calls, "extend:"+str(0))
		if s == semaphoreExtendScript {
			if recorded, ok := f.keys[keys[2]]; ok && recorded != str(4) {
				return []int64{0, 0, 0}, nil // another number of permits recorded
			}
			defer func() { f.keys[keys[2]] = str(4) }() // the record lives with the slot
		}
		switch cur, held := f.keys[keys[0]]; {
		case cur == str(0):
			return []int64{1, 0, 0}, nil
		case held:
			return []int64{0, 0, 0}, nil
		case num(2) > 0 && fence() > num(2):
			return []int64{-1, 0, 0}, nil
		}
		f.keys[keys[0]] = str(0) // the repair of a node that lost our key
		return []int64{2, 0, 0}, nil
	}
	return nil, errors.New("fake: unknown script")
}

func (f *fakeNode) get(key string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.keys[key]
	return v, ok
}

func (f *fakeNode) set(key, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys[key] = value
}

func (f *fakeNode) del(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.keys, key)
}

// hold makes the node's acquire and extend calls wait until the returned
// gate is closed; arrived hears when a call waits there.
func (f *fakeNode) hold() (gate chan struct{}, arrived <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan struct{}, 1)
	f.gate, f.arrived = make(chan struct{}), ch
	return f.gate, ch
}

func (f *fakeNode) history() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// manualClock moves only when told to, and by step on every reading.
type manualClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (m *manualClock) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.t = m.t.Add(m.step)
	return m.t
}

func (m *manualClock) advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.t = m.t.Add(d)
}

func newFakeClient(t *testing.T, fakes []*fakeNode, opts Options) *Client {
	t.Helper()
	return newClientOverRunners(t, fakes, opts)
}

// newClientOverRunners builds a client whose nodes are runs, named fake-0
// and on, closed at cleanup.
func newClientOverRunners[R scriptRunner](t *testing.T, runs []R, opts Options) *Client {
	t.Helper()
	nodes := make([]*node, len(runs))
	for i, r := range runs {
		nodes[i] = &node{index: i, name: fmt.Sprintf("fake-%d", i), run: r}
	}
	c, err := newClient(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func fakes(n int) []*fakeNode {
	fs := make([]*fakeNode, n)
	for i := range fs {
		fs[i] = newFakeNode()
	}
	return fs
}

// keysKept lists the nodes that still hold the lock key of name.
func keysKept(fs []*fakeNode, c *Client, name string) []int {
	var kept []int
	for i, f := range fs {
		if _, held := f.get(c.lockKey(name)); held {
			kept = append(kept, i)
		}
	}
	return kept
}

// acquireEach acquires n locks of c with opts, named prefix-0 and on.
func acquireEach(t *testing.T, ctx context.Context, c *Client, prefix string, n int, opts ...LockOption) []*Lock {
	t.Helper()
	locks := make([]*Lock, 0, n)
	for i := range n {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("%s-%d", prefix, i), opts...)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	return locks
}

// acquireAsync runs c.Acquire(ctx, name, opts...) in the background; the
// lock comes on the channel, nil if the acquire failed (reported with
// t.Error). The call never outlives the test: when the test ends (a
// failure elsewhere may end it first), its cleanup cancels the call and
// waits for it, so that its failure cannot be reported after the test,
// which would stop the whole package.
func acquireAsync(t *testing.T, ctx context.Context, c *Client, name string, opts ...LockOption) <-chan *Lock {
	ctx, cancel := context.WithCancel(ctx)
	got := make(chan *Lock, 1)
	done := make(chan struct{})
	ended := false // set by the cleanup before it cancels
	var mu sync.Mutex
	go func() {
		defer close(done)
		l, err := c.Acquire(ctx, name, opts...)
		mu.Lock()
		if err != nil && !ended {
			t.Error(err)
		}
		mu.Unlock()
		got <- l
	}()
	t.Cleanup(func() {
		mu.Lock()
		ended = true
		mu.Unlock()
		cancel()
		<-done
	})
	return got
}

// awaitGot waits for the lock of an acquireAsync, and stops the test if the
// acquire failed.
func awaitGot(t *testing.T, got <-chan *Lock) *Lock {
	t.Helper()
	l := <-got
	if l == nil {
		t.FailNow()
	}
	return l
}

// renewalRound renews locks in one round, as the auto-renewal sends it
// (extendBatch, each lock's extendMu held): each lock's error.
func renewalRound(ctx context.Context, c *Client, locks []*Lock) []error {
	for _, l := range locks {
		l.extendMu.Lock()
	}
	defer func() {
		for _, l := range locks {
			l.extendMu.Unlock()
		}
	}()
	_, _, errs := c.extendBatch(ctx, locks, nil, time.Second)
	return errs
}

// setOn sets key to value, for a minute, on each of servers.
func setOn(t *testing.T, ctx context.Context, servers []*redistest.Server, key, value string) {
	t.Helper()
	for _, s := range servers {
		if err := s.Client().Set(ctx, key, value, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// delOn deletes key on each of servers, as if it expired unseen.
func delOn(t *testing.T, ctx context.Context, servers []*redistest.Server, key string) {
	t.Helper()
	for _, s := range servers {
		if err := s.Client().Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// listOn makes key a list on each of servers: a key of the wrong type for
// every script and native command of a lock.
func listOn(t *testing.T, ctx context.Context, servers []*redistest.Server, key string) {
	t.Helper()
	delOn(t, ctx, servers, key)
	for _, s := range servers {
		if err := s.Client().RPush(ctx, key, "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
}
