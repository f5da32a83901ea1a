package redlock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
)

// timeGate holds the next TIME sent through a client once armed: a probe
// then waits between its pipeline (INFO and the marker) and its clock
// sample, as a slow network or a busy client would have it wait.
type timeGate struct {
	mu      sync.Mutex
	release chan struct{}
	blocked chan struct{}
}

func (g *timeGate) arm() (blocked, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.release, g.blocked = make(chan struct{}), make(chan struct{})
	return g.blocked, g.release
}

func (g *timeGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *timeGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (g *timeGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "time") {
			g.mu.Lock()
			release, blocked := g.release, g.blocked
			g.release, g.blocked = nil, nil
			g.mu.Unlock()
			if release != nil {
				close(blocked)
				<-release
			}
		}
		return next(ctx, cmd)
	}
}

var _ redis.Hook = (*timeGate)(nil)

// Review of 195a6b9: markerFull is the one piece of a server's epoch that
// a later install can undo. Two probes of Y overlap: A read the marker
// before the flush, B after it (refused for want of memory: markerFull,
// node stale). A installs after B: its marker is the one B kept, so it
// sees no loss, and its guard has markerFull false. A third probe C
// (started after B, so it cleared the stale mark) is still in flight: the
// vote made now is judged by A's guard, fresh and blind, and counts on the
// flushed server once its memory is back.
func TestReviewBlindProbeUndoneByAnOlderProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := startCappedNodes(t)
	opts := redlock.Options{TTL: 30 * time.Second}
	x := newClientOn(t, cl.Clients(), opts)
	gates := make([]*timeGate, 3)
	var ynodes []redis.UniversalClient
	for i, s := range cl.Servers {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
		gates[i] = &timeGate{}
		rdb.AddHook(gates[i])
		t.Cleanup(func() { _ = rdb.Close() })
		ynodes = append(ynodes, rdb)
	}
	y := newClientOn(t, ynodes, opts)
	for _, info := range y.Nodes(ctx) { // Y meets the nodes and their markers
		if info.Err != nil || !info.Voting {
			t.Fatalf("%+v, want it voting", info)
		}
	}
	const name = "job"
	held := hold(t, ctx, x.TryAcquire, name)
	flushed := cl.Servers[:2]

	// Probe A of nodes 0 and 1: reads the marker, then waits for its TIME.
	var blockedA, releaseA [2]chan struct{}
	for i := range 2 {
		blockedA[i], releaseA[i] = gates[i].arm()
	}
	doneA := make(chan struct{})
	go func() { defer close(doneA); y.Nodes(ctx) }()
	for i := range 2 {
		<-blockedA[i]
	}
	// The flush, its memory not back yet.
	for _, s := range flushed {
		if err := s.Client().ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Client().FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Probe B: blind, markerFull, the node stale.
	for i, info := range y.Nodes(ctx)[:2] {
		t.Logf("probe B, node %d: voting %v (%s)", i, info.Voting, info.SitOutReason)
	}
	// Probe C starts (clearing the stale mark) and waits for its TIME.
	var blockedC, releaseC [2]chan struct{}
	for i := range 2 {
		blockedC[i], releaseC[i] = gates[i].arm()
	}
	doneC := make(chan struct{})
	go func() { defer close(doneC); y.Nodes(ctx) }()
	for i := range 2 {
		<-blockedC[i]
	}
	// The memory comes back; A installs its guard.
	configSetOn(ctx, t, flushed, "maxmemory", "8mb")
	for i := range 2 {
		close(releaseA[i])
	}
	<-doneA
	l, err := y.TryAcquire(ctx, name)
	for i := range 2 {
		close(releaseC[i])
	}
	<-doneC
	if err == nil {
		_ = l.Release(ctx)
		t.Fatalf("Y took lock %q after FLUSHALL on 2 of 3 nodes while X holds it for %.1fs more", name, time.Until(held.Deadline()).Seconds())
	}
	t.Logf("Y refused: %v", err)
}
