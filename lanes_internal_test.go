package redlock

// The lanes of a node's acquire stream (pipe.go, nodePipes) on real
// servers: the calls of one lock keep their order however the lanes'
// writes interleave. The tests hold lanes busy by hand (no timer decides
// anything) and let them go in an order of their own: a call that went to
// another lane than its lock's earlier calls would then run first.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/redistest"
)

// holdLanes makes the given pipes busy, as a write in flight does: the
// calls made meanwhile queue on them. The returned function lets them go,
// one at a time in the order given, each written and answered before the
// next.
func holdLanes(t *testing.T, ps []*pipe) (letGo func()) {
	t.Helper()
	for _, p := range ps {
		occupy(t, p)
	}
	var once sync.Once
	letGo = func() {
		once.Do(func() {
			for _, p := range ps {
				p.idle()
				waitFor(t, "the lane's queued calls answered", func() bool { return !p.isBusy() })
			}
		})
	}
	t.Cleanup(func() {
		once.Do(func() {
			for _, p := range ps {
				p.idle()
			}
		})
	})
	return letGo
}

// occupy marks p busy, as a write in flight does, and fails t if it was
// busy already.
func occupy(t *testing.T, p *pipe) {
	t.Helper()
	p.mu.Lock()
	busy := p.busy
	p.busy = true
	p.mu.Unlock()
	if busy {
		t.Fatal("a pipe is busy with no call made")
	}
}

func (p *pipe) isBusy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.busy
}

// loadEveryScript makes the nodes know every script form. A call the node
// answers NOSCRIPT runs again by EVAL, in a write of its own: the calls a
// test queues one after the other without waiting for their answers (as
// no caller of the library does on one lock) would then run in the order
// their retries happen to queue, whatever the lanes do. A probe loads only
// the scripts the client does not know the SHA of yet, which other tests'
// servers may have told it.
func loadEveryScript(t *testing.T, nodes []redis.UniversalClient) {
	t.Helper()
	for _, rdb := range nodes {
		for _, s := range scripts {
			if err := rdb.ScriptLoad(context.Background(), s.src).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// queuedOn is how many calls wait on the lanes of node n.
func queuedOn(n *node) int {
	q := 0
	for _, p := range n.pipes.acquire {
		q += p.queued()
	}
	return q
}

// testLanes is the lanes of the tests' clients.
const testLanes = 4

// The key of every call of one lock picks the same lane, for every kind's
// keys, and the lanes are all used.
func TestEveryKeyOfALockHasItsLane(t *testing.T) {
	c := &Client{opts: Options{KeyPrefix: "p:"}}
	used := make(map[int]bool)
	for i := range 64 {
		name := fmt.Sprint("lock-", i)
		key := c.lockKey(name)
		lane := laneOf(key, testLanes)
		used[lane] = true
		for _, k := range []string{key + fenceSuffix, key + readersSuffix, key + intentsSuffix, key + releasedSuffix, c.releaseChannel(name)} {
			if laneOf(k, testLanes) != lane {
				t.Errorf("%s: key %s on lane %d, the lock key %s on %d", name, k, laneOf(k, testLanes), key, lane)
			}
		}
	}
	if len(used) != testLanes {
		t.Errorf("64 locks used %d of the %d lanes", len(used), testLanes)
	}
	if got := laneOf("p:{lock-1}", 1); got != 0 {
		t.Errorf("one lane: lane %d, want 0", got)
	}
	if got := crc16("123456789"); got != 0x31c3 {
		t.Errorf("crc16 of the check string: %#x, want 0x31c3 (CRC-16/XMODEM)", got)
	}
}

// A burst of calls of many locks, queued on a node while every lane is
// held, each lock's calls in a known order (an acquire, its release,
// another owner's acquire; a reader's acquire, its release, which names
// another key first, and a writer's acquire), runs in that order per lock
// although the lanes are let go one after the other: every release finds
// its acquire's key and every second acquire finds the lock free.
func TestLanesKeepEachLocksCallsInOrder(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{})
	c, err := New(cl.Clients(), Options{AllowNoFaultTolerance: true, TTL: 30 * time.Second, RestartGrace: NoRestartGrace, Lanes: testLanes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	n := c.nodes[0]
	ctx := context.Background()
	loadEveryScript(t, cl.Clients())

	type lockCalls struct {
		name  string
		first *attempt // acquired, then released
		then  *attempt // acquired once the first is released
	}
	var locks []lockCalls
	lanes := make(map[int]bool)
	for i := range 16 {
		m := lockCalls{name: fmt.Sprint("mutex-", i)}
		m.first = mutexKind.attempt(c, m.name, c.opts.TTL)
		m.then = mutexKind.attempt(c, m.name, c.opts.TTL)
		rw := lockCalls{name: fmt.Sprint("rw-", i)}
		rw.first = (&rwCall{}).attempt(c, rw.name, c.opts.TTL)
		rw.then = (&rwCall{write: true}).attempt(c, rw.name, c.opts.TTL)
		locks = append(locks, m, rw)
		lanes[laneOf(c.lockKey(m.name), testLanes)] = true
		lanes[laneOf(c.lockKey(rw.name), testLanes)] = true
	}
	if len(lanes) != testLanes || len(n.pipes.acquire) != testLanes {
		t.Fatalf("the locks use %d of the %d lanes of the node's %d", len(lanes), testLanes, len(n.pipes.acquire))
	}

	// The lanes are let go last first: a call queued on a lane other than
	// its lock's would run before the calls queued ahead of it.
	held := make([]*pipe, testLanes)
	for i, p := range n.pipes.acquire {
		held[testLanes-1-i] = p
	}
	letGo := holdLanes(t, held)
	steps := []struct {
		what string
		run  func(l lockCalls) ([]int64, error)
	}{
		{"first acquire", func(l lockCalls) ([]int64, error) {
			return n.pipes.run(ctx, l.first.spec.acquire, l.first.acquireArgs)
		}},
		{"its release", func(l lockCalls) ([]int64, error) {
			return n.pipes.run(ctx, l.first.spec.release, l.first.releaseArgs)
		}},
		{"the next acquire", func(l lockCalls) ([]int64, error) {
			return n.pipes.run(ctx, l.then.spec.acquire, l.then.acquireArgs)
		}},
	}
	replies := make([][][]int64, len(steps))
	errs := make([][]error, len(steps))
	var wg sync.WaitGroup
	queued := 0
	for s, step := range steps {
		replies[s], errs[s] = make([][]int64, len(locks)), make([]error, len(locks))
		for i, l := range locks {
			wg.Go(func() { replies[s][i], errs[s][i] = step.run(l) })
			queued++
			waitFor(t, "the call queued", func() bool { return queuedOn(n) == queued }) // one at a time: a known order
		}
	}
	letGo()
	wg.Wait()
	for s, step := range steps {
		for i, l := range locks {
			if err := errs[s][i]; err != nil {
				t.Errorf("%s, %s: %v", l.name, step.what, err)
				continue
			}
			if v := replies[s][i]; len(v) == 0 || v[0] != 1 {
				t.Errorf("%s, %s: answered %v, want 1 (won, or deleted)", l.name, step.what, v)
			}
		}
	}
	rdb := cl.Clients()[0]
	for _, l := range locks {
		if got, err := rdb.Get(ctx, l.then.keys[0]).Result(); err != nil || got != l.then.value {
			t.Errorf("%s holds %q (%v), want the next acquire's value", l.name, got, err)
		}
	}
}

// The quiet clean-up after a failed attempt follows the attempt's acquire
// on its lane when that acquire was written and left unanswered: the
// release, sent when the acquire's caller gave up, runs after the late
// acquire on the node, even though the other lanes run first, and deletes
// the key that acquire set.
func TestQuietCleanUpFollowsALateAcquireOnItsLane(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	ctx := context.Background()
	// The gates below block a lane's connection (BLPOP) until the test
	// opens them: the clients' read timeout must outlast the wait.
	nodes := make([]redis.UniversalClient, len(cl.Servers))
	for i, s := range cl.Servers {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ReadTimeout: 30 * time.Second, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		nodes[i] = rdb
	}
	opts := Options{TTL: time.Minute, NodeTimeout: 2 * time.Second, RestartGrace: NoRestartGrace, Lanes: testLanes}
	holder, err := New(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	c, err := New(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	loadEveryScript(t, nodes)

	// The lock is held on nodes 1 and 2, free on node 0: c's attempt
	// loses there and wins on node 0 only, late.
	const name = "late"
	key := c.lockKey(name)
	if _, err := holder.TryAcquire(ctx, name); err != nil {
		t.Fatal(err)
	}
	rdb := cl.Servers[0].Client()
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	n := c.nodes[0]
	lane := n.pipes.lane(key)
	var others []*pipe
	for _, p := range n.pipes.acquire {
		if p != lane {
			others = append(others, p)
		}
	}
	// The other lanes are held: a call that went to one of them would
	// queue there, and they are let go before the lock's.
	letOthersGo := holdLanes(t, others)
	gate := func(key string) {
		go func() {
			_ = lane.do(context.Background(), redis.NewStringSliceCmd(context.Background(), "blpop", key, 0))
		}()
	}
	gate("gate-1") // written at once: the lane is busy
	waitFor(t, "the first gate written", lane.isBusy)
	gate("gate-2") // queued behind it
	waitFor(t, "the second gate queued", func() bool { return lane.queued() == 1 })

	_, err = c.TryAcquire(ctx, name)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("the attempt: %v, want ErrLocked", err)
	}
	waitFor(t, "the acquire queued on node 0", func() bool { return lane.queued() == 2 })
	// The lane writes the second gate and the acquire together: the
	// acquire is in flight, unanswered, behind the blocked gate.
	if err := rdb.RPush(ctx, "gate-1", "go").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the acquire written", func() bool { return lane.queued() == 0 })
	// Its caller gives up at the node timeout, and the clean-up owed
	// there is sent.
	waitFor(t, "the clean-up queued", func() bool { return queuedOn(n) == 1 })
	letOthersGo()
	if err := rdb.RPush(ctx, "gate-2", "go").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node 0's lanes idle", func() bool {
		for _, p := range n.pipes.acquire {
			if p.isBusy() {
				return false
			}
		}
		return true
	})
	if got, err := rdb.Exists(ctx, key).Result(); err != nil || got != 0 {
		t.Fatalf("node 0 keeps the failed attempt's key (%d, %v) after its clean-up: the release ran before the late acquire", got, err)
	}
}

// Many workers taking and releasing shared and private locks on three
// nodes, their calls spread over every lane: no two hold a lock at once,
// and no lock key is left once the client closed.
func TestLanesUnderManyWorkersKeepExclusionAndLeaveNoKey(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c, err := New(cl.Clients(), Options{TTL: 30 * time.Second, NodeTimeout: 2 * time.Second, RestartGrace: NoRestartGrace, Lanes: testLanes})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const workers, rounds, shared = 16, 40, 4
	var names []string
	for i := range shared {
		names = append(names, fmt.Sprint("shared-", i))
	}
	for i := range workers {
		names = append(names, fmt.Sprint("own-", i))
	}
	holders := make(map[string]*atomic.Int32)
	for _, name := range names {
		holders[name] = new(atomic.Int32)
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				name := names[shared+w]
				if r%2 == 1 {
					name = names[(w+r)%shared]
				}
				l, err := c.TryAcquire(ctx, name)
				if err != nil {
					if !errors.Is(err, ErrLocked) {
						t.Errorf("%s: %v", name, err)
					}
					continue
				}
				if h := holders[name].Add(1); h != 1 {
					t.Errorf("%s: %d holders at once", name, h)
				}
				holders[name].Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Errorf("release of %s: %v", name, err)
				}
			}
		})
	}
	wg.Wait()
	if err := c.Close(); err != nil { // waits for the clean-ups
		t.Fatal(err)
	}
	for i, rdb := range cl.Clients() {
		for _, name := range names {
			if got, err := rdb.Exists(ctx, c.lockKey(name)).Result(); err != nil || got != 0 {
				t.Errorf("node %d keeps %s's key (%d, %v)", i, name, got, err)
			}
		}
	}
}

// A node's slow-node signals read every lane: the oldest write still
// unanswered on any of its pipes, and the latest answered one.
func TestSlowNodeSignalsReadEveryLane(t *testing.T) {
	ps := newNodePipes(nil, testLanes)
	if got := ps.stuckSince(); got != 0 {
		t.Fatalf("no write in flight: stuck since %d, want 0", got)
	}
	ps.acquire[1].writtenAt.Store(300)
	ps.acquire[testLanes-1].writtenAt.Store(200)
	ps.renew.writtenAt.Store(400)
	if got := ps.stuckSince(); got != 200 {
		t.Errorf("writes in flight since 300, 200 and 400: stuck since %d, want the oldest, 200", got)
	}
	ps.acquire[0].answeredWrite.Store(50)
	ps.acquire[testLanes-1].answeredWrite.Store(150)
	ps.renew.answeredWrite.Store(100)
	if got := ps.lastAnswered(); got != 150 {
		t.Errorf("answered writes sent at 50, 150 and 100: last answered %d, want 150", got)
	}
}

// Options.Lanes: one lane by default, as many as asked up to maxLanes, and
// a number out of range refused.
func TestLanesOption(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: DeferNodeChecks
	t.Cleanup(func() { _ = rdb.Close() })
	for _, tc := range []struct{ lanes, want int }{{0, 1}, {1, 1}, {testLanes, testLanes}, {maxLanes, maxLanes}} {
		c, err := New([]redis.UniversalClient{rdb}, Options{AllowNoFaultTolerance: true, DeferNodeChecks: true, Lanes: tc.lanes})
		if err != nil {
			t.Fatalf("Lanes %d: %v", tc.lanes, err)
		}
		if got := len(c.nodes[0].pipes.acquire); got != tc.want {
			t.Errorf("Lanes %d: %d lanes, want %d", tc.lanes, got, tc.want)
		}
		_ = c.Close()
	}
	for _, lanes := range []int{-1, maxLanes + 1} {
		if _, err := New([]redis.UniversalClient{rdb}, Options{AllowNoFaultTolerance: true, DeferNodeChecks: true, Lanes: lanes}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Lanes %d: %v, want ErrInvalidConfig", lanes, err)
		}
	}
}
