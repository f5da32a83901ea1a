package fence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/fence"
	"github.com/quorumlabs/redlock/redistest"
)

// newClient makes a lock client over the cluster's nodes, closed at the
// end of the test.
func newClient(t *testing.T, cl *redistest.Cluster, opts redlock.Options) *redlock.Client {
	t.Helper()
	// The nodes were just started and hold nothing another client relies
	// on: no restart grace.
	opts.RestartGrace = redlock.NoRestartGrace
	c, err := redlock.New(cl.Clients(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestFenceAdmitsOnlyTokensNotBelowTheHighest(t *testing.T) {
	var f fence.Guard
	for _, tc := range []struct {
		token int64
		ok    bool
	}{{5, true}, {5, true}, {7, true}, {6, false}, {0, false}, {8, true}} {
		err := f.Admit(tc.token)
		if (err == nil) != tc.ok {
			t.Fatalf("Admit(%d) = %v, want ok=%v", tc.token, err, tc.ok)
		}
		var se *fence.StaleTokenError
		if err != nil && (!errors.As(err, &se) || !errors.Is(err, fence.ErrStaleToken) || se.Highest != 7) {
			t.Fatalf("Admit(%d): %v, want a *StaleTokenError naming 7", tc.token, err)
		}
	}
	if f.Highest() != 8 {
		t.Fatalf("highest %d, want 8", f.Highest())
	}
}

// Admissions from many goroutines keep the order of the tokens: each
// admitted token is at least every one admitted before it, and a reader
// never sees the highest go down. (The admissions are recorded under the
// same lock as the call, so the record's order is the admissions' order:
// recorded after the call returned, two goroutines could append theirs in
// the other order, as a Valkey matrix run once showed: "admitted 59 after
// 60".)
func TestFenceUnderConcurrency(t *testing.T) {
	var f fence.Guard
	var wg sync.WaitGroup
	var mu sync.Mutex
	var admitted []int64
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			last := int64(0)
			for {
				select {
				case <-stop:
					return
				default:
				}
				h := f.Highest()
				if h < last {
					t.Errorf("Highest went down from %d to %d", last, h)
					return
				}
				last = h
			}
		}()
	}
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if f.Admit(int64(i)) == nil {
				admitted = append(admitted, int64(i))
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	if f.Highest() != 63 {
		t.Fatalf("highest %d, want 63", f.Highest())
	}
	for i := 1; i < len(admitted); i++ {
		if admitted[i] < admitted[i-1] {
			t.Fatalf("admitted %d after %d", admitted[i], admitted[i-1])
		}
	}
}

func TestFencedSetRejectsAStaleHolder(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 100 * time.Millisecond})
	resource := cl.Servers[0].Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A holder stalls past its validity (a GC pause, say); another client
	// takes the lock and writes; the first one wakes up and writes.
	stalled, err := c.Acquire(ctx, "account") // retries: a 100ms TTL leaves each node 10ms
	if err != nil {
		t.Fatal(err)
	}
	<-stalled.Done() // its validity is over
	next, err := c.Acquire(ctx, "account")
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Set(ctx, resource, "balance", next.Token(), "100"); err != nil {
		t.Fatal(err)
	}
	err = fence.Set(ctx, resource, "balance", stalled.Token(), "0")
	var se *fence.StaleTokenError
	if !errors.As(err, &se) || se.Token != stalled.Token() || se.Highest != next.Token() {
		t.Fatalf("stale write: %v, want a *StaleTokenError", err)
	}
	v, tok, err := fence.Get(ctx, resource, "balance")
	if err != nil || v != "100" || tok != next.Token() {
		t.Fatalf("resource holds %q with token %d (%v), want 100 with %d", v, tok, err, next.Token())
	}
	// The same holder may write again with its token.
	if err := fence.Set(ctx, resource, "balance", next.Token(), "101"); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := fence.Get(ctx, resource, "absent"); v != "" {
		t.Fatalf("absent resource reads %q", v)
	}
	if err := fence.Set(ctx, resource, "", 1, "x"); err == nil {
		t.Fatal("empty key: no error")
	}
	if err := fence.Set(ctx, resource, "balance", -1, "x"); err == nil {
		t.Fatal("negative token: no error")
	}
}

// commandLog records the commands a client sends, by name and arguments.
type commandLog struct {
	mu   sync.Mutex
	cmds [][]any
}

func (l *commandLog) add(cmds ...redis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cmds {
		l.cmds = append(l.cmds, c.Args())
	}
}

func (l *commandLog) taken() [][]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	cmds := l.cmds
	l.cmds = nil
	return cmds
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		l.add(cmd)
		return err
	}
}
func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		l.add(cmds...)
		return err
	}
}

// Set's script runs on the resource's server only: a lock client's nodes
// are never sent it, and the resource runs it by its SHA once it has it.
func TestSetScriptRunsOnlyOnTheResource(t *testing.T) {
	cl := redistest.StartT(t, 2, redistest.Options{})
	lockNode, resource := cl.Clients()[0], cl.Clients()[1]
	nodeLog, resourceLog := &commandLog{}, &commandLog{}
	lockNode.AddHook(nodeLog)
	resource.AddHook(resourceLog)
	// One node, no restart grace: the test's server just started and
	// holds nothing another client relies on.
	c, err := redlock.New([]redis.UniversalClient{lockNode}, redlock.Options{AllowNoFaultTolerance: true, TTL: 10 * time.Second, RestartGrace: redlock.NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "resource-owner")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := fence.Set(ctx, resource, "balance", l.Token(), string(rune('0'+i))); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range nodeLog.taken() {
		for _, arg := range cmd {
			if s, ok := arg.(string); ok && strings.Contains(s, "'fence', ARGV[1], 'value'") {
				t.Errorf("a lock node was sent fence.Set's script: %.40v", cmd)
			}
		}
	}
	cmds := resourceLog.taken()
	if last := cmds[len(cmds)-1]; last[0] != "evalsha" {
		t.Errorf("the second Set sent %.40v, want evalsha", last)
	}
	if v, token, err := fence.Get(ctx, resource, "balance"); err != nil || v != "1" || token != l.Token() {
		t.Errorf("Get: %q %d %v, want \"1\" %d", v, token, err, l.Token())
	}
}
