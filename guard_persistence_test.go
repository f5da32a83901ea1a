package redlock_test

// Schedules of issue 25 tried by its breaker: nodes that forget, under
// settings and timings nobody designed for.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// An operator turns the AOF off at run time (CONFIG SET appendonly no, to
// spare the disk during a bulk load, say) on persistent nodes, and a
// client sees it at a probe. X takes a lock; the nodes restart with their
// config file's settings (appendonly yes, appendfsync always) and load the
// AOF as it was when it was turned off: X's key is not in it. The restart
// looks persistent, and the data-kept marker, written before, is in the
// old AOF. A client that saw the nodes without persistence must not count
// them at once.
func TestPersistenceTurnedOffAtRunTimeThenARestartIsALoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, xy := guardedClients(t, redlock.Options{TTL: 30 * time.Second}, 2)
	x, y := xy[0], xy[1]
	for _, c := range []*redlock.Client{x, y} { // both meet persistent nodes
		for i, info := range c.Nodes(ctx) {
			if info.Err != nil || !info.Voting {
				t.Fatalf("node %d, persistent: %+v, want it voting", i, info)
			}
		}
	}
	off := cl.Servers[:2]
	configSetOn(ctx, t, off, "appendonly", "no")
	y.Nodes(ctx) // Y sees them without persistence
	const name = "job"
	held := holdOnEvery(t, ctx, x, cl.Servers, name)
	for _, s := range off {
		if err := s.Restart(true); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 0 {
			t.Fatalf("%s kept X's key across its restart (%d, %v): nothing was lost", s.Addr, n, err)
		}
	}
	refusedWhileHeld(t, ctx, held, name, refusal{after: " after 2 of 3 nodes restarted from an AOF turned off at run time,", is: sittingOut(false, "persist"), want: "the restarted nodes sitting out"}, contender{"Y", y})
}

// A client that saw a quorum of persistent nodes flushed during a hold
// makes them sit out the grace. Then they restart (a rolling restart, a
// crash): persistent, they come back as they were, without X's key, and
// with the data-kept marker the client's probe wrote after the flush. The
// restart must not end the sit-out the flush began.
func TestAFlushedNodeThatRestartsStillSitsOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, xy := guardedClients(t, redlock.Options{TTL: 30 * time.Second}, 2)
	x, y := xy[0], xy[1]
	y.Nodes(ctx) // Y meets the nodes and their markers
	const name = "job"
	held := holdOnEvery(t, ctx, x, cl.Servers, name)
	flushed := cl.Servers[:2]
	for _, s := range flushed {
		if err := s.Client().FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, info := range y.Nodes(ctx)[:2] {
		if info.Voting {
			t.Fatalf("node %d votes right after it was flushed: %+v", i, info)
		}
	}
	for _, s := range flushed {
		if err := s.Restart(true); err != nil {
			t.Fatal(err)
		}
	}
	// Y meets the restarted servers (a probe, as its next call after a
	// dial would make).
	for i, info := range y.Nodes(ctx)[:2] {
		t.Logf("node %d after its restart: voting %v, %s", i, info.Voting, info.SitOutReason)
	}
	refusedWhileHeld(t, ctx, held, name, refusal{after: " after 2 of 3 nodes were flushed and restarted,", is: sittingOut(false, "data-kept marker"), want: "the flushed nodes still sitting out for the flush"}, contender{"Y", y})
}

// truncateAOFAt cuts s's AOF (the incremental file of a multi-part AOF,
// Redis 7+ and Valkey) just before the first command that names key, as
// the crash of a machine loses the writes the server had not fsynced yet.
// A key in no file was lost already: with everysec, a server whose last
// fsync is still running holds its writes back (up to 2s), and the kill
// lost them. The server must be down.
func truncateAOFAt(t *testing.T, s *redistest.Server, key string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(s.Dir, "data", "appendonlydir", "*.incr.aof"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no incremental AOF file (%v)", s.Addr, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		at := bytes.Index(b, []byte(key))
		if at < 0 {
			continue
		}
		// Back to the start of the command (or the MULTI around it): a
		// truncated tail is loaded as far as it is whole.
		if m := bytes.LastIndex(b[:at], []byte("*1\r\n$5\r\nMULTI\r\n")); m >= 0 {
			at = m
		} else {
			at = bytes.LastIndex(b[:at], []byte("\n*")) + 1
		}
		if err := os.Truncate(f, int64(at)); err != nil {
			t.Fatal(err)
		}
		return
	}
}

// Issue 25's item 3: appendonly yes with appendfsync everysec keeps the
// writes across a restart of the process, but the crash of the machine
// loses up to the last second of them. The guard must count its start as
// one without persistence: a quorum that crashed during a hold, losing the
// holder's key, sits out the grace for a client that knew the nodes and
// for a fresh one.
func TestAppendfsyncEverysecIsNotPersistence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := startAnHourUp(t, redistest.Options{Persistence: true, Args: []string{"--appendfsync", "everysec"}}) // the hold needs no grace first
	newClient := func() *redlock.Client {
		return newClientOn(t, cl.Clients(), redlock.Options{TTL: 20 * time.Second})
	}
	x, before := newClient(), newClient()
	before.Nodes(ctx)
	const name = "job"
	held := holdOnEvery(t, ctx, x, cl.Servers, name)
	for _, s := range cl.Servers[:2] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		truncateAOFAt(t, s, x.Keys(name).Lock)
		if err := s.Restart(true); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 0 {
			t.Fatalf("%s has X's key after the crash (%d, %v): nothing was lost", s.Addr, n, err)
		}
	}
	before.Nodes(ctx)
	refusedWhileHeld(t, ctx, held, name, refusal{after: " after 2 of 3 everysec nodes crashed,", is: sittingOut(false, "without persistence"), want: "the crashed nodes sitting out as started without persistence"}, beforeAndFresh(before, newClient())...)
}

// A Cluster master's clock jumps forward alone, in 2 of 3 Cluster nodes,
// while X holds a lock whose slot it serves: X's key expires there at once.
// A client that knew the nodes sees the jump in the master's reply (its
// own clock history); a fresh client meets the jumped master beside the
// other master of its node and must not trust it either. Run for a lock
// of each half of the slots, so that the jumped master is the node's first
// by address in some nodes and not in others (the first master's clock is
// the one the other nodes are compared with).
func TestClusterMasterClockJumpedBeforeAClientMetIt(t *testing.T) {
	for _, half := range [][2]int{{0, 8191}, {8192, 16383}} {
		t.Run(fmt.Sprintf("slots-%d-%d", half[0], half[1]), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			rcs := redistest.StartRedisClustersT(t, 3, 2, 0, redistest.Options{FakeTime: true, Persistence: true})
			opts := redlock.Options{TTL: 20 * time.Second}
			newClient := func() *redlock.Client {
				return newClientOn(t, redistest.ClusterClientsT(t, rcs), opts)
			}
			x, before := newClient(), newClient()
			for i, info := range before.Nodes(ctx) {
				if info.Err != nil || !info.Voting {
					t.Fatalf("node %d: %+v, want it voting (persistent masters without replicas)", i, info)
				}
			}
			name := nameInSlots(x, "job", half[0], half[1])
			slot := x.Keys(name).Slot
			held := hold(t, ctx, x.TryAcquire, name)
			masters := make([]*redistest.Server, len(rcs))
			for i, rc := range rcs {
				m, err := rc.MasterFor(ctx, slot)
				if err != nil {
					t.Fatal(err)
				}
				masters[i] = m
			}
			awaitKeyOnEvery(t, ctx, masters, x.Keys(name).Lock)
			for i, m := range masters[:2] {
				first := true
				for _, sh := range rcs[i].Shards {
					first = first && m.Addr <= sh.Master.Addr
				}
				t.Logf("node %d: the slot's master %s is the node's first by address: %v", i, m.Addr, first)
				if err := m.SetClockOffset(30 * time.Second); err != nil {
					t.Fatal(err)
				}
				if n, err := m.Client().Exists(ctx, x.Keys(name).Lock).Result(); err != nil || n != 0 {
					t.Fatalf("%s kept X's key after its clock jumped 30s (%d, %v)", m.Addr, n, err)
				}
			}
			refusedWhileHeld(t, ctx, held, name, refusal{after: " after its master's clock jumped 30s in 2 of 3 Cluster nodes,", margin: time.Second, is: sittingOut(false, "clock"), want: "the jumped nodes sitting out for their clocks"}, beforeAndFresh(before, newClient())...)
		})
	}
}

// Clients with different TTLs on the same nodes: Z holds a lock of 900ms,
// whose validity keeps a drift budget of 11ms; W uses 60s locks, and its
// clock guard follows its own TTLs by default: it reacts only to a jump
// beyond 602ms. A clock jump of 500ms on 2 of 3 nodes expires Z's key there
// half a second early, and the default W took the lock with 487ms of Z's
// validity left. The guard's threshold must be the drift budget of the
// shortest lock any client holds on the nodes (docs/GUARANTEES.md): W set
// to it, having met the nodes before, must not take the lock while Z's
// validity runs.
func TestAShortLocksClockBudgetBindsEveryClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := redistest.StartT(t, 3, redistest.Options{Persistence: true, FakeTime: true})
	const short = 900 * time.Millisecond
	newClient := func(opts redlock.Options) *redlock.Client {
		return newClientOn(t, cl.Clients(), opts)
	}
	z := newClient(redlock.Options{TTL: short})
	w := newClient(redlock.Options{TTL: time.Minute, ClockJumpThreshold: short/100 + 2*time.Millisecond})
	takeAndRelease(t, ctx, w.TryAcquire, "warm-up") // W meets the nodes
	const name = "job"
	held := hold(t, ctx, z.TryAcquire, name)
	for _, s := range cl.Servers[:2] {
		if err := s.SetClockOffset(500 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	var last error
	for time.Now().Before(held.Deadline()) {
		l, err := w.TryAcquire(ctx, name)
		if err == nil {
			left := time.Until(held.Deadline())
			_ = l.Release(ctx)
			if left > 0 {
				t.Fatalf("W (60s locks) took lock %q after a 500ms clock jump on 2 of 3 nodes, while Z (900ms locks) holds it for %v more", name, left.Round(time.Millisecond))
			}
			return
		}
		last = err
	}
	if !errors.Is(last, redlock.ErrNodeSittingOut) || !strings.Contains(last.Error(), "clock jumped") {
		t.Fatalf("want W refused to the end of Z's validity with the jumped nodes sitting out, last got %v", last)
	}
}

// restartBefore is a go-redis hook that restarts a server (without
// persistence: empty) the first time a script call naming key is about to
// be sent to it: after the client's guard was read, before its vote.
type restartBefore struct {
	s     *redistest.Server
	key   string
	once  sync.Once
	fired bool
	err   error
}

func (h *restartBefore) names(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "evalsha", "eval":
		return slices.Contains(cmd.Args(), any(h.key))
	}
	return false
}

func (h *restartBefore) fire(cmds ...redis.Cmder) {
	if slices.ContainsFunc(cmds, h.names) {
		h.once.Do(func() { h.fired, h.err = true, h.s.Restart(false) })
	}
}

func (h *restartBefore) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *restartBefore) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.fire(cmd)
		return next(ctx, cmd)
	}
}

func (h *restartBefore) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.fire(cmds...)
		return next(ctx, cmds)
	}
}

// The worst moment for a restart: Y's guard of the nodes was just read
// (a second old at most, so the vote reads it without a probe), and 2 of 3
// servers restart empty between that read and Y's acquire script. The
// script goes out on a new connection and wins on the empty servers; the
// dial must make the vote wait for a probe, which finds new servers without
// persistence.
func TestARestartBetweenTheGuardAndTheVote(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := startAnHourUp(t, redistest.Options{}) // the hold needs no grace first
	// A node timeout of a second: Y's attempt must reach its scripts (and
	// the hooks that restart the servers) on a loaded machine too.
	opts := redlock.Options{TTL: 20 * time.Second, NodeTimeout: time.Second}
	x := newClientOn(t, cl.Clients(), opts)
	const name = "job"
	var hooks []*restartBefore
	var clients []redis.UniversalClient
	for i, s := range cl.Servers {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr, DisableIdentity: true})
		t.Cleanup(func() { _ = rdb.Close() })
		if i < 2 {
			h := &restartBefore{s: s, key: x.Keys(name).Lock}
			rdb.AddHook(h)
			hooks = append(hooks, h)
		}
		clients = append(clients, rdb)
	}
	y := newClientOn(t, clients, opts)
	held := hold(t, ctx, x.TryAcquire, name)
	awaitKeyOnEvery(t, ctx, cl.Servers, x.Keys(name).Lock)
	for i, info := range y.Nodes(ctx) { // Y's guards, fresh
		if info.Err != nil || !info.Voting {
			t.Fatalf("node %d: %+v, want it voting", i, info)
		}
	}
	left := time.Until(held.Deadline())
	l, err := y.TryAcquire(ctx, name)
	for _, h := range hooks {
		if !h.fired || h.err != nil {
			t.Fatalf("%s: the restart before Y's script: fired %v, %v", h.s.Addr, h.fired, h.err)
		}
	}
	if err == nil {
		_ = l.Release(ctx)
		t.Fatalf("Y took lock %q: 2 of 3 servers restarted empty between its guard and its vote, while X holds it for %.1fs more", name, left.Seconds())
	}
	if !errors.Is(err, redlock.ErrNodeSittingOut) || !strings.Contains(err.Error(), "without persistence") {
		t.Fatalf("want the restarted servers sitting out, got %v", err)
	}
}

// Sub-second clients beside a long lock: W and Z use 100ms locks; W met
// the nodes before X took a 20s lock (its registers then said nothing of
// 20s), Z meets them only after 2 of 3 restarted empty. Both must keep the
// restarted servers out for X's 20s, learnt from the register of the node
// that did not restart, not for their own 100ms.
func TestSubSecondClientsKeepOutAForgetfulQuorumForTheLongestLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := startAnHourUp(t, redistest.Options{}) // no hold needs a grace first
	newClient := func(ttl time.Duration) *redlock.Client {
		return newClientOn(t, cl.Clients(), redlock.Options{TTL: ttl})
	}
	w := newClient(100 * time.Millisecond)
	const name = "job"
	// Acquire, not TryAcquire: a 100ms TTL gives each node 10ms, which a
	// loaded machine may miss; the schedule needs the holds, not a first try.
	takeAndRelease(t, ctx, w.Acquire, name) // W meets the nodes, and uses the name
	x := newClient(20 * time.Second)
	held := hold(t, ctx, x.Acquire, name)
	awaitKeyOnEvery(t, ctx, cl.Servers, x.Keys(name).Lock)
	for _, s := range cl.Servers[:2] {
		if err := s.Restart(false); err != nil {
			t.Fatal(err)
		}
	}
	z := newClient(100 * time.Millisecond)
	for _, tc := range []struct {
		who string
		c   *redlock.Client
	}{{"a 100ms client that met the nodes before the 20s lock", w}, {"a fresh 100ms client", z}} {
		// Tried past its own grace (100ms, and the uptime's second of
		// rounding), until X's validity is nearly over.
		// A 100ms client gives each node 10ms, which a loaded machine
		// may miss: a try whose nodes did not answer says nothing, one
		// that they answered must show them sitting out X's 20s.
		satOut, lastErr := 0, error(nil)
		for time.Until(held.Deadline()) > 2*time.Second {
			l, err := tc.c.TryAcquire(ctx, name)
			if err == nil {
				left := time.Until(held.Deadline())
				_ = l.Release(ctx)
				t.Fatalf("%s took lock %q after 2 of 3 nodes restarted empty, while X holds it for %.1fs more", tc.who, name, left.Seconds())
			}
			lastErr = err
			if errors.Is(err, redlock.ErrNodeSittingOut) && strings.Contains(err.Error(), "20s restart grace") {
				satOut++
			}
			if satOut > 1 && time.Since(held.Deadline().Add(-20*time.Second)) > 3*time.Second {
				break // well past the 100ms grace and its rounding
			}
		}
		if satOut == 0 {
			t.Fatalf("%s: want the restarted nodes sitting out X's 20s in some try, last got %v", tc.who, lastErr)
		}
	}
}

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
		return newClientOn(t, cl.Clients(), redlock.Options{TTL: 20 * time.Second})
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
	x := newClientOn(t, cl.Clients(), redlock.Options{TTL: 20 * time.Second, RestartGrace: redlock.NoRestartGrace})
	const name = "job"
	held := holdOnEvery(t, ctx, x, cl.Servers, name)
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

// startAnHourUp starts 3 servers of opts with fake time, their clocks an
// hour on, as if up for an hour: a hold on them needs no restart grace
// first.
func startAnHourUp(t *testing.T, opts redistest.Options) *redistest.Cluster {
	t.Helper()
	opts.FakeTime = true
	cl := redistest.StartT(t, 3, opts)
	for _, s := range cl.Servers {
		if err := s.SetClockOffset(time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	return cl
}
