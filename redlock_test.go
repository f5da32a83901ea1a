package redlock_test

// Integration tests against real redis-server processes that the tests start
// and stop themselves (package redistest).

import (
	"context"
	"errors"
	"fmt"
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

func TestMutualExclusionAndMonotonicTokensAcrossClients(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	clients := newClients(t, cl, redlock.Options{TTL: 5 * time.Second}, 3)
	const workers, rounds = 12, 25
	var (
		inside    atomic.Int32
		overlaps  atomic.Int32
		mu        sync.Mutex
		tokens    []int64
		wg        sync.WaitGroup
		firstErr  error
		errOnce   sync.Once
		ctx, stop = context.WithTimeout(context.Background(), 2*time.Minute)
	)
	defer stop()
	for w := range workers {
		c := clients[w%len(clients)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := c.Acquire(ctx, "counter")
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				tokens = append(tokens, l.Token())
				mu.Unlock()
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d critical sections overlapped", n)
	}
	if len(tokens) != workers*rounds {
		t.Fatalf("%d acquisitions, want %d", len(tokens), workers*rounds)
	}
	// Tokens were appended inside the critical sections, so in
	// acquisition order: they must strictly increase.
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d at acquisition %d is not above %d before it", tokens[i], i, tokens[i-1])
		}
	}
	for _, c := range clients {
		_ = c.Close()
	}
	if left := keysLeft(t, cl, clients[0], "counter"); len(left) > 0 {
		t.Fatalf("lock keys left on %v", left)
	}
}

func TestFencingSlowPathOnRealNodes(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	a := newClient(t, cl, redlock.Options{})
	b := newClient(t, cl, redlock.Options{})
	ctx := context.Background()

	l1, err := a.TryAcquire(ctx, "fenced")
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A fence far above any clock on 3 nodes: whichever quorum b wins
	// meets one of them, so the proposal loses and the slow path runs.
	high := l1.Token() + 10_000_000_000
	for _, s := range cl.Servers[:3] {
		if err := s.Client().Set(ctx, b.Keys("fenced").Fence, high, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	l2, err := b.TryAcquire(ctx, "fenced")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() != high+1 {
		t.Fatalf("slow path token %d, want %d", l2.Token(), high+1)
	}
	_ = l2.Release(ctx)
	// The fast path again, from a client that never saw the high token:
	// the nodes tell it.
	l3, err := a.TryAcquire(ctx, "fenced")
	if err != nil {
		t.Fatal(err)
	}
	if l3.Token() <= l2.Token() {
		t.Fatalf("token %d after the slow path's %d", l3.Token(), l2.Token())
	}
	_ = l3.Release(ctx)
}

func TestMinorityDownStillAcquiresMajorityDownFailsFast(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	ctx := context.Background()
	for _, s := range cl.Servers[:2] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	l, err := c.TryAcquire(ctx, "minority")
	if err != nil {
		t.Fatalf("2 of 5 nodes down: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	if err := cl.Servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	_, err = c.TryAcquire(ctx, "majority")
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || !errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("3 of 5 nodes down: got %v, want a *QuorumError", err)
	}
	if qe.Errors.Len() < 3 {
		t.Fatalf("the error keeps %d node errors, want the 3 down nodes': %v", qe.Errors.Len(), err)
	}
	_ = c.Close()
	if left := keysLeft(t, cl, c, "majority"); len(left) > 0 {
		t.Fatalf("a failed acquire left keys on %v", left)
	}
}

func TestPausedNodeDoesNotSlowTheAcquire(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	// A node timeout this long would eat most of the TTL if the acquire
	// waited for the paused node.
	const ttl, nodeTimeout = 60 * time.Second, 25 * time.Second
	c := newClient(t, cl, redlock.Options{TTL: ttl, NodeTimeout: nodeTimeout})
	ctx := context.Background()
	if info := c.Nodes(ctx)[4]; info.Err != nil { // probed now, not while paused
		t.Fatal(info.Err)
	}
	if err := cl.Servers[4].Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := c.TryAcquire(ctx, "paused")
	if err != nil {
		t.Fatal(err)
	}
	if valid := time.Until(l.Deadline()); valid < ttl-nodeTimeout {
		t.Fatalf("validity %v (acquire took %v): the acquire waited for the paused node", valid, time.Since(start))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.Servers[4].Resume(); err != nil {
		t.Fatal(err)
	}
	_ = c.Close() // waits for the paused node's late acquire and its release
	if left := keysLeft(t, cl, c, "paused"); len(left) > 0 {
		t.Fatalf("keys left on %v after the paused node woke up", left)
	}
}

func TestRestartedNodeSitsOutUntilTheGracePasses(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	const grace = 2 * time.Second
	guarded := newClient(t, cl, redlock.Options{TTL: time.Second, RestartGrace: grace})
	unguarded := newClient(t, cl, redlock.Options{TTL: time.Second})
	ctx := context.Background()
	allVoting := func(c *redlock.Client) func() bool {
		return func() bool {
			for _, n := range c.Nodes(ctx) {
				if !n.Voting {
					return false
				}
			}
			return true
		}
	}
	// Fresh servers are young too: the guard waits for them as well.
	eventually(t, 10*time.Second, "fresh nodes vote after the grace", allVoting(guarded))

	if err := cl.Servers[1].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	// Nodes 0 (restarted empty) and 2 remain: a quorum only if node 0 votes.
	_, err := guarded.TryAcquire(ctx, "restart")
	if !errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, redlock.ErrNodeSittingOut) {
		t.Fatalf("got %v, want no quorum because the restarted node sits out", err)
	}
	info := guarded.Nodes(ctx)[0]
	if info.Voting || !strings.Contains(info.SitOutReason, "restart") {
		t.Fatalf("node 0: voting %v, reason %q; want sitting out for the restart", info.Voting, info.SitOutReason)
	}
	// Without the guard the restarted node votes at once: this is the
	// window in which it could hand out a lock it forgot.
	l, err := unguarded.TryAcquire(ctx, "restart")
	if err != nil {
		t.Fatalf("without the restart guard: %v", err)
	}
	_ = l.Release(ctx)

	eventually(t, 10*time.Second, "restarted node votes after the grace", func() bool { return guarded.Nodes(ctx)[0].Voting })
	l, err = guarded.TryAcquire(ctx, "restart")
	if err != nil {
		t.Fatalf("after the grace: %v", err)
	}
	_ = l.Release(ctx)
}

func TestDoExtendsAcrossSeveralTTLsAndCancelsOnLoss(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	const ttl = time.Second // extensions every ~300ms, each with 100ms per node: robust on a busy machine
	c := newClient(t, cl, redlock.Options{TTL: ttl})
	ctx := context.Background()

	var extended atomic.Int32
	err := c.Do(ctx, "long", func(ctx context.Context, l *redlock.Lock) error {
		first := l.Deadline()
		// Hold the lock for four TTLs: the work itself, not a wait for
		// an event.
		hold := time.NewTimer(4 * ttl)
		defer hold.Stop()
		select {
		case <-hold.C:
		case <-ctx.Done():
			return fmt.Errorf("lock lost while held: %w", context.Cause(ctx))
		}
		if !l.Deadline().After(first.Add(2 * ttl)) {
			t.Errorf("deadline moved from %v to %v over 4 TTLs: not extended", first, l.Deadline())
		}
		st, err := c.Inspect(ctx, "long")
		if err != nil || !st.Held || st.Fence != l.Token() {
			t.Errorf("after 4 TTLs: %+v, %v; want held with fence %d", st, err, l.Token())
		}
		extended.Add(1)
		return nil
	})
	if err != nil || extended.Load() != 1 {
		t.Fatalf("Do: %v", err)
	}

	// Now take the lock away from the holder on a majority: the next
	// extension finds another owner and the holder's context ends.
	err = c.Do(ctx, "stolen", func(ctx context.Context, l *redlock.Lock) error {
		for _, s := range cl.Servers[:2] {
			if err := s.Client().Set(ctx, c.Keys("stolen").Lock, "thief", time.Minute).Err(); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), redlock.ErrLockLost) {
				t.Errorf("cause %v, want ErrLockLost", context.Cause(ctx))
			}
			return nil
		case <-time.After(10 * ttl):
			return errors.New("the holder was not told of the loss")
		}
	})
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Do after the theft: %v, want ErrLockLost", err)
	}
	for _, s := range cl.Servers[:2] {
		if v, _ := s.Client().Get(ctx, c.Keys("stolen").Lock).Result(); v != "thief" {
			t.Errorf("%s: the thief's key became %q: the loser deleted another owner's key", s.Addr, v)
		}
	}
}

// Done, first asked after the lock's validity ended, is closed already: a
// holder that polls it must not take an ended lock for held (it once
// armed a timer of negative delay and returned an open channel).
func TestDoneFirstAskedAfterTheDeadlineIsClosed(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 300 * time.Millisecond})
	l, err := c.Acquire(context.Background(), "polled")
	if err != nil {
		t.Fatal(err)
	}
	for !time.Now().After(l.Deadline()) {
		time.Sleep(time.Until(l.Deadline()) + time.Millisecond) // the state past the deadline is the point
	}
	endedWith(t, "the deadline", l.Done(), l.Err, redlock.ErrLockLost)
}

func TestMaxExtensionsLetsTheLockExpire(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	var extensions atomic.Int32
	c2, err := redlock.New(cl.Clients(), redlock.Options{TTL: time.Second, RestartGrace: redlock.NoRestartGrace,
		Observer: observe.Func(func(e observe.Event) {
			if e.Kind == observe.Extended {
				extensions.Add(1)
			}
		})})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	l, err := c2.Acquire(context.Background(), "bounded", redlock.WithMaxExtensions(2))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done never closed after the last extension")
	}
	if !errors.Is(l.Err(), redlock.ErrLockLost) || extensions.Load() != 2 {
		t.Fatalf("err %v after %d extensions; want ErrLockLost after 2", l.Err(), extensions.Load())
	}
}

func TestCancelledAcquireLeavesNoKeyOnRealNodes(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: time.Minute, NodeTimeout: 20 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	c.Nodes(ctx) // probe now, so the paused nodes are not probed mid-acquire
	for _, s := range cl.Servers[:2] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "cancelled")
		done <- err
	}()
	// The one running node takes the key; the paused two cannot answer.
	running := cl.Servers[2].Client()
	eventually(t, 10*time.Second, "the running node holds the key", func() bool {
		return running.Exists(ctx, c.Keys("cancelled").Lock).Val() == 1
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	for _, s := range cl.Servers[:2] {
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Close() // waits for the late answers and their cleanup
	if left := keysLeft(t, cl, c, "cancelled"); len(left) > 0 {
		t.Fatalf("keys left on %v after a cancelled acquire", left)
	}
}

func TestWaiterIsWokenByTheRelease(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	// Retries so slow that only the release notification can hand over
	// the lock before the test's deadline.
	failed := make(chan struct{}, 100)
	slow := redlock.Options{TTL: time.Minute, RetryDelayMin: time.Minute, RetryDelayMax: time.Minute,
		Observer: observe.Func(func(e observe.Event) {
			if e.Kind == observe.AcquireFailed {
				failed <- struct{}{}
			}
		})}
	holder := newClient(t, cl, slow)
	for _, tc := range []struct {
		name   string
		waiter *redlock.Client
	}{
		{"same client", holder},
		{"other client", newClient(t, cl, slow)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			l, err := holder.TryAcquire(ctx, "handoff")
			if err != nil {
				t.Fatal(err)
			}
			got := acquireReleaseAsync(ctx, tc.waiter, "handoff")
			select { // the waiter's first attempt failed: it waits now
			case <-failed:
			case <-ctx.Done():
				t.Fatal("the waiter never tried")
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("waiter: %v (not woken by the release?)", err)
			}
		})
	}
}

func TestLockErrors(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("bad names and TTLs", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			opts []redlock.LockOption
			want string
		}{
			{"", nil, "lock name"},
			{strings.Repeat("x", redlock.MaxNameLen+1), nil, "longer than"},
			{"ok", []redlock.LockOption{redlock.WithTTL(0)}, "TTL"},
			{"ok", []redlock.LockOption{redlock.WithTTL(-time.Second)}, "TTL"},
			{"ok", []redlock.LockOption{redlock.WithTTL(2 * time.Millisecond)}, "TTL 2ms: is below the minimum TTL of 100ms: the drift"},
			{"ok", []redlock.LockOption{redlock.WithTTL(10 * time.Millisecond)}, "TTL 10ms: is below the minimum TTL of 100ms: the drift"},
			{"ok", []redlock.LockOption{redlock.WithTTL(100 * time.Millisecond), redlock.WithTTL(redlock.MinTTL - 1)}, "TTL 99.999999ms: is below the minimum TTL"},
			{"ok", []redlock.LockOption{redlock.WithMaxWait(-1)}, "MaxWait"},
			// An empty hash tag would put the lock's keys in different
			// slots (and, with Options.Lanes, on different lanes).
			{"}r4", nil, `lock name "}r4": must not start with "}"`},
		} {
			_, err := c.TryAcquire(ctx, tc.name, tc.opts...)
			var ce *redlock.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, redlock.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("name %.10q: got %v, want a ConfigError about %q", tc.name, err, tc.want)
			}
		}
	})

	t.Run("bad client options", func(t *testing.T) {
		for _, tc := range []struct {
			opts redlock.Options
			want string
		}{
			{redlock.Options{TTL: -time.Second}, "TTL"},
			{redlock.Options{TTL: time.Second, NodeTimeout: time.Second}, "NodeTimeout"},
			{redlock.Options{DriftFactor: 1.5}, "DriftFactor"},
			{redlock.Options{RetryDelayMin: time.Second, RetryDelayMax: time.Millisecond}, "RetryDelayMax"},
			{redlock.Options{RestartGrace: -2}, "RestartGrace"},
			{redlock.Options{TTL: 5 * time.Millisecond}, "TTL 5ms: is below the minimum TTL of 100ms"},
			{redlock.Options{TTL: redlock.MinTTL, DriftFactor: 0.99}, "leaves no validity: the drift allowance alone is 101ms"},
			{redlock.Options{TTL: time.Second, NodeTimeout: 500 * time.Microsecond}, "NodeTimeout 500µs"},
			{redlock.Options{KeyPrefix: "svc{}:"}, `KeyPrefix "svc{}:": gives every lock's keys an empty hash tag`},
		} {
			_, err := redlock.New(cl.Clients(), tc.opts)
			if !errors.Is(err, redlock.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%+v: got %v, want an error about %s", tc.opts, err, tc.want)
			}
		}
		if _, err := redlock.New(nil, redlock.Options{}); !errors.Is(err, redlock.ErrInvalidConfig) {
			t.Errorf("zero nodes: got %v", err)
		}
		twice := []redis.UniversalClient{cl.Clients()[0], cl.Clients()[1], cl.Clients()[0]}
		if _, err := redlock.New(twice, redlock.Options{}); !errors.Is(err, redlock.ErrNotIndependent) {
			t.Errorf("the same node twice: got %v", err)
		}
		// Each lane, the renewals and a probe hold a connection at once:
		// a pool smaller than that would leave calls waiting for
		// PoolTimeout, so New names the pool instead.
		var small []redis.UniversalClient
		for _, s := range cl.Servers {
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 3})
			defer rdb.Close()
			small = append(small, rdb)
		}
		want := fmt.Sprintf("PoolSize of node %s 3: is below 4", cl.Servers[0].Addr)
		if _, err := redlock.New(small, redlock.Options{Lanes: 2}); !errors.Is(err, redlock.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("a pool of 3 with 2 lanes: got %v, want an error about %s", err, want)
		}
		if _, err := redlock.New(cl.Clients(), redlock.Options{Lanes: 17}); !errors.Is(err, redlock.ErrInvalidConfig) || !strings.Contains(err.Error(), "Lanes 17") {
			t.Errorf("17 lanes: got %v, want an error about Lanes 17", err)
		}
		one, err := redlock.New(small, redlock.Options{})
		if err != nil {
			t.Fatalf("a pool of 3 with one lane: %v", err)
		}
		_ = one.Close()
	})

	t.Run("release twice", func(t *testing.T) {
		l, err := c.TryAcquire(ctx, "twice")
		if err != nil {
			t.Fatal(err)
		}
		releaseTwice(t, ctx, l)
		if err := l.Extend(ctx); !errors.Is(err, redlock.ErrNotHeld) {
			t.Fatalf("extend after release: %v, want ErrNotHeld", err)
		}
	})

	t.Run("extend after expiry", func(t *testing.T) {
		l, err := c.Acquire(ctx, "expired", redlock.WithTTL(redlock.MinTTL)) // 10ms per node: retry if the machine is busy
		if err != nil {
			t.Fatal(err)
		}
		<-l.Done() // closes when the validity ends
		if err := l.Extend(ctx); !errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("extend after expiry: %v, want ErrLockLost", err)
		}
		if err := l.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("release after expiry: %v, want ErrLockLost", err)
		}
	})

	t.Run("held", func(t *testing.T) {
		l, err := c.TryAcquire(ctx, "held")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		_, err = c.TryAcquire(ctx, "held")
		var le *redlock.LockedError
		if !errors.As(err, &le) || le.Remaining <= 0 || le.Remaining > time.Second {
			t.Fatalf("got %v, want a *LockedError with the holder's remaining time", err)
		}
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err = c.Acquire(wctx, "held")
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, redlock.ErrLocked) {
			t.Fatalf("waiting out the context: %v, want DeadlineExceeded and ErrLocked", err)
		}
		_, err = c.Acquire(ctx, "held", redlock.WithMaxWait(100*time.Millisecond))
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, redlock.ErrLocked) {
			t.Fatalf("MaxWait: %v, want DeadlineExceeded and ErrLocked", err)
		}
	})

	t.Run("unreachable node", func(t *testing.T) {
		clients := append(cl.Clients()[:2:2], redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
		c2 := newClientOn(t, clients, redlock.Options{RestartGrace: redlock.NoRestartGrace})
		l, err := c2.TryAcquire(ctx, "unreachable")
		if err != nil {
			t.Fatalf("one of three unreachable: %v", err)
		}
		_ = l.Release(ctx)
		if info := c2.Nodes(ctx)[2]; info.Err == nil || info.Voting {
			t.Fatalf("unreachable node reported as %+v", info)
		}
	})
}

// New probes the nodes and refuses a set that is not independent masters,
// naming the node to remove: the second address of one server, the replica
// (not the master it follows, which its replica makes a master with
// replicas). A node that becomes a replica after New is refused by the
// acquire, again naming the replica.
func TestReplicaAndDuplicateServerAreRefused(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	ctx := context.Background()

	dupeAddr := strings.Replace(cl.Servers[0].Addr, "127.0.0.1", "localhost", 1)
	dupe := redis.NewClient(&redis.Options{Addr: dupeAddr})
	defer dupe.Close()
	_, err := redlock.New([]redis.UniversalClient{cl.Clients()[0], cl.Clients()[1], dupe}, redlock.Options{RestartGrace: redlock.NoRestartGrace})
	var ce *redlock.ConfigError
	if !errors.Is(err, redlock.ErrNotIndependent) || !errors.As(err, &ce) || !strings.Contains(err.Error(), "same server") ||
		(ce.Value != dupeAddr && ce.Value != cl.Servers[0].Addr) {
		t.Fatalf("New on one server under two addresses: %v, want ErrNotIndependent naming %s or %s", err, dupeAddr, cl.Servers[0].Addr)
	}

	later := newClient(t, cl, redlock.Options{})
	replica := cl.Servers[2].Client()
	if err := replica.ReplicaOf(ctx, "127.0.0.1", fmt.Sprint(cl.Servers[0].Port)).Err(); err != nil {
		t.Fatal(err)
	}
	defer replica.ReplicaOf(ctx, "NO", "ONE")
	master := cl.Servers[0].Addr
	eventually(t, 5*time.Second, "the master to see its replica", func() bool {
		info, _ := cl.Servers[0].Client().Info(ctx, "replication").Result()
		return strings.Contains(info, "connected_slaves:1")
	})
	// Without AllowFailoverNodes the master is refused too, for its
	// replica: the replica is still the one named.
	for _, opts := range []redlock.Options{{RestartGrace: redlock.NoRestartGrace}, {RestartGrace: redlock.NoRestartGrace, AllowFailoverNodes: true}} {
		_, err = redlock.New(cl.Clients(), opts)
		if !errors.Is(err, redlock.ErrNotIndependent) || !errors.As(err, &ce) || ce.Value != cl.Servers[2].Addr ||
			!strings.Contains(err.Error(), "not a master") || !strings.Contains(err.Error(), "of "+master) {
			t.Fatalf("New with %s a replica of %s (AllowFailoverNodes %v): %v, want ErrNotIndependent naming the replica and its master",
				cl.Servers[2].Addr, master, opts.AllowFailoverNodes, err)
		}
	}
	if err := later.Verify(ctx); !errors.Is(err, redlock.ErrNotIndependent) || !strings.Contains(err.Error(), cl.Servers[2].Addr+": ") && !strings.Contains(err.Error(), cl.Servers[2].Addr+" is a") {
		t.Fatalf("Verify with a replica among the nodes: %v, want ErrNotIndependent naming %s", err, cl.Servers[2].Addr)
	}
	if _, err := later.TryAcquire(ctx, "replica"); !errors.Is(err, redlock.ErrNotIndependent) || !strings.Contains(err.Error(), cl.Servers[2].Addr) {
		t.Fatalf("acquire with a replica: %v, want ErrNotIndependent naming %s", err, cl.Servers[2].Addr)
	}
}

// Fewer than 3 nodes leave no fault tolerance: New asks for the opt-in the
// semaphore asked for, naming the number of nodes.
func TestFewerThanThreeNodesNeedTheOptIn(t *testing.T) {
	cl := redistest.StartT(t, 2, redistest.Options{})
	for _, clients := range [][]redis.UniversalClient{cl.Clients()[:1], cl.Clients()} {
		_, err := redlock.New(clients, redlock.Options{RestartGrace: redlock.NoRestartGrace})
		var ce *redlock.ConfigError
		if !errors.As(err, &ce) || ce.Field != "number of nodes" || !strings.Contains(err.Error(), "AllowNoFaultTolerance") {
			t.Fatalf("New on %d nodes: %v, want a ConfigError on the number of nodes naming AllowNoFaultTolerance", len(clients), err)
		}
		c, err := redlock.New(clients, redlock.Options{RestartGrace: redlock.NoRestartGrace, AllowNoFaultTolerance: true})
		if err != nil {
			t.Fatalf("New on %d nodes with the opt-in: %v", len(clients), err)
		}
		if _, err := c.Semaphore("s", 2); err != nil {
			t.Fatalf("a semaphore of that client: %v", err)
		}
		_ = c.Close()
	}
}

// Verify fails while too few nodes can vote: fresh nodes that sit out the
// restart grace, with the time it lasts.
func TestVerifyFailsWhileNodesSitOutTheGrace(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{RestartGrace: time.Minute})
	err := c.Verify(context.Background())
	if !errors.Is(err, redlock.ErrNoQuorum) || !errors.Is(err, redlock.ErrNodeSittingOut) || !strings.Contains(err.Error(), "restart grace") {
		t.Fatalf("Verify on nodes that sit out a grace of a minute: %v, want ErrNoQuorum and ErrNodeSittingOut", err)
	}
	if err := newClient(t, cl, redlock.Options{}).Verify(context.Background()); err != nil {
		t.Fatalf("Verify with the guard off: %v", err)
	}
}

func TestClockJumpSendsTheNodeToSitOut(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{FakeTime: true})
	c := newClient(t, cl, redlock.Options{TTL: 5 * time.Second}) // the node sits out for one TTL
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "clock")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	if err := cl.Servers[0].SetClockOffset(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Another name: a straggling call of the first lock may still set its
	// key on a node for a moment before the release it owes deletes it,
	// and this test is about the clock, not about that race.
	l, err = c.TryAcquire(ctx, "clock-after-the-jump")
	if err != nil {
		t.Fatalf("two of three nodes still vote: %v", err)
	}
	_ = l.Release(ctx)
	info := c.Nodes(ctx)[0]
	if info.Voting || !strings.Contains(info.SitOutReason, "clock jumped") {
		t.Fatalf("node 0 after a 20s jump: voting %v, reason %q", info.Voting, info.SitOutReason)
	}
	if info.ClockOffset < 19*time.Second {
		t.Fatalf("clock offset %v, want about 20s", info.ClockOffset)
	}
}

// With one of five nodes down, four nodes answer and two contenders can
// split them 2-2: neither wins, and each waits for the dead node's answer to
// know it. Contenders that retried in lockstep (all woken by the losers'
// cleanups) made no progress for seconds. The node dies mid-run, under
// clients with go-redis' default settings, as in production.
func TestContentionWithAnEvenNumberOfLiveNodesMakesProgress(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const clients, rounds = 4, 60
	var (
		wg     sync.WaitGroup
		inside atomic.Int32
		done   atomic.Int32
		killed sync.Once
	)
	errs := make(chan error, clients+1)
	for range clients {
		c, err := redlock.NewFromURLs(cl.URLs(), redlock.Options{TTL: 2 * time.Second, RestartGrace: redlock.NoRestartGrace})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := c.Acquire(ctx, "even")
				if err != nil {
					errs <- err
					return
				}
				if inside.Add(1) != 1 {
					errs <- errors.New("two holders at once")
				}
				// Some work under the lock, so that the others are all
				// asleep on the release notification when it comes.
				work := time.NewTimer(2 * time.Millisecond)
				<-work.C
				inside.Add(-1)
				if err := l.Release(ctx); err != nil && !errors.Is(err, redlock.ErrNoQuorum) {
					errs <- err
					return
				}
				if done.Add(1) == clients*rounds/4 {
					killed.Do(func() {
						if err := cl.Servers[0].Kill(); err != nil {
							errs <- err
						}
					})
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
