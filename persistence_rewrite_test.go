package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// aofWaitingForRewrite turns s's AOF off and on again at run time, the way
// an operator switches a running Redis to AOF (CONFIG SET appendonly yes),
// with a first rewrite that lasts (rdb-key-save-delay on a few padding
// keys, as a large dataset would). Until that rewrite ends the server
// reports aof_enabled:1 and appendfsync always, but the writes it logs go
// to a temporary file that no manifest names: a crash loses them.
func aofWaitingForRewrite(ctx context.Context, t *testing.T, s *redistest.Server) {
	t.Helper()
	rdb := s.Client()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", s.Addr, err)
		}
	}
	must(rdb.ConfigSet(ctx, "appendonly", "no").Err())
	for i := range 60 {
		must(rdb.Set(ctx, fmt.Sprintf("pad:%d", i), "x", 0).Err())
	}
	must(rdb.ConfigSet(ctx, "rdb-key-save-delay", "500000").Err()) // 0.5s a key: a 30s rewrite
	must(rdb.ConfigSet(ctx, "appendonly", "yes").Err())
	info, err := rdb.Info(ctx, "persistence").Result()
	must(err)
	if !strings.Contains(info, "aof_enabled:1") || !strings.Contains(info, "aof_rewrite_in_progress:1") {
		t.Fatalf("%s: want the AOF on and its first rewrite running:\n%s", s.Addr, info)
	}
}

// A server whose AOF was switched on at run time reports aof_enabled:1
// while its first rewrite runs, but what it logs meanwhile goes to a file
// that a restart does not load. It crashes before the rewrite ends and
// restarts persistent, without the lock X took meanwhile: the AOF it loads
// is the one from before the switch, data-kept marker included. A client
// that probed it during the rewrite (Y) must be refused while X's 20s
// validity runs: a probe that sees a rewrite does not count the node
// persistent. (A client that never probed it between the switch and the
// crash cannot tell: the limit docs/PROTOCOL.md §11 states.)
func TestAnAOFRewriteIsNotPersistence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := redistest.StartT(t, 3, redistest.Options{Persistence: true})
	t.Cleanup(func() {
		for _, s := range cl.Servers[:2] {
			_ = s.Kill() // the rewrite's child sleeps between keys: do not wait for it at Stop
		}
	})
	newClient := func() *redlock.Client {
		c, err := redlock.New(cl.Clients(), redlock.Options{TTL: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	// Y meets the nodes while they persist: its data-kept markers are in
	// the AOF that a restart loads.
	y := newClient()
	for i, info := range y.Nodes(ctx) {
		if info.Err != nil || !info.Voting {
			t.Fatalf("node %d: %+v, want it voting", i, info)
		}
	}
	for _, s := range cl.Servers[:2] {
		aofWaitingForRewrite(ctx, t, s)
	}
	// Y probes the nodes while their first rewrite runs: INFO shows the
	// AOF on and a rewrite in progress, which a probe does not count as
	// persistent (a routine rewrite looks the same).
	for i, info := range y.Nodes(ctx) {
		if info.Err != nil {
			t.Fatalf("node %d during the rewrite: %v", i, info.Err)
		}
	}
	// X, the holder, takes the nodes as they say they are: a probe now
	// would count them not persistent and keep them out for their first
	// 20s, so X turns the grace off to reach the schedule. Y's refusal
	// rests on Y's own view only.
	x, err := redlock.New(cl.Clients(), redlock.Options{TTL: 20 * time.Second, RestartGrace: redlock.NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Close() })
	const name = "job"
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	awaitKeyOnEvery(t, ctx, cl.Servers, x.Keys(name).Lock)
	for _, s := range cl.Servers[:2] {
		if err := s.Restart(true); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 0 {
			t.Fatalf("%s after the crash: X's key %d, %v; the schedule wants it lost", s.Addr, n, err)
		}
	}
	// Y probed the nodes during the rewrite.
	l, err := y.TryAcquire(ctx, name)
	if err == nil {
		got := time.Now()
		_ = l.Release(ctx)
		if left := held.Deadline().Sub(got); left > 0 {
			t.Errorf("BROKEN: Y took %q after a crash during the first rewrite of an AOF switched on at run time, with %.1fs of X's validity left", name, left.Seconds())
		}
		return
	}
	if !errors.Is(err, redlock.ErrNodeSittingOut) {
		t.Errorf("Y: %v, want the crashed nodes sitting out (ErrNodeSittingOut)", err)
	}
	t.Logf("Y refused: %v", err)
}
