package redlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
	"github.com/quorumlabs/redlock/redistest"
)

// eventRecorder keeps the events of the kinds it is asked for.
type eventRecorder struct {
	mu     sync.Mutex
	kinds  []observe.Kind
	events []observe.Event
}

func (r *eventRecorder) Observe(e observe.Event) {
	for _, k := range r.kinds {
		if e.Kind == k {
			r.mu.Lock()
			r.events = append(r.events, e)
			r.mu.Unlock()
		}
	}
}

func (r *eventRecorder) got() []observe.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]observe.Event(nil), r.events...)
}

// Acquires that wait for fresh nodes' restart grace say so once, through
// the Logger and an event, with how long and why; not once per waiter or
// per attempt.
func TestWaitingForTheGraceIsToldOnce(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	rec := &eventRecorder{kinds: []observe.Kind{observe.GraceWait}}
	log := &recordingHandler{}
	c := newClient(t, cl, redlock.Options{TTL: time.Second, RestartGrace: 2 * time.Second, Observer: rec, Logger: slog.New(log)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, name)
			if err != nil {
				t.Errorf("acquire %s: %v", name, err)
				return
			}
			_ = l.Release(ctx)
		}()
	}
	wg.Wait()
	events := rec.got()
	if len(events) != 1 {
		t.Fatalf("want one observe.GraceWait for three waiters, got %d: %+v", len(events), events)
	}
	e := events[0]
	if e.Wait <= 0 || e.Wait > 2*time.Second || !errors.Is(e.Err, redlock.ErrNodeSittingOut) ||
		!strings.Contains(e.Err.Error(), "3 of 3 nodes sit out the 2s restart grace") || !strings.Contains(e.Err.Error(), "without persistence") {
		t.Fatalf("event %+v (err %v): want the wait (at most 2s) and why", e, e.Err)
	}
	told := 0
	for _, line := range log.lines() {
		if strings.Contains(line, "waiting for the restart grace") {
			told++
		}
	}
	if told != 1 {
		t.Fatalf("want one log line about the grace, got %d: %q", told, log.lines())
	}
}

// An Acquire with no deadline while every node is down is reported after a
// bounded time, then gives up with an error, rather than retry in silence.
func TestAcquireWithNoDeadlineGivesUpOnUnreachableNodes(t *testing.T) {
	urls := []string{"redis://" + refusedAddr(t), "redis://" + refusedAddr(t), "redis://" + refusedAddr(t)}
	rec := &eventRecorder{kinds: []observe.Kind{observe.Unreachable}}
	c := fromURLs(t, urls, redlock.Options{UnreachableTimeout: 3 * time.Second, Observer: rec})
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		err := c.Do(context.Background(), "job", func(context.Context, *redlock.Lock) error { return nil })
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Do with every node down is still waiting after 30s")
	}
	if !errors.Is(err, redlock.ErrNoQuorum) || !strings.Contains(err.Error(), "fewer than a quorum of nodes could vote") {
		t.Fatalf("after %v: %v, want ErrNoQuorum saying the nodes were unreachable", time.Since(start), err)
	}
	if events := rec.got(); len(events) != 1 || events[0].Elapsed < 2*time.Second {
		t.Fatalf("want one observe.Unreachable after 2s, got %+v", events)
	}
	// A call with a deadline of its own keeps it: no give-up before.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	if _, err := c.Acquire(ctx, "job"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with a deadline: %v, want the deadline", err)
	}
}

// Nodes that answer, but only with an error, cannot vote any more than
// nodes that are down: an Acquire with no deadline is told about them after
// a bounded time and gives up, naming the nodes' answer, rather than retry
// in silence for ever. Two causes a user meets: a wrong password (the
// servers asked for one after the client connected, and its connections
// were closed), and servers out of memory.
func TestAcquireWithNoDeadlineGivesUpOnNodesThatAnswerErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		user   string // in the client's URLs
		break_ func(ctx context.Context, s *redistest.Server) error
		answer string // what the nodes answer, as the error must show
	}{
		{"wrong password", "default:wrong@", func(ctx context.Context, s *redistest.Server) error {
			if err := s.Client().ConfigSet(ctx, "requirepass", "s3cret").Err(); err != nil {
				return err
			}
			// The client's connections were authenticated before: drop them.
			return s.Client().ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err()
		}, "WRONGPASS"},
		{"out of memory", "", func(ctx context.Context, s *redistest.Server) error {
			return s.Client().ConfigSet(ctx, "maxmemory", "1").Err()
		}, "OOM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := redistest.StartT(t, 3, redistest.Options{})
			var urls []string
			for _, a := range cl.Addrs() {
				urls = append(urls, "redis://"+tc.user+a)
			}
			rec := &eventRecorder{kinds: []observe.Kind{observe.Unreachable}}
			log := &recordingHandler{}
			c := fromURLs(t, urls, redlock.Options{UnreachableTimeout: 3 * time.Second, Observer: rec, Logger: slog.New(log)})
			ctx := context.Background()
			for _, s := range cl.Servers {
				if err := tc.break_(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() {
				done <- c.Do(ctx, "job", func(context.Context, *redlock.Lock) error { return nil })
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("Do against nodes that all answer %s is still waiting after 30s, in silence: %d observe.Unreachable, log %q",
					tc.answer, len(rec.got()), log.lines())
			}
			var rerr redis.Error
			if !errors.Is(err, redlock.ErrNoQuorum) || !strings.Contains(err.Error(), "could vote") ||
				!strings.Contains(err.Error(), tc.answer) || !errors.As(err, &rerr) {
				t.Fatalf("%v: want ErrNoQuorum saying too few nodes could vote, with the nodes' %s answer (a redis.Error)", err, tc.answer)
			}
			if events := rec.got(); len(events) != 1 || events[0].Elapsed < 2*time.Second || !strings.Contains(events[0].Err.Error(), tc.answer) {
				t.Fatalf("want one observe.Unreachable after 2s with the nodes' %s answer, got %+v", tc.answer, events)
			}
			told := 0
			for _, line := range log.lines() {
				if strings.Contains(line, "too few nodes can vote") {
					told++
				}
			}
			if told != 1 {
				t.Fatalf("want one log line saying too few nodes can vote, got %d: %q", told, log.lines())
			}
		})
	}
}

// A fair Acquire waits through the same wait as a plain one (issue 28):
// waiting for fresh nodes' restart grace is told once, through the Logger
// and an event, for fair waiters too.
func TestFairWaitingForTheGraceIsTold(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	rec := &eventRecorder{kinds: []observe.Kind{observe.GraceWait}}
	log := &recordingHandler{}
	c := newClient(t, cl, redlock.Options{TTL: time.Second, RestartGrace: 2 * time.Second, Observer: rec, Logger: slog.New(log)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(ctx, name, redlock.WithFairness())
			if err != nil {
				t.Errorf("fair acquire %s: %v", name, err)
				return
			}
			_ = l.Release(ctx)
		}()
	}
	wg.Wait()
	events := rec.got()
	if len(events) != 1 {
		t.Fatalf("want one observe.GraceWait for two fair waiters, got %d: %+v", len(events), events)
	}
	if e := events[0]; e.Wait <= 0 || e.Wait > 2*time.Second || !errors.Is(e.Err, redlock.ErrNodeSittingOut) ||
		!strings.Contains(e.Err.Error(), "3 of 3 nodes sit out the 2s restart grace") {
		t.Fatalf("event %+v (err %v): want the wait (at most 2s) and why", e, e.Err)
	}
	told := 0
	for _, line := range log.lines() {
		if strings.Contains(line, "waiting for the restart grace") {
			told++
		}
	}
	if told != 1 {
		t.Fatalf("want one log line about the grace, got %d: %q", told, log.lines())
	}
}

// A fair Acquire with no deadline while every node is down is reported
// after a bounded time, then gives up with an error matching ErrNoQuorum,
// as a plain one does (Options.UnreachableTimeout).
func TestFairAcquireWithNoDeadlineGivesUpOnUnreachableNodes(t *testing.T) {
	urls := []string{"redis://" + refusedAddr(t), "redis://" + refusedAddr(t), "redis://" + refusedAddr(t)}
	rec := &eventRecorder{kinds: []observe.Kind{observe.Unreachable}}
	c := fromURLs(t, urls, redlock.Options{TTL: time.Second, UnreachableTimeout: 3 * time.Second, Observer: rec})
	done := make(chan error, 1)
	go func() {
		done <- c.Do(context.Background(), "job", func(context.Context, *redlock.Lock) error { return nil }, redlock.WithFairness())
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a fair Do with every node down is still waiting after 20s (UnreachableTimeout is 3s)")
	}
	if !errors.Is(err, redlock.ErrNoQuorum) || !strings.Contains(err.Error(), "fewer than a quorum of nodes could vote") {
		t.Fatalf("%v, want ErrNoQuorum saying the nodes were unreachable", err)
	}
	if events := rec.got(); len(events) != 1 || events[0].Elapsed < 2*time.Second {
		t.Fatalf("want one observe.Unreachable after 2s, got %+v", events)
	}
}
