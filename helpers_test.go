package redlock_test

// The shared fixtures of the package's external tests, in one place: the
// clients a test makes of its nodes, the locks it takes and holds, the
// waiters, the "no second holder" check of the loss tests, and what a test
// reads on the servers. Fixtures of one capability stay in its test file;
// Cluster and Sentinel setup is in redistest.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
	"github.com/quorumlabs/redlock/redistest"
	"github.com/redis/go-redis/v9"
)

// TestMain silences go-redis' own log: the tests kill nodes on purpose, and
// every failed dial would print a line.
func TestMain(m *testing.M) {
	redlock.SetGoRedisLogger(quietLogger{}) // the lines about NewFromURLs' nodes go to their clients' Logger
	os.Exit(m.Run())
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// --- Clients of the test nodes.

// newClient builds a client over the cluster's nodes. Unless the test sets
// a grace, the restart guard is off: the nodes were just started, and the
// guard would (rightly) keep them from voting for one TTL.
func newClient(t *testing.T, cl *redistest.Cluster, opts redlock.Options) *redlock.Client {
	t.Helper()
	return newClientOn(t, cl.Clients(), testDefaults(opts, len(cl.Servers)))
}

// newClients is n clients of cl built as newClient builds one.
func newClients(t *testing.T, cl *redistest.Cluster, opts redlock.Options, n int) []*redlock.Client {
	t.Helper()
	clients := make([]*redlock.Client, n)
	for i := range clients {
		clients[i] = newClient(t, cl, opts)
	}
	return clients
}

// newClientOn builds a client over nodes as given, closed at cleanup: for
// nodes that newClient's defaults do not fit (Cluster or Sentinel clients,
// a restart grace left on).
func newClientOn(t *testing.T, nodes []redis.UniversalClient, opts redlock.Options) *redlock.Client {
	t.Helper()
	c, err := redlock.New(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// fromURLs builds a client from node URLs, with newClient's defaults, closed
// at cleanup.
func fromURLs(t *testing.T, urls []string, opts redlock.Options) *redlock.Client {
	t.Helper()
	c, err := redlock.NewFromURLs(urls, testDefaults(opts, len(urls)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testDefaults are newClient's and fromURLs' defaults for a client of n
// fresh nodes: unless opts sets a grace, the restart guard is off; on 1 or
// 2 nodes, where the quorum arithmetic is not the point, the client opts
// in to no fault tolerance, as a deployment would have to.
func testDefaults(opts redlock.Options, n int) redlock.Options {
	if opts.RestartGrace == 0 {
		opts.RestartGrace = redlock.NoRestartGrace
	}
	if n < 3 {
		opts.AllowNoFaultTolerance = true
	}
	return opts
}

// guardedClients starts three persistent nodes, cl, and n clients of them
// with opts as given: unlike newClient's, their restart guard stays on.
func guardedClients(t *testing.T, opts redlock.Options, n int) (cl *redistest.Cluster, cs []*redlock.Client) {
	t.Helper()
	cl = redistest.StartT(t, 3, redistest.Options{Persistence: true})
	cs = make([]*redlock.Client, n)
	for i := range cs {
		cs[i] = newClientOn(t, cl.Clients(), opts)
	}
	return cl, cs
}

// --- Locks taken, held and given back.

// eventuallyTakes tries, until it wins within the given time (else it
// fails the test, naming what), to take the lock name with c at one attempt
// and give it back: how a test waits for nodes to vote again once their
// restart grace is over.
func eventuallyTakes(t *testing.T, ctx context.Context, c *redlock.Client, name string, within time.Duration, what string) {
	t.Helper()
	eventually(t, within, what, func() bool {
		l, err := c.TryAcquire(ctx, name)
		if err == nil {
			_ = l.Release(ctx)
		}
		return err == nil
	})
}

// takeAndRelease takes the lock name with take (a client's Acquire, which
// waits, or TryAcquire, which must win at once) and gives it back: how a
// test waits out fresh servers' grace, makes a client meet its nodes, or
// shows the lock is free.
func takeAndRelease(t *testing.T, ctx context.Context, take func(context.Context, string, ...redlock.LockOption) (*redlock.Lock, error), name string) {
	t.Helper()
	l, err := take(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// takeExtendRelease runs each of a lock's scripts once on c: it takes the
// lock name without waiting, extends it and releases it, each of which must
// succeed.
func takeExtendRelease(t *testing.T, ctx context.Context, c *redlock.Client, name string) {
	t.Helper()
	l, err := c.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// hold takes the lock name with take (a client's Acquire or TryAcquire,
// with opts) and releases it at cleanup: a lock held for the rest of the
// test.
func hold(t *testing.T, ctx context.Context, take func(context.Context, string, ...redlock.LockOption) (*redlock.Lock, error), name string, opts ...redlock.LockOption) *redlock.Lock {
	t.Helper()
	l, err := take(ctx, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// holdAutoExtended takes n locks, named prefix-0 and on, with take (a
// client's Acquire or TryAcquire), each auto-extended.
func holdAutoExtended(t *testing.T, ctx context.Context, take func(context.Context, string, ...redlock.LockOption) (*redlock.Lock, error), prefix string, n int) []*redlock.Lock {
	t.Helper()
	held := make([]*redlock.Lock, 0, n)
	for i := range n {
		l, err := take(ctx, fmt.Sprintf("%s-%d", prefix, i), redlock.WithAutoExtend())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	return held
}

// holdOnEvery takes the lock name with c, without waiting, releases it at
// cleanup, and waits until its key is on every one of servers: a fault
// aimed at the holder's nodes then meets the key on each.
func holdOnEvery(t *testing.T, ctx context.Context, c *redlock.Client, servers []*redistest.Server, name string) *redlock.Lock {
	t.Helper()
	held := hold(t, ctx, c.TryAcquire, name)
	awaitKeyOnEvery(t, ctx, servers, c.Keys(name).Lock)
	return held
}

// releaseTwice releases h, which must succeed, and releases it again,
// which must say ErrNotHeld.
func releaseTwice(t *testing.T, ctx context.Context, h interface{ Release(context.Context) error }) {
	t.Helper()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld", err)
	}
}

// acquireAsync runs c.Acquire(ctx, name, opts...) in the background, and
// awaitGot waits for its lock: the internal tests' own
// (helpers_internal_test.go).
var (
	acquireAsync = redlock.AcquireAsync
	awaitGot     = redlock.AwaitGot
)

// acquireReleaseAsync runs c.Acquire(ctx, name) in the background and
// releases the lock it got; the outcome comes on the channel, nil once the
// lock was taken and released.
func acquireReleaseAsync(ctx context.Context, c *redlock.Client, name string) <-chan error {
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(ctx, name)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	return got
}

// endedWith fails the test unless a lock (a permit, a multi-lock) has ended
// already, as its Done and Err tell: done closed, then errOf() matching
// want (asked in that order: Done alone must tell). after says after what,
// for the messages.
func endedWith(t *testing.T, after string, done <-chan struct{}, errOf func() error, want error) {
	t.Helper()
	select {
	case <-done:
	default:
		t.Fatalf("Done still open after %s", after)
	}
	if err := errOf(); !errors.Is(err, want) {
		t.Fatalf("Err after %s: %v, want %v", after, err, want)
	}
}

// --- Waiters: slow retries, so that only a wake-up explains a quick acquire.

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

// --- No second holder: the loss tests' check while X holds its lock.

// contender is a client that tries a lock another client holds, named for
// the messages.
type contender struct {
	who string
	c   *redlock.Client
}

// beforeAndFresh are the two clients a loss test asks: one that used the
// nodes before the loss, and one that met them only after it.
func beforeAndFresh(before, fresh *redlock.Client) []contender {
	return []contender{{"a client that used the nodes before", before}, {"a fresh client", fresh}}
}

// refusal is what refusedWhileHeld expects of each try of a held lock.
type refusal struct {
	after  string                  // what befell the nodes, for the messages
	tries  int                     // tries per client (1 if 0): the first may be the one that finds a new connection, the next must not slip through either
	margin time.Duration           // validity of the hold left at each try, or the test is too slow to tell (unchecked if 0)
	is     func(err error) bool    // whether err is the refusal wanted
	want   string                  // the refusal wanted, for the messages
	then   func(c *redlock.Client) // runs after each refused try, if set
}

// sittingOut is the refusal of nodes that sit out: ErrNodeSittingOut (and
// ErrNoQuorum if noQuorum), the error saying says.
func sittingOut(noQuorum bool, says string) func(error) bool {
	return func(err error) bool {
		return errors.Is(err, redlock.ErrNodeSittingOut) && (!noQuorum || errors.Is(err, redlock.ErrNoQuorum)) && strings.Contains(err.Error(), says)
	}
}

// refusedWhileHeld has each contender try the lock name that held holds:
// every try must be refused as r says. Where a try takes the lock, a
// second holder had it while the first was valid.
func refusedWhileHeld(t *testing.T, ctx context.Context, held *redlock.Lock, name string, r refusal, contenders ...contender) {
	t.Helper()
	for _, tc := range contenders {
		for range max(r.tries, 1) {
			left := time.Until(held.Deadline())
			if r.margin > 0 && left < r.margin {
				t.Fatalf("X's validity ran out before the check (%v left): the test is too slow to tell", left)
			}
			l, err := tc.c.TryAcquire(ctx, name)
			if err == nil {
				_ = l.Release(ctx)
				t.Fatalf("%s took lock %q%s while X holds it for %.1fs more", tc.who, name, r.after, left.Seconds())
			}
			if !r.is(err) {
				t.Fatalf("%s: want %s, got %v", tc.who, r.want, err)
			}
			if r.then != nil {
				r.then(tc.c)
			}
		}
	}
}

// --- What the servers hold and say.

// serversWith lists the running servers of cl that hold key, by address.
func serversWith(t *testing.T, cl *redistest.Cluster, key string) []string {
	t.Helper()
	var with []string
	for _, s := range cl.Servers {
		if !s.Running() {
			continue
		}
		n, err := s.Client().Exists(context.Background(), key).Result()
		if err != nil {
			t.Fatalf("%s: %v", s.Addr, err)
		}
		if n > 0 {
			with = append(with, s.Addr)
		}
	}
	return with
}

// keysLeft lists the nodes that still hold the lock key of name.
func keysLeft(t *testing.T, cl *redistest.Cluster, c *redlock.Client, name string) []string {
	t.Helper()
	return serversWith(t, cl, c.Keys(name).Lock)
}

// keysOfLeft lists "<addr> <key>" for every one of keys still on a
// running server of cl.
func keysOfLeft(t *testing.T, cl *redistest.Cluster, keys []string) []string {
	t.Helper()
	var left []string
	for _, k := range keys {
		for _, addr := range serversWith(t, cl, k) {
			left = append(left, addr+" "+k)
		}
	}
	return left
}

// keysGone waits until no node holds name's lock key: a release returns
// once a quorum deleted it, and the node that answered the acquire last
// deletes it just after.
func keysGone(t *testing.T, cl *redistest.Cluster, c *redlock.Client, name string) {
	t.Helper()
	eventually(t, 5*time.Second, name+" released on every node", func() bool { return len(keysLeft(t, cl, c, name)) == 0 })
}

// awaitKeyOnEvery waits until key is on every one of servers: the holder's
// slowest node has its key before a fault is aimed at it.
func awaitKeyOnEvery(t *testing.T, ctx context.Context, servers []*redistest.Server, key string) {
	t.Helper()
	eventually(t, 30*time.Second, "X's key on every node", func() bool {
		for _, s := range servers {
			if n, err := s.Client().Exists(ctx, key).Result(); err != nil || n != 1 {
				return false
			}
		}
		return true
	})
}

// awaitNoKey waits until s holds no key at key: a refused attempt's release
// sweep is done there.
func awaitNoKey(t *testing.T, ctx context.Context, s *redistest.Server, key string) {
	t.Helper()
	eventually(t, 10*time.Second, "the refused attempt's key released on "+s.Addr, func() bool {
		n, err := s.Client().Exists(ctx, key).Result()
		return err == nil && n == 0
	})
}

// nameInSlots finds a lock name whose hash slot is in [first, last].
func nameInSlots(c *redlock.Client, prefix string, first, last int) string {
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if s := c.Keys(name).Slot; first <= s && s <= last {
			return name
		}
	}
}

// runID reads a server's run_id.
func runID(t *testing.T, s *redistest.Server) string {
	t.Helper()
	return infoServerField(t, s, "run_id")
}

// uptime reads INFO's uptime_in_seconds of a server.
func uptime(t *testing.T, s *redistest.Server) int {
	t.Helper()
	n, err := strconv.Atoi(infoServerField(t, s, "uptime_in_seconds"))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// infoServerField reads field of the server section of s's INFO.
func infoServerField(t *testing.T, s *redistest.Server, field string) string {
	t.Helper()
	info, err := s.Client().Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	t.Fatalf("no %s in INFO", field)
	return ""
}

// refusedAddr is a local address that refuses connections: a port that was
// just bound and released.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// --- Waiting for a state that sends no event; recording the log.

// eventually polls cond until it holds or the deadline passes: for awaiting
// a state of a real server that sends no event.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recordingHandler is a slog.Handler that keeps every record as a line.
type recordingHandler struct {
	mu  sync.Mutex
	out []string
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.Key + "=" + a.Value.String()
		return true
	})
	h.mu.Lock()
	h.out = append(h.out, line)
	h.mu.Unlock()
	return nil
}

func (h *recordingHandler) lines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.out...)
}

// configSetOn sets the server parameter param to value on each of servers.
func configSetOn(ctx context.Context, t *testing.T, servers []*redistest.Server, param, value string) {
	t.Helper()
	for _, s := range servers {
		if err := s.Client().ConfigSet(ctx, param, value).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
