package redlock_test

// A reader's Token against real servers (issue 17, item 1). The promise is
// two-sided: a reader's token is at least the token of every writer whose
// lock ended before the reader's began, and below the token of every writer
// whose lock began after the reader's ended.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// fenceOn reads the fence register of name on s: 0 when absent.
func fenceOn(t *testing.T, c *redlock.Client, s *redistest.Server, name string) int64 {
	t.Helper()
	v, err := s.Client().Get(context.Background(), c.Keys(name).Fence).Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	if err != nil {
		t.Fatalf("%s: %v", s.Addr, err)
	}
	return v
}

// allVote waits until c counts every node's vote.
func allVote(t *testing.T, c *redlock.Client, what string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 15*time.Second, what, func() bool {
		for _, n := range c.Nodes(ctx) {
			if !n.Voting {
				return false
			}
		}
		return true
	})
}

// takenAndReleased takes a lock with take and releases it: an ended lock,
// for its token.
func takenAndReleased(t *testing.T, ctx context.Context, take func(context.Context, ...redlock.LockOption) (*redlock.Lock, error)) *redlock.Lock {
	t.Helper()
	l, err := take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return l
}

// writerAfter has a writer take the lock with take after the reader r's
// lock ended: its token must be above the reader's, the other side of the
// reader token's promise.
func writerAfter(t *testing.T, ctx context.Context, take func(context.Context, ...redlock.LockOption) (*redlock.Lock, error), r *redlock.Lock, opts ...redlock.LockOption) {
	t.Helper()
	w, err := take(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if w.Token() <= r.Token() {
		t.Fatalf("writer token %d after the reader's %d", w.Token(), r.Token())
	}
	_ = w.Release(ctx)
}

// readerBeside has a reader take rw while s is paused, so that it decides
// on the other nodes (waiting up to 10s), and resumes s.
func readerBeside(t *testing.T, ctx context.Context, rw *redlock.RWLock, s *redistest.Server) *redlock.Lock {
	t.Helper()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	r, err := rw.RLock(ctx, redlock.WithMaxWait(10*time.Second))
	if rerr := s.Resume(); rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The schedule reproduced on main: the writer's register survives only on
// a node whose answers come late, and the reader decides on two nodes that
// never saw it (one was cut off, one restarted empty and sat out its grace).
// The register does not survive through the grace: the reader's own
// time-based proposal has to carry its token above the writer's.
func TestRWReaderTokenAfterAWriterWhoseRegisterOnlyALateNodeKept(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c, err := redlock.New(cl.Clients(), redlock.Options{TTL: time.Second}) // the restart grace on, as by default
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	rw := c.RWLock("late")
	allVote(t, c, "fresh nodes vote after the grace")

	// 1. Node 0 is cut off; a writer takes nodes 1 and 2 and releases.
	if err := cl.Servers[0].Kill(); err != nil {
		t.Fatal(err)
	}
	writer := takenAndReleased(t, ctx, rw.TryLock).Token()
	// 2. Node 0 is back; node 1 restarts empty.
	for _, s := range cl.Servers[:2] {
		if err := s.Restart(false); err != nil {
			t.Fatal(err)
		}
	}
	if f := fenceOn(t, c, cl.Servers[0], "late") + fenceOn(t, c, cl.Servers[1], "late"); f != 0 {
		t.Fatalf("nodes 0 and 1 hold a fence register (%d): the schedule needs them without", f)
	}
	// 3. After their grace, the reader decides on nodes 0 and 1: node 2,
	// the only one that kept the writer's register, answers late.
	allVote(t, c, "the restarted nodes vote after the grace")
	r := readerBeside(t, ctx, rw, cl.Servers[2])
	if r.Token() < writer {
		t.Fatalf("reader token %d below the token %d of the writer whose lock ended before the reader's began", r.Token(), writer)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// And the other side: a writer after the reader gets a higher token.
	// It waits: node 2's late answers may have put it in its down hold-off.
	writerAfter(t, ctx, rw.Lock, r, redlock.WithMaxWait(10*time.Second))
}

// A name with only readers for longer than FenceLifetime: the register
// expired on every node, and a reader still gets a token at least the last
// writer's, and puts the register back for the writers after it.
func TestRWReaderTokenAcrossAnExpiredFenceRegister(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{FakeTime: true})
	// The nodes' clocks are moved past the register's lifetime: the
	// clock guard would (rightly) make them sit out.
	opts := redlock.Options{TTL: 10 * time.Second, FenceLifetime: time.Hour, ClockJumpThreshold: redlock.NoClockGuard}
	ctx := context.Background()
	before := newClient(t, cl, opts)
	writer := takenAndReleased(t, ctx, before.RWLock("readers-only").TryLock).Token()
	r, err := before.RWLock("readers-only").TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Close waits for every call still on its way to a node (a node that
	// answered after the decision): none may write the register after the
	// clocks moved.
	_ = before.Close()
	// Two hours pass on the nodes with no writer: the register is gone.
	for _, s := range cl.Servers {
		if err := s.SetClockOffset(2 * time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, cl, opts)
	rw := c.RWLock("readers-only")
	for _, s := range cl.Servers {
		if n := s.Client().Exists(ctx, c.Keys("readers-only").Fence).Val(); n != 0 {
			t.Fatalf("%s: the fence register outlived its lifetime", s.Addr)
		}
	}
	r, err = rw.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Token() < writer {
		t.Fatalf("reader token %d below the token %d of the writer before it, across an expired fence register", r.Token(), writer)
	}
	held := 0
	for _, s := range cl.Servers {
		if fenceOn(t, c, s, "readers-only") >= r.Token() {
			held++
		}
	}
	if held < c.Quorum() {
		t.Fatalf("the reader's token %d is in the register on %d nodes, want a quorum", r.Token(), held)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	writerAfter(t, ctx, rw.TryLock, r)
}

// A register ahead of the reader's proposal on one node only (left by a
// failed attempt of a client whose clock runs ahead): the reader's quorum
// sees it, so the reader takes it as its token, and must write it on a
// quorum before it counts. Otherwise a writer after the reader, deciding on
// nodes that never saw that value, would get a lower token than the reader.
func TestRWReaderSlowPathRaisesTheRegisterAboveLaterWriters(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	ctx := context.Background()
	rw := c.RWLock("ahead")
	w := takenAndReleased(t, ctx, rw.TryLock)
	ahead := w.Token() + 1_000_000_000_000
	if err := cl.Servers[0].Client().Set(ctx, c.Keys("ahead").Fence, ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The reader decides on nodes 0 and 1.
	r := readerBeside(t, ctx, rw, cl.Servers[2])
	// One attempt takes the register's value. Under load the first attempt
	// can fail after it raised node 1's register (a call timed out): the
	// next one then proposes above the value it saw, ahead+1, on the fast
	// path. Either way the token is at least the value the quorum returned.
	if r.Token() != ahead && r.Token() != ahead+1 {
		t.Fatalf("reader token %d, want the register %d its quorum returned (or one above it, from a second attempt)", r.Token(), ahead)
	}
	if f := fenceOn(t, c, cl.Servers[1], "ahead"); f < ahead {
		t.Fatalf("node 1's register %d after the reader took %d", f, ahead)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A writer after the reader, deciding on nodes 1 and 2.
	if err := cl.Servers[0].Kill(); err != nil {
		t.Fatal(err)
	}
	// It waits: node 2's late answers may have put it in its down hold-off.
	writerAfter(t, ctx, rw.Lock, r, redlock.WithMaxWait(10*time.Second))
}

// A reader's extension that repairs a node which lost its data puts the
// reader's token back in that node's register, as the mutex's repair does:
// a writer after the reader that counts this node reads it there.
func TestRWReaderRepairRaisesTheRegister(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	ctx := context.Background()
	rw := c.RWLock("repair")
	w := takenAndReleased(t, ctx, rw.TryLock)
	r, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Token() < w.Token() {
		t.Fatalf("reader token %d below the writer's %d", r.Token(), w.Token())
	}
	if err := cl.Servers[0].Restart(false); err != nil {
		t.Fatal(err)
	}
	// The first call may fail on the connection the restart broke: extend
	// until the node is repaired, as the auto-extender would.
	rdb := cl.Servers[0].Client()
	readers := rwKeys(c, rw.Name())[1]
	eventually(t, 10*time.Second, "the restarted node holds the reader again", func() bool {
		if err := r.Extend(ctx); err != nil {
			t.Fatal(err)
		}
		return rdb.Exists(ctx, readers).Val() == 1
	})
	if f := fenceOn(t, c, cl.Servers[0], "repair"); f != r.Token() {
		t.Fatalf("the repaired node's register is %d, want the reader's token %d", f, r.Token())
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// In the common case a reader's token is its own proposal, the client's
// time in µs, above the last writer's token; the read-acquire script writes
// it into the register of every node that admits the reader.
func TestRWReaderTokenIsItsProposalAndRaisesTheRegister(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	writers := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	readers := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	ctx := context.Background()
	w := takenAndReleased(t, ctx, writers.RWLock("doc").TryLock)
	before := time.Now().UnixMicro()
	r, err := readers.RWLock("doc").TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixMicro()
	if r.Token() < before || r.Token() > after {
		t.Fatalf("reader token %d, want its proposal: the time in µs between %d and %d", r.Token(), before, after)
	}
	if r.Token() <= w.Token() {
		t.Fatalf("reader token %d, not above the writer's %d", r.Token(), w.Token())
	}
	// A second reader beside it has its own, later proposal.
	r2, err := writers.RWLock("doc").TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Token() <= r.Token() {
		t.Fatalf("second reader's token %d, want its own later proposal, above %d", r2.Token(), r.Token())
	}
	held := 0
	for _, s := range cl.Servers {
		if fenceOn(t, readers, s, "doc") == r2.Token() {
			held++
		}
	}
	if held < readers.Quorum() {
		t.Fatalf("the second reader's token %d is in the register on %d nodes, want a quorum", r2.Token(), held)
	}
	for _, l := range []*redlock.Lock{r, r2} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	writerAfter(t, ctx, writers.RWLock("doc").TryLock, r2) // the later reader's token is the higher
}

// With DisableFencing a reader has no token and neither its acquire nor
// its repair touches the register, whether one is there or not.
func TestRWReaderWithoutFencingHasNoTokenAndLeavesTheRegister(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	fenced := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second, DisableFencing: true})
	ctx := context.Background()
	takenAndReleased(t, ctx, fenced.RWLock("kept").TryLock)
	kept := make([]int64, len(cl.Servers))
	for i, s := range cl.Servers {
		kept[i] = fenceOn(t, c, s, "kept")
	}
	for _, name := range []string{"kept", "none"} {
		r, err := c.RWLock(name).TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Token() != 0 {
			t.Fatalf("%s: reader token %d without fencing, want 0", name, r.Token())
		}
		if err := cl.Servers[0].Restart(false); err != nil {
			t.Fatal(err)
		}
		kept[0] = 0 // the restart took it
		rdb := cl.Servers[0].Client()
		readers := rwKeys(c, name)[1]
		eventually(t, 10*time.Second, "the restarted node holds the reader again", func() bool {
			if err := r.Extend(ctx); err != nil {
				t.Fatal(err)
			}
			return rdb.Exists(ctx, readers).Val() == 1
		})
		for i, s := range cl.Servers {
			want := int64(0)
			if name == "kept" {
				want = kept[i]
			}
			if f := fenceOn(t, c, s, name); f != want {
				t.Fatalf("%s: node %d's register is %d after a reader without fencing, want %d", name, i, f, want)
			}
		}
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
