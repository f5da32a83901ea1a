package redlock_test

// Wake-ups: a waiting Acquire listens to its own lock's release channel, on
// one pub/sub connection per node, only while it waits (and a short linger).

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
	"github.com/quorumlabs/redlock/redistest"
)

// slowRetries makes retries so slow (2.5-5s) that only the release's
// wake-up can explain an acquire within a second of the release. The TTL is
// long enough that no refusal hints at an earlier retry.
func slowRetries() redlock.Options {
	return redlock.Options{TTL: time.Minute, RetryDelayMin: 5 * time.Second, RetryDelayMax: 5 * time.Second}
}

// failures reports the failed attempts of a client through its observer.
func failures(opts redlock.Options) (redlock.Options, <-chan string) {
	failed := make(chan string, 1000)
	opts.Observer = observe.Func(func(e observe.Event) {
		if e.Kind == observe.AcquireFailed {
			failed <- e.Name
		}
	})
	return opts, failed
}

// awaitWaiting returns once name's waiter failed twice: its first attempt,
// and the one it makes right after its subscription was confirmed (or the
// confirmation timed out: the callers make that timeout far too long to
// explain what they see).
func awaitWaiting(t *testing.T, ctx context.Context, failed <-chan string, name string) {
	t.Helper()
	for n := 0; n < 2; {
		select {
		case got := <-failed:
			if got == name {
				n++
			}
		case <-ctx.Done():
			t.Fatalf("the waiter for %q never tried twice", name)
		}
	}
}

// subscriptions lists, per node, the channels under the default key prefix
// that anyone is subscribed to, sorted.
func subscriptions(t *testing.T, cl *redistest.Cluster) [][]string {
	t.Helper()
	var out [][]string
	for _, s := range cl.Servers {
		chs, err := s.Client().PubSubChannels(context.Background(), redlock.DefaultKeyPrefix+"*").Result()
		if err != nil {
			t.Fatalf("%s: PUBSUB CHANNELS: %v", s.Addr, err)
		}
		slices.Sort(chs)
		out = append(out, chs)
	}
	return out
}

// noSubscriptions tells whether no node has a subscriber under the prefix.
func noSubscriptions(t *testing.T, cl *redistest.Cluster) bool {
	for _, chs := range subscriptions(t, cl) {
		if len(chs) > 0 {
			return false
		}
	}
	return true
}

// pubsubConns counts each node's pub/sub connections.
func pubsubConns(t *testing.T, cl *redistest.Cluster) []int {
	t.Helper()
	var out []int
	for _, s := range cl.Servers {
		list, err := s.Client().ClientList(context.Background()).Result()
		if err != nil {
			t.Fatalf("%s: CLIENT LIST: %v", s.Addr, err)
		}
		n := 0
		for line := range strings.Lines(list) {
			if strings.Contains(line, " flags=P ") {
				n++
			}
		}
		out = append(out, n)
	}
	return out
}

func TestWaiterListensToItsOwnLockOnlyWhileWaiting(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	holder := newClient(t, cl, slowRetries())
	wopts, failed := failures(slowRetries())
	waiter := newClient(t, cl, wopts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	held := map[string]*redlock.Lock{}
	got := make(chan error, 2)
	for _, name := range []string{"a", "b"} {
		l, err := holder.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		held[name] = l
		go func() {
			l2, err := waiter.Acquire(ctx, name)
			if err == nil {
				err = l2.Release(ctx)
			}
			got <- err
		}()
		awaitWaiting(t, ctx, failed, name)
	}

	// Both locks' channels, on one pub/sub connection per node, and nothing
	// else: the releases of another lock reach no client. (The waiter went
	// on once a quorum confirmed; the last node may still be on its way.)
	want := []string{"redlock:{a}:released", "redlock:{b}:released"}
	eventually(t, 5*time.Second, "every node subscribed to a and b, on one connection", func() bool {
		for _, chs := range subscriptions(t, cl) {
			if !slices.Equal(chs, want) {
				return false
			}
		}
		return slices.Equal(pubsubConns(t, cl), []int{1, 1, 1})
	})
	for range 10 {
		l, err := holder.TryAcquire(ctx, "other")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// The release of a wakes its waiter at once, long before a retry.
	start := time.Now()
	if err := held["a"].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter of a: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the waiter of a took the lock %v after its release: not woken by it", took)
	}

	// Nobody waits for a any more: its subscription ends after the linger;
	// b's stays while its waiter waits.
	eventually(t, 10*time.Second, "the subscription to a ends after the linger", func() bool {
		for _, chs := range subscriptions(t, cl) {
			if !slices.Equal(chs, want[1:]) {
				return false
			}
		}
		return true
	})
	if err := held["b"].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter of b: %v", err)
	}
	eventually(t, 10*time.Second, "no subscription left after the linger", func() bool { return noSubscriptions(t, cl) })
}

// TestNoReleaseIsMissedAfterTheSubscriptionIsConfirmed releases the lock as
// soon as the waiter's attempt after its confirmation failed, hundreds of
// times. Each time the waiter is a new client, whose first wait must also
// dial its pub/sub connections: a waiter that went on before the nodes
// applied its SUBSCRIBE would miss the release and sleep for seconds.
func TestNoReleaseIsMissedAfterTheSubscriptionIsConfirmed(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	opts := slowRetries()
	opts.RestartGrace = redlock.NoRestartGrace // the nodes just started
	// A confirmation that never comes would hold the waiter this long: the
	// test would time out rather than pass by luck.
	opts.NodeTimeout = 20 * time.Second
	// A missed release leaves the waiter asleep for a minute, far past the
	// 30s each hand-off is given: a loaded machine that takes seconds to
	// run the woken waiter is not taken for a miss.
	opts.RetryDelayMin, opts.RetryDelayMax = time.Minute, time.Minute
	holder := newClient(t, cl, opts)
	wopts, failed := failures(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := range 300 {
		// A client of its own, with go-redis clients of its own: New adds
		// a hook to the clients it is given, and shared ones would pile up
		// hundreds.
		waiter, err := redlock.NewFromURLs(cl.URLs(), wopts)
		if err != nil {
			t.Fatal(err)
		}
		handOff(t, ctx, holder, waiter, failed, fmt.Sprintf("handoff-%d", i), 30*time.Second, nil)
		if err := waiter.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestForceUnlockWakesTheWaiter(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	holder := newClient(t, cl, slowRetries())
	wopts, failed := failures(slowRetries())
	waiter := newClient(t, cl, wopts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := holder.TryAcquire(ctx, "stuck"); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "stuck")
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	awaitWaiting(t, ctx, failed, "stuck")
	start := time.Now()
	if _, err := holder.ForceUnlock(ctx, "stuck"); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the waiter took the lock %v after ForceUnlock: not woken by it", took)
	}
}

func TestCloseLeavesNoSubscription(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	holder := newClient(t, cl, slowRetries())
	wopts, failed := failures(slowRetries())
	waiter := newClient(t, cl, wopts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := holder.TryAcquire(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	waitCtx, stopWaiting := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(waitCtx, "c")
		got <- err
	}()
	awaitWaiting(t, ctx, failed, "c")
	eventually(t, 5*time.Second, "every node subscribed to c", func() bool {
		for _, chs := range subscriptions(t, cl) {
			if !slices.Equal(chs, []string{"redlock:{c}:released"}) {
				return false
			}
		}
		return true
	})
	// The Acquire still waits, so only Close can end the subscription.
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "no subscription and no pub/sub connection left after Close", func() bool {
		return noSubscriptions(t, cl) && slices.Equal(pubsubConns(t, cl), []int{0, 0, 0})
	})
	stopWaiting()
	if err := <-got; err == nil {
		t.Fatal("the waiter acquired a lock that is still held")
	}
}

// TestWaiterIsWokenAfterItsPubSubConnectionBroke kills the waiter's pub/sub
// connections while it waits: go-redis makes new ones and subscribes them
// again, and the release still wakes the waiter.
func TestWaiterIsWokenAfterItsPubSubConnectionBroke(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	holder := newClient(t, cl, slowRetries())
	wopts, failed := failures(slowRetries())
	waiter := newClient(t, cl, wopts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := holder.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l2, err := waiter.Acquire(ctx, "k")
		if err == nil {
			err = l2.Release(ctx)
		}
		got <- err
	}()
	awaitWaiting(t, ctx, failed, "k")
	want := []string{"redlock:{k}:released"}
	subscribed := func() bool {
		for _, chs := range subscriptions(t, cl) {
			if !slices.Equal(chs, want) {
				return false
			}
		}
		return true
	}
	eventually(t, 5*time.Second, "every node subscribed to k", subscribed)
	for _, s := range cl.Servers {
		if n, err := s.Client().ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n != 1 {
			t.Fatalf("%s: CLIENT KILL TYPE pubsub: %d killed, %v", s.Addr, n, err)
		}
	}
	eventually(t, 5*time.Second, "every node subscribed to k again", subscribed)
	start := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the waiter took the lock %v after the release: not woken by it", took)
	}
}
