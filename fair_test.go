package redlock_test

// The fair lock against real servers: ticket order, hand-off, give-up and
// dead waiters, validity dating and tokens through hand-offs.

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// queueLens are the shortest and the longest queue of name over the nodes.
func queueLens(t *testing.T, c *redlock.Client, name string) (shortest, longest int) {
	t.Helper()
	qs, err := c.Queue(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	shortest = len(qs[0].Entries)
	for _, q := range qs {
		longest = max(longest, len(q.Entries))
		shortest = min(shortest, len(q.Entries))
	}
	return shortest, longest
}

// queueLensByNode is how many entries each node's queue of name has.
func queueLensByNode(t *testing.T, c *redlock.Client, name string) []int {
	t.Helper()
	qs, err := c.Queue(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	lens := make([]int, len(qs))
	for i, q := range qs {
		lens[i] = len(q.Entries)
	}
	return lens
}

// atLeast tells whether nodes of lens (a queueLensByNode) have n entries.
func atLeast(lens []int, n, nodes int) bool {
	have := 0
	for _, l := range lens {
		if l == n {
			have++
		}
	}
	return have >= nodes
}

// queuedEverywhere tells whether every node's queue of name has n entries.
func queuedEverywhere(t *testing.T, c *redlock.Client, name string, n int) bool {
	lo, hi := queueLens(t, c, name)
	return lo == n && hi == n
}

// fairKeysLeft lists the keys of name's lock and queue still on any node,
// the fence register aside (it outlives locks by design).
func fairKeysLeft(t *testing.T, cl *redistest.Cluster, c *redlock.Client, name string) []string {
	t.Helper()
	var left []string
	for _, s := range cl.Servers {
		keys, err := s.Client().Keys(context.Background(), c.Keys(name).Lock+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if k != c.Keys(name).Fence {
				left = append(left, s.Addr+" "+k)
			}
		}
	}
	return left
}

// noFairKeysLeft fails the test if name's lock or queue keys are left on
// any node.
func noFairKeysLeft(t *testing.T, cl *redistest.Cluster, c *redlock.Client, name string) {
	t.Helper()
	if left := fairKeysLeft(t, cl, c, name); len(left) > 0 {
		t.Fatalf("keys left behind: %v", left)
	}
}

func TestFairLockServesWaitersInTicketOrder(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 5 * time.Second})
	other := newClient(t, cl, redlock.Options{TTL: 5 * time.Second})
	ctx := context.Background()
	const name = "fair-order"
	holder, err := c.Acquire(ctx, name, redlock.WithFairness())
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 5
	var (
		mu     sync.Mutex
		order  []int
		tokens []int64
		wg     sync.WaitGroup
	)
	for i := range waiters {
		// Alternate clients: the order must hold across processes too.
		wc := c
		if i%2 == 1 {
			wc = other
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := wc.Acquire(ctx, name, redlock.WithFairness())
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			tokens = append(tokens, l.Token())
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
		// The next waiter starts only once this one is queued everywhere:
		// its ticket is then later.
		eventually(t, 5*time.Second, "waiter queued", func() bool { return queuedEverywhere(t, c, name, i+1) })
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	_ = c.Close() // waits for the releases still under way
	_ = other.Close()
	for i, w := range order {
		if w != i {
			t.Fatalf("served in order %v, want 0..%d", order, waiters-1)
		}
	}
	last := holder.Token()
	for i, tok := range tokens {
		if tok <= last {
			t.Fatalf("token %d of hand-off %d is not above %d: %v", tok, i, last, tokens)
		}
		last = tok
	}
	noFairKeysLeft(t, cl, c, name)
}

func TestFairLockHandOffDatesValidityFromTheClaim(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 2 * time.Second})
	ctx := context.Background()
	const name = "fair-validity"
	holder, err := c.Acquire(ctx, name, redlock.WithFairness(), redlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, ctx, c, name, redlock.WithFairness())
	eventually(t, 5*time.Second, "waiter queued", func() bool { return queuedEverywhere(t, c, name, 1) })
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := awaitGot(t, got)
	defer l.Release(ctx)
	// The validity ends before the key expires on a quorum: it is dated
	// from the claim round, which extended the keys, not from the grants.
	read := time.Now()
	outlive := 0
	for _, s := range cl.Servers {
		pttl, err := s.Client().PTTL(ctx, c.Keys(name).Lock).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !read.Add(pttl + time.Millisecond).Before(l.Deadline()) {
			outlive++
		}
	}
	if outlive < c.Quorum() {
		t.Fatalf("the key outlives the deadline %v on %d nodes, want a quorum", l.Deadline(), outlive)
	}
	if l.Deadline().Sub(released) > 2*time.Second {
		t.Fatalf("validity %v from the release exceeds the TTL", l.Deadline().Sub(released))
	}
	if l.Token() <= holder.Token() {
		t.Fatalf("token %d not above the previous holder's %d", l.Token(), holder.Token())
	}
}

func TestFairLockWaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 5 * time.Second})
	ctx := context.Background()
	const name = "fair-give-up"
	holder, err := c.Acquire(ctx, name, redlock.WithFairness())
	if err != nil {
		t.Fatal(err)
	}
	gaveUp := make(chan error)
	quit, cancel := context.WithCancel(ctx)
	go func() {
		_, err := c.Acquire(quit, name, redlock.WithFairness())
		gaveUp <- err
	}()
	eventually(t, 5*time.Second, "first waiter queued", func() bool { return queuedEverywhere(t, c, name, 1) })
	got := acquireAsync(t, ctx, c, name, redlock.WithFairness())
	eventually(t, 5*time.Second, "second waiter queued", func() bool { return queuedEverywhere(t, c, name, 2) })
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("gave up with %v, want context.Canceled", err)
	}
	eventually(t, 5*time.Second, "the waiter that gave up left", func() bool { return queuedEverywhere(t, c, name, 1) })
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := awaitGot(t, got)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c.Close() // waits for the releases still under way
	noFairKeysLeft(t, cl, c, name)
}

// ghost queues a waiter on every node with the fair-queue script itself, as
// a client that then dies would: it never refreshes, claims or leaves.
func ghost(t *testing.T, cl *redistest.Cluster, c *redlock.Client, name, value string, ticket int64, ttl, entryTTL time.Duration) {
	t.Helper()
	// The whole library in front of the script, as valid as the pieces
	// the client puts there (lua/lib.lua).
	var src []byte
	for _, file := range []string{"lua/lib.lua", "lua/fair_queue.lua"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	k := c.Keys(name).Lock
	keys := []string{k, k + ":fence", k + ":queue", k + ":queue:expiry", k + ":queue:settings", k + ":grant"}
	for _, s := range cl.Servers {
		err := s.Client().Eval(context.Background(), string(src), keys, "wait", value, ticket, ttl.Milliseconds(), 0, 0,
			0, entryTTL.Milliseconds(), k+":released", "0").Err()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestFairLockGrantToADeadWaiterMovesOnWhenItsEntryExpires(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: time.Second})
	ctx := context.Background()
	const name = "fair-dead-grantee"
	holder, err := c.Acquire(ctx, name, redlock.WithFairness(), redlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The ghost's ticket is the earliest: the release grants it the key,
	// for a 60s TTL, and it never claims it. Its queue entry lasts 10s: the
	// real waiter must queue behind it before that, which took over 3s on a
	// machine at a load of 10.
	ghost(t, cl, c, name, strings.Repeat("G", 26), 1, 60*time.Second, 10*time.Second)
	got := acquireAsync(t, ctx, c, name, redlock.WithFairness())
	// Behind the ghost on a quorum is what the hand-off needs. Not every
	// node: under load a round may miss one, and the waiter's entry there
	// (it lives one TTL, 1s) lapses until a later round puts it back, and
	// CI once waited 10s for all three in vain.
	deadline := time.Now().Add(8 * time.Second) // before the ghost's entry lapses
	for queued := queueLensByNode(t, c, name); !atLeast(queued, 2, 2); queued = queueLensByNode(t, c, name) {
		if time.Now().After(deadline) {
			t.Fatalf("the waiter did not queue behind the ghost on a quorum within 8s: queues of %v entries", queued)
		}
		time.Sleep(time.Millisecond)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		_ = c.Close() // waits for the releases still under way
	case <-time.After(40 * time.Second): // well below the ghost's 60s grant
		t.Fatal("the grant to the dead waiter did not move on")
	}
	noFairKeysLeft(t, cl, c, name)
}

func TestFairLockDeadWaiterLeavesWithinItsTimeout(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: time.Second})
	ctx := context.Background()
	const name = "fair-dead-waiter"
	holder, err := c.Acquire(ctx, name, redlock.WithFairness(), redlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The dying waiter has connections of its own, which the test closes:
	// it sends nothing more, its cleanup included.
	var conns []redis.UniversalClient
	for _, addr := range cl.Addrs() {
		conns = append(conns, redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1}))
	}
	dying, err := redlock.New(conns, redlock.Options{TTL: time.Second, RestartGrace: redlock.NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	stop, cancel := context.WithCancel(ctx)
	defer cancel()
	dead := make(chan struct{})
	go func() {
		defer close(dead)
		_, _ = dying.Acquire(stop, name, redlock.WithFairness())
	}()
	eventually(t, 5*time.Second, "dying waiter queued", func() bool { return queuedEverywhere(t, c, name, 1) })
	for _, rdb := range conns {
		_ = rdb.Close()
	}
	got := acquireAsync(t, ctx, c, name, redlock.WithFairness())
	eventually(t, 5*time.Second, "waiter queued", func() bool { return queuedEverywhere(t, c, name, 2) })
	eventually(t, 5*time.Second, "the dead waiter left within its 1s timeout", func() bool { return queuedEverywhere(t, c, name, 1) })
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := awaitGot(t, got)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-dead
	_ = dying.Close()
	_ = c.Close() // waits for the releases still under way
	noFairKeysLeft(t, cl, c, name)
}

func TestFairLockTryAcquire(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 5 * time.Second})
	ctx := context.Background()
	const name = "fair-try"
	l, err := c.TryAcquire(ctx, name, redlock.WithFairness())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, name, redlock.WithFairness()); !errors.Is(err, redlock.ErrLocked) {
		t.Fatalf("second TryAcquire: %v, want ErrLocked", err)
	}
	// A plain mutex acquire of the same name is excluded as well.
	if _, err := c.TryAcquire(ctx, name); !errors.Is(err, redlock.ErrLocked) {
		t.Fatalf("mutex TryAcquire: %v, want ErrLocked", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c.Close() // waits for the failed attempt's cleanup
	noFairKeysLeft(t, cl, c, name)
}

func TestFairLockBadInput(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{})
	ctx := context.Background()
	for _, tc := range []struct {
		what string
		call func() error
	}{
		{"empty name", func() error { _, err := c.Acquire(ctx, "", redlock.WithFairness()); return err }},
		{"long name", func() error {
			_, err := c.TryAcquire(ctx, strings.Repeat("x", redlock.MaxNameLen+1), redlock.WithFairness())
			return err
		}},
		{"TTL", func() error {
			_, err := c.Acquire(ctx, "n", redlock.WithFairness(), redlock.WithTTL(time.Microsecond))
			return err
		}},
		{"MaxWait", func() error {
			_, err := c.Acquire(ctx, "n", redlock.WithFairness(), redlock.WithMaxWait(-1))
			return err
		}},
		{"Queue name", func() error { _, err := c.Queue(ctx, ""); return err }},
	} {
		var ce *redlock.ConfigError
		if err := tc.call(); !errors.Is(err, redlock.ErrInvalidConfig) || !errors.As(err, &ce) {
			t.Errorf("%s: %v, want a *ConfigError", tc.what, err)
		}
	}
	noFairKeysLeft(t, cl, c, "n")
}

// A fair waiter that queued before a plain holder took the lock must get a
// token above that holder's, even where the claim meets no node that saw
// it: a node restarted empty, another is gone. Only the claim's own
// time-based proposal can keep the order there (DESIGN §2's second line of
// defence), as the mutex's does.
func TestFairLockTokenAboveAnEarlierPlainHolderAfterARestart(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	// The waiter refreshes every 10s: nothing below runs into a refresh
	// until the test wakes it.
	opts := redlock.Options{TTL: 30 * time.Second}
	waiter := newClient(t, cl, opts)
	plain := newClient(t, cl, opts) // a client of its own: it shares no token memory with the waiter
	ctx := context.Background()
	const name = "fair-token-after-plain"
	lock := waiter.Keys(name).Lock
	j, k, l := cl.Servers[0], cl.Servers[1], cl.Servers[2]
	// Another owner holds the key everywhere, for longer than the test.
	for _, s := range cl.Servers {
		if err := s.Client().Set(ctx, lock, "other", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	got := acquireAsync(t, ctx, waiter, name, redlock.WithFairness(), redlock.WithMaxWait(time.Minute))
	eventually(t, 5*time.Second, "waiter queued", func() bool { return queuedEverywhere(t, waiter, name, 1) })
	// The other owner lets go of k and l; a plain Acquire, begun after the
	// waiter's, takes them before the waiter's next round.
	for _, s := range []*redistest.Server{k, l} {
		if err := s.Client().Del(ctx, lock).Err(); err != nil {
			t.Fatal(err)
		}
	}
	p, err := plain.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// l goes away, k restarts empty (its fence register with it), and
	// the other owner lets go of j: the waiter's claim can only decide on
	// j and k, neither of which saw the plain holder's token.
	if err := l.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := k.Restart(false); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); err == nil {
		t.Fatal("the plain lock was released on a quorum after losing it on two nodes")
	}
	if err := j.Client().Del(ctx, lock).Err(); err != nil {
		t.Fatal(err)
	}
	// Wake the waiter as a release announced by j and k would.
	for _, s := range []*redistest.Server{j, k} {
		if err := s.Client().Publish(ctx, lock+":released", "gone").Err(); err != nil {
			t.Fatal(err)
		}
	}
	f := <-got
	if f == nil {
		t.FailNow()
	}
	defer f.Release(ctx)
	if f.Token() <= p.Token() {
		t.Fatalf("fair token %d is not above the token %d of the plain holder before it", f.Token(), p.Token())
	}
}

// Do with WithFairness puts its lock in fn's context: an Acquire of the
// same name inside fn, fair or plain, re-enters it instead of queueing
// behind itself; and a fair Acquire inside a plain Do re-enters too (the
// fair lock is the mutex's key).
func TestFairLockIsReentered(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 5 * time.Second})
	ctx := context.Background()
	for _, tc := range []struct {
		what          string
		outer, nested []redlock.LockOption
	}{
		{"fair in fair", []redlock.LockOption{redlock.WithFairness()}, []redlock.LockOption{redlock.WithFairness()}},
		{"plain in fair", []redlock.LockOption{redlock.WithFairness()}, nil},
		{"fair in plain", nil, []redlock.LockOption{redlock.WithFairness()}},
	} {
		name := "fair-reentered-" + strings.ReplaceAll(tc.what, " ", "-")
		err := c.Do(ctx, name, func(ctx context.Context, outer *redlock.Lock) error {
			// A waiter that queued behind itself would give up after this.
			nested, err := c.Acquire(ctx, name, append(tc.nested, redlock.WithMaxWait(3*time.Second))...)
			if err != nil {
				return err
			}
			if nested.Token() != outer.Token() {
				t.Errorf("%s: nested token %d, want the outer %d", tc.what, nested.Token(), outer.Token())
			}
			if err := nested.Release(ctx); err != nil {
				return err
			}
			return outer.Err() // the nested release leaves the outer lock held
		}, tc.outer...)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		// Do returns once a quorum deleted the key; a node that answered
		// the acquire after the decision is released in the background, in
		// milliseconds. A key left behind would live for its 5s TTL.
		eventually(t, 3*time.Second, tc.what+": no key left behind", func() bool {
			return len(fairKeysLeft(t, cl, c, name)) == 0
		})
	}
}

// A fair waiter listens to the lock's releases, so a plain holder's release
// wakes it as it wakes a plain waiter: it asks the nodes at once rather than
// at its next refresh, a third of a minute later here.
func TestFairWaiterWokenByAPlainRelease(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, slowRetries())
	w := newClient(t, cl, slowRetries())
	ctx := context.Background()
	const name = "fair-woken-by-plain"
	holder, err := c.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := w.Acquire(ctx, name, redlock.WithFairness())
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	// Queued means subscribed: the waiter listens before it joins.
	eventually(t, 5*time.Second, "waiter queued", func() bool { return queuedEverywhere(t, w, name, 1) })
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // half the 20s refresh
		t.Fatal("the fair waiter was not woken by the plain release")
	}
}

// Issue 19: a take round claims the key wherever it is ours, so waiters
// that start together each claim the nodes their calls reach first, a
// minority each, and none holds. Each must give its claims back at once,
// for every node to hand its key to the head of its queue. With a TTL of
// an hour no refresh comes within the test: only that give-back can end
// the split.
func TestFairWaitersThatStartTogetherAreAllServed(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	const name, perClient = "fair-start-together", 4
	var clients []*redlock.Client
	for range 4 {
		clients = append(clients, newClient(t, cl, redlock.Options{TTL: time.Hour}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		wg     sync.WaitGroup
		served atomic.Int32
		start  = make(chan struct{})
	)
	for _, c := range clients {
		for range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := c.Acquire(ctx, name, redlock.WithFairness())
				if err != nil {
					t.Error(err)
					return
				}
				served.Add(1)
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	if got, want := served.Load(), int32(len(clients)*perClient); got != want {
		t.Fatalf("%d of %d waiters that started together were served", got, want)
	}
	for _, c := range clients {
		_ = c.Close() // waits for the releases still under way
	}
	noFairKeysLeft(t, cl, clients[0], name)
}

// A grant message and the reply of a call that ran before the grant come on
// different connections, in either order. A waiter that let the older
// reply ("not yours") overwrite the newer message kept waiting, with the
// key granted to it on every node, until its next refresh: hand-offs
// stalled for a third of the TTL. With a TTL of an hour, such a stall
// outlasts the test.
func TestFairHandOffsDoNotWaitForARefresh(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: time.Hour})
	const name, waiters, handOffs = "fair-hand-offs", 16, 300
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		mu    sync.Mutex
		taken = sync.NewCond(&mu)
		count int // acquisitions so far
		wg    sync.WaitGroup
	)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				done := count >= handOffs
				mu.Unlock()
				if done {
					return
				}
				l, err := c.Acquire(ctx, name, redlock.WithFairness())
				if err != nil {
					t.Errorf("after %d acquisitions: %v", count, err)
					cancel()
					return
				}
				mu.Lock()
				count++
				mine := count
				mu.Unlock()
				taken.Broadcast()
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
				}
				// Step aside until another waiter has it: every
				// acquisition is a hand-off.
				mu.Lock()
				for count == mine && count < handOffs && ctx.Err() == nil {
					taken.Wait()
				}
				mu.Unlock()
			}
		}()
	}
	context.AfterFunc(ctx, func() { mu.Lock(); taken.Broadcast(); mu.Unlock() })
	wg.Wait()
	if count < handOffs {
		t.Fatalf("%d of %d hand-offs within 60s", count, handOffs)
	}
}
