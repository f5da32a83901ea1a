package redlock_test

// The semaphore against real redis-server processes: K holders at once and
// no more, wake-ups, extension, loss, tokens, no key left behind, bad input.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

func newSemaphore(t *testing.T, c *redlock.Client, name string, permits int) *redlock.Semaphore {
	t.Helper()
	s, err := c.Semaphore(name, permits)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// semaphoreKeysLeft lists the slot keys of s still present on any node.
func semaphoreKeysLeft(t *testing.T, cl *redistest.Cluster, c *redlock.Client, s *redlock.Semaphore) []string {
	t.Helper()
	var keys []string
	for i := range redlock.PermitsOf(s) {
		keys = append(keys, c.Keys(s.Name()).Permit(i))
	}
	return keysOfLeft(t, cl, keys)
}

func TestSemaphoreAdmitsKHoldersAndNoMore(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: time.Minute})
	s := newSemaphore(t, c, "jobs", 3)
	ctx := context.Background()

	var permits []*redlock.Permit
	slots := map[int]bool{}
	for range 3 {
		p, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("permit %d of 3: %v", len(permits)+1, err)
		}
		if slots[p.Slot()] {
			t.Fatalf("slot %d given twice", p.Slot())
		}
		slots[p.Slot()] = true
		permits = append(permits, p)
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, redlock.ErrLocked) {
		t.Fatalf("a fourth permit of 3: %v, want ErrLocked", err)
	}
	st, err := s.Holders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Held() != 3 {
		t.Fatalf("Holders sees %d held slots, want 3", st.Held())
	}
	for _, p := range permits {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A node still answering an acquire releases once it answered.
	eventually(t, 5*time.Second, "no slot key left after the releases", func() bool {
		return len(semaphoreKeysLeft(t, cl, c, s)) == 0
	})
	// A permit frees a slot for the next holder.
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("after the releases: %v", err)
	}
	_ = p.Release(ctx)
}

func TestSemaphoreNeverMoreThanKHoldersAndTokensIncreasePerSlot(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	clients := newClients(t, cl, redlock.Options{TTL: 5 * time.Second}, 3)
	const permits, workers, rounds = 2, 8, 15
	var (
		inside, most atomic.Int32
		mu           sync.Mutex
		tokens       = map[int][]int64{} // per slot, in the order of the critical sections
		wg           sync.WaitGroup
		errs         = make(chan error, workers)
	)
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	for w := range workers {
		s := newSemaphore(t, clients[w%len(clients)], "pool", permits)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				p, err := s.Acquire(ctx)
				if err != nil {
					errs <- err
					return
				}
				n := inside.Add(1)
				for cur := most.Load(); n > cur && !most.CompareAndSwap(cur, n); cur = most.Load() {
				}
				mu.Lock()
				tokens[p.Slot()] = append(tokens[p.Slot()], p.Token())
				mu.Unlock()
				inside.Add(-1)
				if err := p.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m := most.Load(); m > permits {
		t.Fatalf("%d holders at once, permits %d", m, permits)
	}
	total := 0
	for slot, ts := range tokens {
		total += len(ts)
		for i := 1; i < len(ts); i++ {
			if ts[i] <= ts[i-1] {
				t.Fatalf("slot %d: token %d after %d", slot, ts[i], ts[i-1])
			}
		}
	}
	if total != workers*rounds {
		t.Fatalf("%d acquisitions, want %d", total, workers*rounds)
	}
	for _, c := range clients {
		_ = c.Close()
	}
	c := newClient(t, cl, redlock.Options{})
	if left := semaphoreKeysLeft(t, cl, c, newSemaphore(t, c, "pool", permits)); len(left) > 0 {
		t.Fatalf("keys left: %v", left)
	}
}

func TestSemaphoreReleaseWakesAWaiterInAnotherClient(t *testing.T) {
	_, holder, waiter, failed := holderAndWaiter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	hs := newSemaphore(t, holder, "wake", 2)
	var held []*redlock.Permit
	for range 2 {
		p, err := hs.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	got := make(chan error, 1)
	go func() {
		p, err := newSemaphore(t, waiter, "wake", 2).Acquire(ctx)
		if err == nil {
			err = p.Release(ctx)
		}
		got <- err
	}()
	awaitWaiting(t, ctx, failed, "wake")
	start := time.Now()
	if err := held[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	// Its retries come 2.5-5s apart: only the wake-up explains less.
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the waiter took a permit %v after the release: not woken by it", took)
	}
	_ = held[0].Release(ctx)
}

func TestSemaphoreExtendMovesTheDeadlineAndTheKey(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{})
	s := newSemaphore(t, c, "ext", 2)
	ctx := context.Background()
	p, err := s.TryAcquire(ctx, redlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	// Let the keys age, then extend: their PTTL must be back near the
	// TTL on the quorum that answered.
	key := c.Keys(s.Name()).Permit(p.Slot())
	fresh := func() int {
		n := 0
		for _, srv := range cl.Servers {
			if srv.Client().PTTL(ctx, key).Val() >= 1500*time.Millisecond {
				n++
			}
		}
		return n
	}
	eventually(t, 5*time.Second, "the keys age by 500ms", func() bool { return fresh() == 0 })
	before := p.Deadline()
	if err := p.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	if !p.Deadline().After(before) {
		t.Fatalf("deadline %v did not move past %v", p.Deadline(), before)
	}
	if n := fresh(); n < c.Quorum() {
		t.Fatalf("the slot key's PTTL was renewed on %d nodes, want a quorum of %d", n, c.Quorum())
	}
}

func TestSemaphoreLossClosesDoneAndExtendReportsIt(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: time.Minute})
	s := newSemaphore(t, c, "loss", 2)
	ctx := context.Background()
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Another owner takes our slot on every node (as after an operator's
	// force, or our keys expiring while we were paused).
	for _, srv := range cl.Servers {
		srv.Client().Set(ctx, c.Keys(s.Name()).Permit(p.Slot()), "someone-else", time.Minute)
	}
	if err := p.Extend(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("extend of a taken slot: %v, want ErrLockLost", err)
	}
	endedWith(t, "the loss", p.Done(), p.Err, redlock.ErrLockLost)

	// A permit that is not extended ends with its validity. Acquire, not
	// TryAcquire: a 300ms TTL gives each node 30ms, which a loaded machine
	// may miss on a first try.
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	short, err := s.Acquire(actx, redlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-short.Done()
	if !errors.Is(short.Err(), redlock.ErrLockLost) {
		t.Fatalf("Err after the validity: %v", short.Err())
	}
}

func TestSemaphoreDoKeepsThePermitAndReleasesIt(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{})
	s := newSemaphore(t, c, "do", 1)
	ctx := context.Background()
	var extended atomic.Bool
	err := s.Do(ctx, func(ctx context.Context, p *redlock.Permit) error {
		first := p.Deadline()
		// Auto-extension moves the deadline while fn runs.
		for !p.Deadline().After(first) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		extended.Store(true)
		return nil
	}, redlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if !extended.Load() {
		t.Fatal("fn returned without seeing an extension")
	}
	eventually(t, 5*time.Second, "no slot key left after Do", func() bool {
		return len(semaphoreKeysLeft(t, cl, c, s)) == 0
	})
}

func TestSemaphoreTokensIncreaseAndSitInTheSlotsRegister(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{})
	s := newSemaphore(t, c, "tok", 1)
	ctx := context.Background()
	var last int64
	for i := range 5 {
		p, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p.Token() <= last {
			t.Fatalf("acquisition %d: token %d not above %d", i, p.Token(), last)
		}
		last = p.Token()
		// The quorum that decided holds the token in slot 0's register
		// (a straggler may not have answered yet).
		holding := 0
		for _, srv := range cl.Servers {
			fence, _ := strconv.ParseInt(srv.Client().Get(ctx, c.Keys(s.Name()).Permit(0)+":fence").Val(), 10, 64)
			if fence == p.Token() {
				holding++
			}
		}
		if holding < c.Quorum() {
			t.Fatalf("token %d is in slot 0's register on %d nodes, want a quorum of %d", p.Token(), holding, c.Quorum())
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSemaphoreCancelledAndTimedOutWaitsLeaveNoKey(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: time.Minute, RetryDelayMin: time.Millisecond, RetryDelayMax: 5 * time.Millisecond})
	s := newSemaphore(t, c, "cancel", 1)
	ctx := context.Background()

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.TryAcquire(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled TryAcquire: %v", err)
	}
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Waiters that give up while the only permit is held.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, stop := context.WithTimeout(ctx, 200*time.Millisecond)
			defer stop()
			if _, err := s.Acquire(wctx); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, redlock.ErrLocked) {
				t.Errorf("waiter: %v, want the deadline and ErrLocked", err)
			}
		}()
	}
	wg.Wait()
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c.Close() // waits for every cleanup
	if left := semaphoreKeysLeft(t, cl, c, s); len(left) > 0 {
		t.Fatalf("keys left: %v", left)
	}
}

func TestSemaphoreRefusesBadInput(t *testing.T) {
	cl := redistest.StartT(t, 2, redistest.Options{})
	c := newClient(t, cl, redlock.Options{})
	cases := []struct {
		name    string
		permits int
		field   string
	}{
		{"x", 0, "permits"},
		{"x", -3, "permits"},
		{"x", redlock.MaxPermits + 1, "permits"},
		{"", 2, "lock name"},
	}
	for _, tc := range cases {
		_, err := c.Semaphore(tc.name, tc.permits)
		var ce *redlock.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, redlock.ErrInvalidConfig) || ce.Field != tc.field {
			t.Errorf("Semaphore(%q, %d): %v, want a ConfigError on %s", tc.name, tc.permits, err, tc.field)
		}
	}
	s, err := c.Semaphore("x", 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.TryAcquire(ctx, redlock.WithTTL(-time.Second)); !errors.Is(err, redlock.ErrInvalidConfig) {
		t.Fatalf("negative TTL: %v", err)
	}
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	releaseTwice(t, ctx, p)
}

func ExampleClient_Semaphore() {
	urls, stop := exampleNodes(3)
	defer stop()
	client, err := redlock.NewFromURLs(urls, redlock.Options{RestartGrace: redlock.NoRestartGrace})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	ctx := context.Background()
	sem, err := client.Semaphore("encoder", 2)
	if err != nil {
		log.Fatal(err)
	}
	a, _ := sem.TryAcquire(ctx)
	b, _ := sem.TryAcquire(ctx)
	_, err = sem.TryAcquire(ctx) // both permits are held
	fmt.Println("slots differ:", a.Slot() != b.Slot(), "third:", errors.Is(err, redlock.ErrLocked))
	st, _ := sem.Holders(ctx)
	fmt.Println("held:", st.Held(), "of", st.Permits)
	_ = a.Release(ctx)
	_ = b.Release(ctx)
	// Output:
	// slots differ: true third: true
	// held: 2 of 2
}

func TestSemaphoreKeepsTheLocksFaultToleranceForAnyK(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: time.Minute})
	// Admission sets would need 5 of 5 nodes for K = 5 (floor(25/6)+1);
	// slots need a majority whatever K.
	s := newSemaphore(t, c, "tolerant", 5)
	for _, srv := range cl.Servers[:2] {
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	var held []*redlock.Permit
	for range 5 {
		p, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("permit %d of 5 with 2 of 5 nodes down: %v", len(held)+1, err)
		}
		held = append(held, p)
	}
	// The three live nodes refuse and the two dead ones fail: held by
	// others, or no quorum, depending on which answers decide first.
	if _, err := s.TryAcquire(ctx); !errors.Is(err, redlock.ErrLocked) && !errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("a sixth permit: %v, want ErrLocked or ErrNoQuorum", err)
	}
	for _, p := range held {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSemaphoreReleaseWakesAWaiterOfTheSameClient(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	opts, failed := failures(slowRetries())
	c := newClient(t, cl, opts)
	s := newSemaphore(t, c, "local", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		q, err := s.Acquire(ctx)
		if err == nil {
			err = q.Release(ctx)
		}
		got <- err
	}()
	awaitWaiting(t, ctx, failed, "local")
	start := time.Now()
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the waiter took the permit %v after the release: not woken by it", took)
	}
}
