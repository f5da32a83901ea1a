package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/redistest"
)

// writeCounter counts the writes of EVAL calls go-redis makes: single
// commands and pipelines, with their commands.
type writeCounter struct {
	mu           sync.Mutex
	writes, cmds int
}

func (w *writeCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *writeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "eval" {
			return next(ctx, cmd) // a connection's handshake, a test's own read
		}
		w.mu.Lock()
		w.writes++
		w.cmds++
		w.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (w *writeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		w.mu.Lock()
		w.writes++
		w.cmds += len(cmds)
		w.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (w *writeCounter) counts() (writes, cmds int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes, w.cmds
}

// pushCmd appends v to the list key: the list shows the order in which the
// node ran the calls.
func pushCmd(ctx context.Context, key, v string) *redis.IntSliceCmd {
	return redis.NewIntSliceCmd(ctx, "eval", "return {redis.call('RPUSH', KEYS[1], ARGV[1])}", 1, key, v)
}

// stalledPipe starts one node and a pipe to it, and returns them with the
// node paused under a first call in flight: whatever is queued next waits.
func stalledPipe(t *testing.T) (*redistest.Server, *pipe, *writeCounter, chan error) {
	t.Helper()
	cl := redistest.StartT(t, 1, redistest.Options{})
	s := cl.Servers[0]
	rdb := s.Client()
	if err := rdb.Ping(context.Background()).Err(); err != nil { // dial before counting
		t.Fatal(err)
	}
	wc := &writeCounter{}
	rdb.AddHook(wc)
	p := &pipe{rdb: rdb}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Resume() })
	first := make(chan error, 1)
	go func() {
		cmd := pushCmd(context.Background(), "order", "first")
		_ = p.do(context.Background(), cmd)
		first <- cmd.Err()
	}()
	waitFor(t, "the first call in flight", func() bool { return p.writtenAt.Load() != 0 })
	return s, p, wc, first
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (p *pipe) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// Calls that arrive while a write is in flight go out together, in the
// order they were queued.
func TestPipeCoalescesQueuedCallsInOrder(t *testing.T) {
	s, p, wc, first := stalledPipe(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	cmds := make([]*redis.IntSliceCmd, 10)
	for i := range cmds {
		cmds[i] = pushCmd(ctx, "order", fmt.Sprint(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.do(ctx, cmds[i])
		}()
		waitFor(t, "the call queued", func() bool { return p.queued() == i+1 }) // one at a time: a known order
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, cmd := range cmds {
		if cmd.Err() != nil {
			t.Fatalf("call %d: %v", i, cmd.Err())
		}
	}
	if writes, n := wc.counts(); writes != 2 || n != 11 {
		t.Fatalf("%d writes carried %d calls, want the first alone and then one write of the 10 queued", writes, n)
	}
	got, err := s.Client().LRange(ctx, "order", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"first", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the node ran %v, want %v", got, want)
	}
}

// A call that waits in the queue past its timeout is never written, says
// so, and leaves the node untouched.
func TestPipeCallThatTimesOutQueuedIsNotSent(t *testing.T) {
	s, p, wc, first := stalledPipe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := p.do(ctx, pushCmd(ctx, "order", "late"))
	if !errors.Is(err, errNotSent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want not sent", err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pipe idle", func() bool { return !p.isBusy() })
	if writes, _ := wc.counts(); writes != 1 {
		t.Fatalf("%d writes, want the first call's alone", writes)
	}
	if got, _ := s.Client().LRange(context.Background(), "order", 0, -1).Result(); len(got) != 1 {
		t.Fatalf("the node ran %v, want only the first call", got)
	}
	// Not the node's fault: the client does not mark it down.
	c := &Client{clock: systemClock{}}
	ps := newNodePipes(p.rdb, 1)
	ps.acquire[0] = p
	n := &node{pipes: ps}
	c.failed(n, err, 100*time.Millisecond)
	if n.downUntil.Load() != 0 {
		t.Fatal("a call that waited in our own queue marked the node down")
	}
}
