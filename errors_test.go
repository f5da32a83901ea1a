package redlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// Fresh nodes that sit out the restart grace for one reason give one entry
// naming them all, with the longest time left, not the same paragraph once
// per node; each node's own error is still there for errors.As.
func TestNodesThatShareACauseAreToldOnce(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	c := newClient(t, cl, redlock.Options{RestartGrace: time.Minute})
	_, err := c.TryAcquire(context.Background(), "job")
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || !errors.Is(err, redlock.ErrNodeSittingOut) {
		t.Fatalf("acquire on fresh nodes: %v, want a QuorumError of sit-outs", err)
	}
	msg := err.Error()
	t.Log(msg)
	if n := strings.Count(msg, "without persistence"); n != 1 {
		t.Errorf("the reason is told %d times, want once: %s", n, msg)
	}
	if !strings.Contains(msg, "5 nodes (") || !strings.Contains(msg, "sit out the 1m0s restart grace for up to") {
		t.Errorf("want the 5 nodes named together with the grace and the time left: %s", msg)
	}
	if len(msg) > 600 {
		t.Errorf("%d bytes for one cause: %s", len(msg), msg)
	}
	if qe.Errors == nil || len(qe.Errors.Errors) != 5 {
		t.Fatalf("want 5 node errors kept, got %v", qe.Errors)
	}
	for _, e := range qe.Errors.Errors {
		var ne *redlock.NodeError
		var ge *redlock.GraceError
		if !errors.As(e, &ne) || !errors.As(e, &ge) || ge.Left <= 0 || ge.Left > time.Minute || !strings.HasPrefix(e.Error(), ne.Node+": ") {
			t.Errorf("node error %v: want a NodeError that starts with the node's name and holds a GraceError", e)
		}
	}
}

// WithMaxWait running out says so; the caller's context had no deadline.
func TestMaxWaitSaysTheMaxWaitRanOut(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{})
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	_, err = c.Acquire(ctx, "busy", redlock.WithMaxWait(50*time.Millisecond))
	if !errors.Is(err, redlock.ErrMaxWait) || !errors.Is(err, redlock.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("max wait: %v, want ErrMaxWait, ErrLocked and DeadlineExceeded", err)
	}
	if strings.Contains(err.Error(), "context deadline exceeded") || !strings.Contains(err.Error(), "max wait of 50ms ran out") {
		t.Fatalf("max wait: %q, want it to say the max wait of 50ms ran out, not a context deadline", err)
	}
	// The caller's own deadline is told as such.
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err = c.Acquire(dctx, "busy"); errors.Is(err, redlock.ErrMaxWait) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("caller's deadline: %v, want DeadlineExceeded and not ErrMaxWait", err)
	}
}

// Every "not held" names the lock, after a release: an extend too, and a
// second release, for every primitive and handle (a semaphore's permit, a
// read-write lock's reader and writer, a fair lock, a nested handle of a
// reentrant lock, an auto-extended lock, a multi-lock).
func TestNotHeldNamesTheLock(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{})
	ctx := context.Background()
	type handle interface {
		Extend(context.Context) error
		Release(context.Context) error
		Err() error
	}
	take := map[string]func(name string) (handle, error){
		"mutex": func(name string) (handle, error) { return c.TryAcquire(ctx, name) },
		"auto-extended": func(name string) (handle, error) {
			return c.TryAcquire(ctx, name, redlock.WithAutoExtend())
		},
		"semaphore": func(name string) (handle, error) {
			s, err := c.Semaphore(name, 2)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire(ctx)
		},
		"reader":     func(name string) (handle, error) { return c.RWLock(name).TryRLock(ctx) },
		"writer":     func(name string) (handle, error) { return c.RWLock(name).TryLock(ctx) },
		"fair":       func(name string) (handle, error) { return c.TryAcquire(ctx, name, redlock.WithFairness()) },
		"multi-lock": func(name string) (handle, error) { return c.TryAcquireMulti(ctx, []string{name, name + "-b"}) },
		"nested": func(name string) (handle, error) {
			outer, err := c.TryAcquire(ctx, name)
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { _ = outer.Release(ctx) })
			return c.TryAcquire(redlock.ContextWithLock(ctx, outer), name)
		},
	}
	for kind, take := range take {
		name := "payout-" + kind
		l, err := take(name)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("%s: release: %v", kind, err)
		}
		for what, err := range map[string]error{"extend": l.Extend(ctx), "release": l.Release(ctx), "Err": l.Err()} {
			if !errors.Is(err, redlock.ErrNotHeld) || !strings.Contains(err.Error(), strconv.Quote(name)) {
				t.Errorf("%s: %s after release: %v, want ErrNotHeld naming the lock", kind, what, err)
			}
		}
	}
}

// The minimum TTL is one number, told by the error that refuses less, and
// a lock of that TTL is taken on localhost, every time, on a first contact
// too.
func TestTheMinimumTTLWorksOnLocalhost(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: redlock.MinTTL})
	ctx := context.Background()
	for i := range 20 {
		// Acquire, not TryAcquire: a busy machine may cost one attempt
		// its validity now and then; what must not happen is that none
		// ever succeeds.
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := c.Acquire(actx, "short")
		cancel()
		if err != nil {
			t.Fatalf("acquire %d with the minimum TTL %v: %v", i, redlock.MinTTL, err)
		}
		_ = l.Release(ctx)
	}
	_, err := c.TryAcquire(ctx, "short", redlock.WithTTL(redlock.MinTTL-time.Millisecond))
	var ce *redlock.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "99ms") || !strings.Contains(err.Error(), "minimum TTL of 100ms") {
		t.Fatalf("a TTL below the minimum: %v, want a ConfigError naming 99ms and the minimum", err)
	}
}

// A node address without a scheme gets the URL to write; a port that is not
// a number is named.
func TestNodeURLErrorsSayWhatToWrite(t *testing.T) {
	for raw, want := range map[string]string{
		"127.0.0.1:7601":                "has no scheme: write redis://127.0.0.1:7601",
		"localhost:6379":                "has no scheme: write redis://localhost:6379",
		"redis://127.0.0.1:76o1":        `has port "76o1": want a number from 1 to 65535`,
		"redis://u:s3cret@10.0.0.1:7x1": `has port "7x1"`,
	} {
		_, err := redlock.ParseNodeURL(raw)
		if !errors.Is(err, redlock.ErrInvalidConfig) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v, want %q (and no password)", redlock.RedactURL(raw), err, want)
		}
	}
}
