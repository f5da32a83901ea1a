package redlock_test

// The read-write lock against real redis-server processes.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
	"github.com/quorumlabs/redlock/redistest"
)

// rwKeys lists the keys an RWLock keeps on each node while it is held or
// waited for: the writer key, the readers and the waiting writers'
// intents. None of them stays once the lock is released and nobody waits.
func rwKeys(c *redlock.Client, name string) []string {
	k := c.Keys(name)
	return []string{k.Lock, k.Readers, k.Writers}
}

// rwKeysLeft lists "<addr> <key>" for every key of rw still on a running
// node.
func rwKeysLeft(t *testing.T, cl *redistest.Cluster, c *redlock.Client, rw *redlock.RWLock) []string {
	t.Helper()
	return keysOfLeft(t, cl, rwKeys(c, rw.Name()))
}

// noRWKeysLeft fails the test, with which as the message, if a key of
// rw is still on a running node.
func noRWKeysLeft(t *testing.T, cl *redistest.Cluster, c *redlock.Client, rw *redlock.RWLock, which string) {
	t.Helper()
	if left := rwKeysLeft(t, cl, c, rw); len(left) > 0 {
		t.Fatalf("%s: %v", which, left)
	}
}

// nodesWith counts the running nodes that hold key.
func nodesWith(cl *redistest.Cluster, key string) int {
	n := 0
	for _, s := range cl.Servers {
		if s.Running() && s.Client().Exists(context.Background(), key).Val() == 1 {
			n++
		}
	}
	return n
}

func TestRWManyReadersHoldTogetherAndKeepWritersOut(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c1 := newClient(t, cl, redlock.Options{TTL: time.Minute})
	c2 := newClient(t, cl, redlock.Options{TTL: time.Minute})
	ctx := context.Background()
	rw1, rw2 := c1.RWLock("shared"), c2.RWLock("shared")

	var readers []*redlock.Lock
	for i := range 6 {
		rw := rw1
		if i%2 == 1 {
			rw = rw2
		}
		l, err := rw.TryRLock(ctx)
		if err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
		readers = append(readers, l)
	}
	for _, rw := range []*redlock.RWLock{rw1, rw2} {
		if _, err := rw.TryLock(ctx); !errors.Is(err, redlock.ErrLocked) {
			t.Fatalf("writer beside 6 readers: got %v, want ErrLocked", err)
		}
	}
	for i, l := range readers {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release reader %d: %v", i, err)
		}
	}
	w, err := rw2.TryLock(ctx)
	if err != nil {
		t.Fatalf("writer after the readers left: %v", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c1.Close()
	_ = c2.Close()
	noRWKeysLeft(t, cl, c1, rw1, "keys left after every release")
}

func TestRWWriterExcludesReadersAndWriters(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	holder := newClient(t, cl, redlock.Options{TTL: time.Minute})
	other := newClient(t, cl, redlock.Options{TTL: time.Minute})
	ctx := context.Background()

	w, err := holder.RWLock("doc").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*redlock.Client{holder, other} {
		if _, err := c.RWLock("doc").TryRLock(ctx); !errors.Is(err, redlock.ErrLocked) {
			t.Fatalf("reader beside a writer: got %v, want ErrLocked", err)
		}
		if _, err := c.RWLock("doc").TryLock(ctx); !errors.Is(err, redlock.ErrLocked) {
			t.Fatalf("second writer: got %v, want ErrLocked", err)
		}
		// The write side is the mutex's key: the two exclude each other.
		if _, err := c.TryAcquire(ctx, "doc"); !errors.Is(err, redlock.ErrLocked) {
			t.Fatalf("mutex beside a writer: got %v, want ErrLocked", err)
		}
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := other.RWLock("doc").TryRLock(ctx)
	if err != nil {
		t.Fatalf("reader after the writer left: %v", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRWWaitingWriterStopsNewReadersAndGetsInWhileReadersKeepArriving(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	opts := redlock.Options{TTL: 5 * time.Second, RetryDelayMin: 5 * time.Millisecond, RetryDelayMax: 50 * time.Millisecond}
	readersClient := newClient(t, cl, opts)
	writerClient := newClient(t, cl, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rw := readersClient.RWLock("hot")

	// Readers arrive one after another, and each holds the lock until the
	// next one is in: without the writer's intent, some reader would always
	// hold the lock and the writer would wait for ever.
	first, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var stream sync.WaitGroup
	var refused atomic.Int64
	var held sync.Mutex // the reader that hands over holds it
	current := first
	// handOver makes next (nil: nobody) the reader in, and lets the one
	// before it go.
	handOver := func(next *redlock.Lock) {
		held.Lock()
		prev := current
		current = next
		held.Unlock()
		if prev != nil {
			_ = prev.Release(ctx)
		}
	}
	for range 2 {
		stream.Add(1)
		go func() {
			defer stream.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := rw.TryRLock(ctx)
				if err != nil {
					if errors.Is(err, redlock.ErrLocked) {
						// No successor came: the reader in finishes its work.
						refused.Add(1)
						handOver(nil)
					}
					time.Sleep(2 * time.Millisecond) // a reader arriving every few ms
					continue
				}
				handOver(l)
			}
		}()
	}

	w, err := writerClient.RWLock("hot").Lock(ctx)
	close(stop)
	stream.Wait()
	if err != nil {
		t.Fatalf("writer starved by the readers: %v", err)
	}
	if refused.Load() == 0 {
		t.Fatal("no reader was ever refused: the writer's intent kept nobody out")
	}
	held.Lock()
	last := current
	held.Unlock()
	if last != nil {
		if last.Err() == nil {
			t.Fatalf("a reader (token %d) is valid beside the writer", last.Token())
		}
		_ = last.Release(ctx)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = writerClient.Close()
	_ = readersClient.Close()
	noRWKeysLeft(t, cl, readersClient, rw, "keys left")
}

func TestRWWriterIntentKeepsReadersOutAndIsWithdrawnOnGivingUp(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: time.Minute})
	ctx := context.Background()
	rw := c.RWLock("intent")
	r, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The reader decided on two nodes; its call to the third may still be
	// on its way (the node's first probe). A writer attempt that reached
	// that node first would hold it, the late reader would be refused
	// there, and the writer would be admitted there at every attempt,
	// recording no intent on it.
	eventually(t, 10*time.Second, "the reader is on every node", func() bool {
		return nodesWith(cl, rwKeys(c, rw.Name())[1]) == 3
	})
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := rw.Lock(wctx)
		done <- err
	}()
	intents := rwKeys(c, rw.Name())[2]
	eventually(t, 10*time.Second, "the waiting writer's intent is on every node", func() bool {
		return nodesWith(cl, intents) == 3
	})
	if _, err := rw.TryRLock(ctx); !errors.Is(err, redlock.ErrLocked) {
		t.Fatalf("new reader while a writer waits: got %v, want ErrLocked", err)
	}
	// The reader already in keeps its lock: an intent stops new readers only.
	if err := r.Extend(ctx); err != nil {
		t.Fatalf("extending the reader already in: %v", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled writer: got %v, want context.Canceled", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c.Close() // waits for the withdrawal
	noRWKeysLeft(t, cl, c, rw, "keys left after the writer gave up")
}

func TestRWReleaseWakesEveryWaitingReader(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	// Retries so slow that only the release can let the readers in.
	slow := redlock.Options{TTL: time.Minute, RetryDelayMin: time.Minute, RetryDelayMax: time.Minute}
	failed := make(chan struct{}, 100)
	slowObserved := slow
	slowObserved.Observer = observe.Func(func(e observe.Event) {
		if e.Kind == observe.AcquireFailed {
			failed <- struct{}{}
		}
	})
	writer := newClient(t, cl, slow)
	readers := newClient(t, cl, slowObserved)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := writer.RWLock("wake").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	got := make(chan error, n)
	for range n {
		go func() {
			l, err := readers.RWLock("wake").RLock(ctx)
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
	}
	for range 2 * n { // each reader's first try and its retry after subscribing
		select {
		case <-failed:
		case <-ctx.Done():
			t.Fatal("the readers never tried")
		}
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-got; err != nil {
			t.Fatalf("reader: %v (not woken by the writer's release?)", err)
		}
	}
}

func TestRWWriterTokensIncreaseAndShareTheMutexRegister(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c1 := newClient(t, cl, redlock.Options{TTL: time.Minute})
	c2 := newClient(t, cl, redlock.Options{TTL: time.Minute})
	ctx := context.Background()
	var last int64
	step := func(what string, take func() (*redlock.Lock, error)) {
		t.Helper()
		l, err := take()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if l.Token() <= last {
			t.Fatalf("%s: token %d after %d", what, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		step("mutex", func() (*redlock.Lock, error) { return c1.TryAcquire(ctx, "tok") })
		step("writer", func() (*redlock.Lock, error) { return c2.RWLock("tok").TryLock(ctx) })
		step("writer", func() (*redlock.Lock, error) { return c1.RWLock("tok").Lock(ctx) })
	}
	// A register pushed far ahead of the clocks: the slow path.
	pushed := last + 1_000_000_000_000
	for _, s := range cl.Servers {
		if err := s.Client().Set(ctx, c1.Keys("tok").Fence, pushed, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	step("writer on the slow path", func() (*redlock.Lock, error) { return c2.RWLock("tok").TryLock(ctx) })
	if last != pushed+1 {
		t.Fatalf("slow-path token %d, want the register %d plus one", last, pushed)
	}
	// A reader after it, its register ahead of the clocks: the slow path, without the +1.
	r, err := c1.RWLock("tok").TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Token() != last {
		t.Fatalf("reader saw fence %d, want the last writer's token %d", r.Token(), last)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRWLossClosesDone(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: time.Minute})
	ctx := context.Background()
	rw := c.RWLock("lost")
	keys := rwKeys(c, rw.Name())

	t.Run("reader", func(t *testing.T) {
		r, err := rw.TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done := r.Done()
		// Someone wiped the readers and a writer took every node.
		for _, s := range cl.Servers {
			s.Client().Del(ctx, keys[1])
			s.Client().Set(ctx, keys[0], "intruder", time.Minute)
		}
		if err := r.Extend(ctx); !errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("extend: got %v, want ErrLockLost", err)
		}
		select {
		case <-done:
		default:
			t.Fatal("Done not closed on the loss")
		}
		for _, s := range cl.Servers {
			s.Client().Del(ctx, keys[0])
		}
	})
	t.Run("writer under DoWrite", func(t *testing.T) {
		err := rw.DoWrite(ctx, func(ctx context.Context, l *redlock.Lock) error {
			// A reader came in on every node (a fault the lock cannot see):
			// the next renewal finds another owner.
			for _, s := range cl.Servers {
				s.Client().Del(ctx, keys[0])
				s.Client().ZAdd(ctx, keys[1], redis.Z{Member: "intruder", Score: float64(time.Now().Add(time.Minute).UnixMicro())})
			}
			if err := l.Extend(ctx); !errors.Is(err, redlock.ErrLockLost) {
				t.Errorf("extend: got %v, want ErrLockLost", err)
			}
			<-ctx.Done()
			return context.Cause(ctx)
		}, redlock.WithTTL(time.Second))
		if !errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("DoWrite: got %v, want ErrLockLost", err)
		}
	})
}

func TestRWBadInput(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{})
	c := newClient(t, cl, redlock.Options{})
	ctx := context.Background()
	fn := func(context.Context, *redlock.Lock) error { return nil }
	cases := map[string]func() error{
		"empty name, RLock":    func() error { _, err := c.RWLock("").RLock(ctx); return err },
		"empty name, TryRLock": func() error { _, err := c.RWLock("").TryRLock(ctx); return err },
		"empty name, Lock":     func() error { _, err := c.RWLock("").Lock(ctx); return err },
		"empty name, TryLock":  func() error { _, err := c.RWLock("").TryLock(ctx); return err },
		"empty name, DoRead":   func() error { return c.RWLock("").DoRead(ctx, fn) },
		"empty name, DoWrite":  func() error { return c.RWLock("").DoWrite(ctx, fn) },
		"long name":            func() error { _, err := c.RWLock(strings.Repeat("x", redlock.MaxNameLen+1)).RLock(ctx); return err },
		"negative wait":        func() error { _, err := c.RWLock("x").Lock(ctx, redlock.WithMaxWait(-time.Second)); return err },
		"tiny TTL":             func() error { _, err := c.RWLock("x").TryRLock(ctx, redlock.WithTTL(time.Microsecond)); return err },
	}
	for name, call := range cases {
		err := call()
		var ce *redlock.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, redlock.ErrInvalidConfig) {
			t.Errorf("%s: got %v, want a *ConfigError", name, err)
		}
	}
	noRWKeysLeft(t, cl, c, c.RWLock("x"), "bad input left keys")
}

func TestRWRestartedNodeSitsOutForBothSides(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	const grace = 2 * time.Second
	guarded := newClient(t, cl, redlock.Options{TTL: time.Second, RestartGrace: grace})
	unguarded := newClient(t, cl, redlock.Options{TTL: time.Second})
	ctx := context.Background()
	eventually(t, 10*time.Second, "fresh nodes vote after the grace", func() bool {
		for _, n := range guarded.Nodes(ctx) {
			if !n.Voting {
				return false
			}
		}
		return true
	})
	if err := cl.Servers[1].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	// Nodes 0 (restarted empty) and 2 remain: a quorum only if node 0 votes.
	rw := guarded.RWLock("restart")
	if _, err := rw.TryRLock(ctx); !errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, redlock.ErrNodeSittingOut) {
		t.Fatalf("reader: got %v, want no quorum because the restarted node sits out", err)
	}
	// The writer tries another name: the failed reader attempt's cleanup
	// runs in the background, and a reader entry it has not yet removed
	// from node 2 would refuse the writer there before node 0 answers.
	if _, err := guarded.RWLock("restart-writer").TryLock(ctx); !errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, redlock.ErrNodeSittingOut) {
		t.Fatalf("writer: got %v, want no quorum because the restarted node sits out", err)
	}
	// Without the guard the restarted node votes at once.
	r, err := unguarded.RWLock("restart").TryRLock(ctx)
	if err != nil {
		t.Fatalf("without the restart guard: %v", err)
	}
	_ = r.Release(ctx)
	eventually(t, 10*time.Second, "restarted node votes after the grace", func() bool { return guarded.Nodes(ctx)[0].Voting })
	w, err := rw.TryLock(ctx)
	if err != nil {
		t.Fatalf("after the grace: %v", err)
	}
	_ = w.Release(ctx)
}

func ExampleRWLock() {
	urls, stop := exampleNodes(3)
	defer stop()
	client, err := redlock.NewFromURLs(urls, redlock.Options{TTL: time.Second, RestartGrace: redlock.NoRestartGrace})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	rw := client.RWLock("price-list")

	var writerToken int64
	err = rw.DoWrite(ctx, func(ctx context.Context, l *redlock.Lock) error {
		writerToken = l.Token() // pass it to the resource with every write
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	a, err := rw.RLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	b, err := rw.RLock(ctx) // readers share the lock
	if err != nil {
		log.Fatal(err)
	}
	_, err = rw.TryLock(ctx)
	fmt.Println("writer beside readers:", errors.Is(err, redlock.ErrLocked))
	// A reader's token is at least every earlier writer's: a resource that
	// keeps the token of its last write can tell that a read is not stale.
	fmt.Println("readers at or above the writer's token:", a.Token() >= writerToken && b.Token() >= writerToken)
	_ = a.Release(ctx)
	_ = b.Release(ctx)
	w, err := rw.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// And below every later writer's.
	fmt.Println("the next writer above the readers:", w.Token() > a.Token() && w.Token() > b.Token())
	_ = w.Release(ctx)
	// Output:
	// writer beside readers: true
	// readers at or above the writer's token: true
	// the next writer above the readers: true
}
