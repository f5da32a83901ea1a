package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/redistest"
)

// The native compare-and-act commands (native.go) on real servers of every
// build: Redis 7.0 (none: the scripts), Redis 8.6 (DELEX, SET IFEQ) and
// Valkey 9.1 (DELIFEQ, SET IFEQ), each test on the builds it needs in one
// run. The sections: the fixtures; the quiet release; the extend and the
// schedules tried against it; the renewal rounds; full nodes (OOM); the
// fallbacks (NOPERM, a failover to an older build, a Cluster node); the
// seam.

// nativeExpected is what the probe must find on each build, from the
// builds' documentation: the test knows versions, the client must not.
var nativeExpected = map[string]nativeCaps{
	redistest.Redis70:  0,
	redistest.Redis86:  nativeDelex | nativeSetIfEq,
	redistest.Valkey91: nativeDelifeq | nativeSetIfEq,
}

// nativeBuilds are the builds with native forms: SET IFEQ and a
// compare-and-delete.
var nativeBuilds = []string{redistest.Redis86, redistest.Valkey91}

// eachBuild runs test on each of servers in a subtest named for it, with a
// context that ends after within.
func eachBuild(t *testing.T, servers []string, within time.Duration, test func(t *testing.T, ctx context.Context, server string)) {
	t.Helper()
	for _, server := range servers {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), within)
			defer cancel()
			test(t, ctx, server)
		})
	}
}

// nativeNodes starts 3 servers as o says and a client of them
// (nativeClient, as user) whose commands the returned log records.
func nativeNodes(t *testing.T, o redistest.Options, user string) (*redistest.Cluster, *sentLog, *Client) {
	t.Helper()
	cl := redistest.StartT(t, 3, o)
	log := &sentLog{}
	return cl, log, nativeClient(t, cl, log, user)
}

// sentLog records the commands a client sends, by name, with the script
// a call of EVALSHA or EVAL runs: what path an operation took, as the
// client wrote it (the server's commandstats also count the commands
// scripts call, and the probes').
type sentLog struct {
	mu   sync.Mutex
	sent []string
	// sending, if set, is told each command's name as it goes out.
	sending atomic.Pointer[func(name string)]
}

func (r *sentLog) DialHook(next redis.DialHook) redis.DialHook { return next }

// goingOut tells sending of cmds.
func (r *sentLog) goingOut(cmds ...redis.Cmder) {
	if f := r.sending.Load(); f != nil {
		for _, cmd := range cmds {
			(*f)(cmdName(cmd))
		}
	}
}

func (r *sentLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.goingOut(cmd)
		err := next(ctx, cmd)
		r.add(cmd, err) // go-redis sets cmd's error after the hooks
		return err
	}
}

func (r *sentLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.goingOut(cmds...)
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			r.add(cmd, cmd.Err())
		}
		return err
	}
}

// add records cmd, once answered, as "set ifeq", "delex", "script
// extend.lua", ... A script call the server did not know (NOSCRIPT, then
// sent again by EVAL) is not recorded: the servers of each test are new,
// and the client may know a script's SHA from an earlier test's.
func (r *sentLog) add(cmd redis.Cmder, err error) {
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		return
	}
	name := cmdName(cmd)
	r.mu.Lock()
	r.sent = append(r.sent, name)
	r.mu.Unlock()
}

// cmdName names cmd as sentLog records it.
func cmdName(cmd redis.Cmder) string {
	args := cmd.Args()
	name := strings.ToLower(fmt.Sprint(args[0]))
	switch {
	case name == "evalsha" || name == "eval":
		name = "script ?"
		for _, s := range scripts {
			if len(args) > 1 && (args[1] == s.src || s.sha.Load() != nil && args[1] == *s.sha.Load()) {
				name = "script " + s.file
			}
		}
	case name == "set" && slices.ContainsFunc(args, func(a any) bool { return strings.EqualFold(fmt.Sprint(a), "ifeq") }):
		name = "set ifeq"
	}
	return name
}

// await waits until name was sent at least n times from mark on.
func (r *sentLog) await(t *testing.T, ctx context.Context, mark int, name string, n int) {
	t.Helper()
	if err := redistest.Await(ctx, fmt.Sprintf("%d sends of %s", n, name), 10*time.Second, func(context.Context) (bool, error) {
		return r.since(mark, name) >= n, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// since counts the commands named name sent from mark on.
func (r *sentLog) since(mark int, name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.sent[mark:] {
		if s == name {
			n++
		}
	}
	return n
}

func (r *sentLog) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sent)
}

// loggedClients are clients of the servers of cl whose commands log
// records, closed at cleanup; user "" for the default user, else user
// with password "pw".
func loggedClients(t *testing.T, cl *redistest.Cluster, log *sentLog, user string) []redis.UniversalClient {
	t.Helper()
	var rdbs []redis.UniversalClient
	for _, s := range cl.Servers {
		o := &redis.Options{Addr: s.Addr, MaxRetries: -1}
		if user != "" {
			o.Username, o.Password = user, "pw"
		}
		rdb := redis.NewClient(o)
		rdb.AddHook(log)
		t.Cleanup(func() { _ = rdb.Close() })
		rdbs = append(rdbs, rdb)
	}
	return rdbs
}

// nativeClient is a client of the servers of cl whose commands log
// records (loggedClients), verified.
func nativeClient(t *testing.T, cl *redistest.Cluster, log *sentLog, user string) *Client {
	t.Helper()
	return nativeClientOf(t, loggedClients(t, cl, log, user), true)
}

// nativeClientOf is a client of rdbs with a 10s TTL, closed at cleanup;
// verified (the nodes probed) if verify.
func nativeClientOf(t *testing.T, rdbs []redis.UniversalClient, verify bool) *Client {
	t.Helper()
	c, err := New(rdbs, Options{TTL: 10 * time.Second, NodeTimeout: time.Second, RestartGrace: NoRestartGrace, AllowNoFaultTolerance: len(rdbs) < 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if !verify {
		return c
	}
	if err := c.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// deleteName is the command name a node of build uses to compare and
// delete ("" for none).
func deleteName(caps nativeCaps) string {
	if args := caps.deleteArgs("k", "v"); args != nil {
		return args[0].(string)
	}
	return ""
}

// scriptsOnly makes c's nodes take the scripts, as if their ACL refused
// every native command: for the tests of the scripts' own behaviour on
// servers that have native forms, and the control of a native schedule.
func scriptsOnly(c *Client) {
	for _, n := range c.nodes {
		n.pipes.nativeRefused.Store(^uint32(0))
	}
}

// nativeAgain undoes scriptsOnly: c's nodes take the native forms they
// have.
func nativeAgain(c *Client) {
	for _, n := range c.nodes {
		n.pipes.nativeRefused.Store(0)
	}
}

// quietAttempt is an attempt at name whose release is quiet, as a failed
// attempt's cleanup is (attempt.abandon), for calling deleteOn directly.
func quietAttempt(c *Client, name string) *attempt {
	a := c.newAttempt(mutexKind, name, c.opts.TTL)
	a.kind.quiet(a)
	a.quieted = true
	return a
}

// checkQuietDelete puts value at q's key through rdb, then runs q's quiet
// release on n, which rdb's server serves: it must delete the key exactly
// when value is ours, and leave another owner's key with its TTL. what
// names the node in the errors.
func checkQuietDelete(t *testing.T, ctx context.Context, what string, rdb redis.Cmdable, q *attempt, n *node, value string) {
	t.Helper()
	key := q.keys[0]
	if err := rdb.Set(ctx, key, value, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	ours := value == q.value
	if deleted, err := q.deleteOn(ctx, n); err != nil || deleted != ours {
		t.Errorf("%s: release of a key holding %q (ours %v): deleted %v, %v; want %v, nil", what, value, ours, deleted, err, ours)
	}
	if ours {
		if got := rdb.Exists(ctx, key).Val(); got != 0 {
			t.Errorf("%s: our key is still there after our release", what)
		}
		return
	}
	if got := rdb.Get(ctx, key).Val(); got != value {
		t.Errorf("%s: another owner's key is %q after our release, want it kept: a release deleted a key not ours", what, got)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
		t.Errorf("%s: another owner's key lost its TTL (%v)", what, ttl)
	}
}

// failQuietly makes c's TryAcquire of name fail after winning on the last
// node only: another owner holds the key on every other node. The failed
// attempt's cleanup is a quiet release on every node; Close waits for it.
// It returns the other owner's value.
func failQuietly(t *testing.T, ctx context.Context, cl *redistest.Cluster, c *Client, name string) string {
	t.Helper()
	other := "another-owner-" + name
	setOn(t, ctx, cl.Servers[:len(cl.Servers)-1], c.Keys(name).Lock, other)
	if l, err := c.TryAcquire(ctx, name); !errors.Is(err, ErrLocked) {
		if l != nil {
			_ = l.Release(ctx)
		}
		t.Fatalf("TryAcquire of a name another owner holds on 2 of 3 nodes: %v, want ErrLocked", err)
	}
	return other
}

// checkQuietCleanup checks what a quiet release left: the other owner's
// keys, with their TTL, and ours deleted on the node we won.
func checkQuietCleanup(t *testing.T, ctx context.Context, cl *redistest.Cluster, key, other string) {
	t.Helper()
	last := len(cl.Servers) - 1
	for i, s := range cl.Servers {
		got, err := s.Client().Get(ctx, key).Result()
		switch {
		case i < last && (err != nil || got != other):
			t.Errorf("node %d: another owner's key is %q (%v) after our release, want %q: a release deleted a key not ours", i, got, err, other)
		case i < last:
			if ttl := s.Client().PTTL(ctx, key).Val(); ttl <= 0 {
				t.Errorf("node %d: another owner's key lost its TTL (%v)", i, ttl)
			}
		case err != redis.Nil:
			t.Errorf("node %d: our key of the failed attempt is %q (%v), want it deleted", i, got, err)
		}
	}
}

// fillNodes puts every server of cl at its maxmemory with the policy the
// client demands (noeviction, DEPLOYMENTS.md): the server then refuses
// every command flagged denyoom with OOM. maxmemory 1 is below any used
// memory; undo sets it back.
func fillNodes(t *testing.T, ctx context.Context, cl *redistest.Cluster) (undo func()) {
	t.Helper()
	for _, s := range cl.Servers {
		rdb := s.Client()
		if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	return func() {
		for _, s := range cl.Servers {
			_ = s.Client().ConfigSet(context.Background(), "maxmemory", "0").Err()
		}
	}
}

// flipCase is s with the case of its letters swapped.
func flipCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c >= 'A' && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

// switchDialer dials whichever server target names: a node whose server
// is replaced behind one address, as a failover does.
type switchDialer struct{ target atomic.Pointer[string] }

func (d *switchDialer) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	var nd net.Dialer
	return nd.DialContext(ctx, network, *d.target.Load())
}

// The quiet release: a failed attempt's cleanup, which announces nothing.

// TestNativeQuietReleaseDeletesOnlyOurKey: on every build the probe finds
// the native commands the build has (and none on 7.0), and a failed
// attempt's cleanup, which announces nothing, goes through the server's
// compare-and-delete where there is one and the release script where
// there is none. Either way it deletes our key on the node we won and
// leaves another owner's key and its TTL on the others.
func TestNativeQuietReleaseDeletesOnlyOurKey(t *testing.T) {
	eachBuild(t, redistest.ServerNames, 30*time.Second, func(t *testing.T, ctx context.Context, server string) {
		cl, log, c := nativeNodes(t, redistest.Options{Server: server}, "")
		want := nativeExpected[server]
		for i, n := range c.nodes {
			if got := n.pipes.nativeCaps(); got != want {
				t.Fatalf("node %d of %s: native commands %b, want %b", i, server, got, want)
			}
		}
		mark := log.mark()
		other := failQuietly(t, ctx, cl, c, "quiet")
		if err := c.Close(); err != nil { // waits for the background release
			t.Fatal(err)
		}
		checkQuietCleanup(t, ctx, cl, c.Keys("quiet").Lock, other)
		// The nodes that refused answered that the key is not ours:
		// the cleanup goes to the node we won only.
		scripted, native := log.since(mark, "script release.lua"), 0
		if name := deleteName(want); name != "" {
			native = log.since(mark, name)
		}
		if want == 0 && (scripted != 1 || native != 0) || want != 0 && (scripted != 0 || native != 1) {
			t.Errorf("%s: the cleanup sent %d release scripts and %d native deletes, want the %s path on the node won",
				server, scripted, native, map[bool]string{true: "script", false: "native"}[want == 0])
		}
	})
}

// TestNativeDeleteNeverTakesAnotherOwnersKey: the quiet release, native
// where the server has a compare-and-delete and the script where it has
// none, deletes the key only while it holds our value: never another
// owner's (a key ours at the acquire, taken by another since it expired),
// whose TTL it leaves too.
func TestNativeDeleteNeverTakesAnotherOwnersKey(t *testing.T) {
	eachBuild(t, redistest.ServerNames, 30*time.Second, func(t *testing.T, ctx context.Context, server string) {
		cl, log, c := nativeNodes(t, redistest.Options{Server: server}, "")
		path := "script release.lua"
		if name := deleteName(nativeExpected[server]); name != "" {
			path = name
		}
		a := quietAttempt(c, "theirs")
		for i, n := range c.nodes {
			mark := log.mark()
			for _, value := range []string{"another-owner", a.value} {
				checkQuietDelete(t, ctx, fmt.Sprintf("node %d", i), cl.Servers[i].Client(), a, n, value)
			}
			if got := log.since(mark, path); got != 2 {
				t.Errorf("node %d: %d sends of %s for two releases, want 2", i, got, path)
			}
		}
	})
}

// TestNativeLoudReleaseKeepsTheScript: a held lock's release wakes
// waiters, so it stays the script, which publishes only when it deleted
// (a native delete and a PUBLISH would announce a release that deleted
// nothing too). A lock with metadata keeps the script for its quiet
// release as well: two keys to delete.
func TestNativeLoudReleaseKeepsTheScript(t *testing.T) {
	eachBuild(t, nativeBuilds, 30*time.Second, func(t *testing.T, ctx context.Context, server string) {
		cl, log, c := nativeNodes(t, redistest.Options{Server: server}, "")
		l, err := c.TryAcquire(ctx, "loud")
		if err != nil {
			t.Fatal(err)
		}
		mark := log.mark()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// Release returns at a quorum: the third node may follow.
		log.await(t, ctx, mark, "script release.lua", 3)
		if got := log.since(mark, deleteName(nativeExpected[server])); got != 0 {
			t.Errorf("a held lock's release sent %d native deletes, want none", got)
		}

		mark = log.mark()
		key := c.Keys("with-metadata").Lock
		setOn(t, ctx, cl.Servers[:2], key, "another-owner")
		if _, err := c.TryAcquire(ctx, "with-metadata", WithMetadata("m")); !errors.Is(err, ErrLocked) {
			t.Fatalf("TryAcquire: %v, want ErrLocked", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if got := log.since(mark, deleteName(nativeExpected[server])); got != 0 {
			t.Errorf("the quiet release of a lock with metadata sent %d native deletes, want the script", got)
		}
		if got := cl.Servers[2].Client().Exists(ctx, key, c.Keys("with-metadata").Holder).Val(); got != 0 {
			t.Errorf("the quiet release of a lock with metadata left %d of its keys on the node it won", got)
		}
	})
}

// The extend, and the schedules it was tried against and held: each
// checks what the scripts promise, on the native path.

// TestNativeExtend: a held mutex's Extend is SET IFEQ PX and a TIME on a
// server that has IFEQ, the script on 7.0, and does what the script does
// either way: renews our key; puts it back on a node that lost it (the
// SET finds nothing, the script repairs); refuses where another owner
// holds it, leaving that key alone. Auto-renewal rounds take the same
// path.
func TestNativeExtend(t *testing.T) {
	eachBuild(t, redistest.ServerNames, 30*time.Second, func(t *testing.T, ctx context.Context, server string) {
		cl, log, c := nativeNodes(t, redistest.Options{Server: server}, "")
		native := nativeExpected[server]&nativeSetIfEq != 0
		l, err := c.TryAcquire(ctx, "ext")
		if err != nil {
			t.Fatal(err)
		}
		c.bg.wait() // every acquire call has ended: a late one would write over what the test sets
		key := c.Keys("ext").Lock
		// Shorten the key's life on every node: only an extend
		// brings it back to the TTL.
		for _, s := range cl.Servers {
			if err := s.Client().PExpire(ctx, key, time.Second).Err(); err != nil {
				t.Fatal(err)
			}
		}
		// Node 0 lost the key: the extend there must repair it.
		delOn(t, ctx, cl.Servers[:1], key)
		mark := log.mark()
		if err := l.Extend(ctx); err != nil {
			t.Fatal(err)
		}
		// Extend returns at a quorum: the last node may follow.
		if native {
			log.await(t, ctx, mark, "set ifeq", 3)
			log.await(t, ctx, mark, "script extend.lua", 1)
		} else {
			log.await(t, ctx, mark, "script extend.lua", 3)
		}
		for i, s := range cl.Servers {
			if got := s.Client().Get(ctx, key).Val(); got != l.a.value {
				t.Errorf("node %d: key %q after Extend, want ours", i, got)
			}
			if ttl := s.Client().PTTL(ctx, key).Val(); ttl < 5*time.Second {
				t.Errorf("node %d: key's TTL %v after Extend, want it renewed to about 10s", i, ttl)
			}
		}
		sets, times, scripted := log.since(mark, "set ifeq"), log.since(mark, "time"), log.since(mark, "script extend.lua")
		switch {
		case native && (sets != 3 || times < 3 || scripted != 1):
			t.Errorf("Extend sent %d SET IFEQ, %d TIME, %d extend scripts; want 3 SET IFEQ with their TIME and the script once, to repair node 0", sets, times, scripted)
		case !native && (sets != 0 || scripted != 3):
			t.Errorf("Extend sent %d SET IFEQ, %d extend scripts; want the script on every node", sets, scripted)
		}

		// Another owner on two nodes: the lock is lost, and their keys
		// stay theirs.
		setOn(t, ctx, cl.Servers[:2], key, "another-owner")
		if err := l.Extend(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("Extend with another owner on 2 of 3 nodes: %v, want ErrLockLost", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		for i, s := range cl.Servers[:2] {
			if got := s.Client().Get(ctx, key).Val(); got != "another-owner" {
				t.Errorf("node %d: another owner's key is %q after our failed extend, want it kept", i, got)
			}
		}
	})
}

// TestNativeOwnerValueVariants: another owner whose value differs from
// ours only in case, by one byte more or one byte less: the native extend
// (SET IFEQ) must not renew it nor count it as ours, the native delete
// (DELEX IFEQ, DELIFEQ) must not delete it, exactly as the scripts'
// byte-wise comparison.
func TestNativeOwnerValueVariants(t *testing.T) {
	eachBuild(t, nativeBuilds, 30*time.Second, func(t *testing.T, ctx context.Context, server string) {
		cl, log, c := nativeNodes(t, redistest.Options{Server: server}, "")
		for k, variant := range []func(string) string{
			flipCase,
			func(v string) string { return v + "0" },
			func(v string) string { return v[:len(v)-1] },
			func(v string) string { return v[1:] },
		} {
			name := fmt.Sprintf("variant-%d", k)
			l, err := c.TryAcquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			other := variant(l.a.value)
			if other == l.a.value {
				t.Fatalf("variant %d is our value", k)
			}
			key := l.a.keys[0]
			setOn(t, ctx, cl.Servers, key, other)
			mark := log.mark()
			if err := l.Extend(ctx); !errors.Is(err, ErrLockLost) {
				t.Errorf("variant %d (%q for %q): Extend %v, want ErrLockLost", k, other, l.a.value, err)
			}
			if log.since(mark, "set ifeq") == 0 {
				t.Errorf("variant %d: the extend did not go native", k)
			}
			q := quietAttempt(c, name)
			q.value, q.releaseArgs[4] = l.a.value, l.a.value
			for i, n := range c.nodes {
				if deleted, err := q.deleteOn(ctx, n); deleted || err != nil {
					t.Errorf("variant %d node %d: native delete of another owner's key: %v, %v", k, i, deleted, err)
				}
			}
			for i, s := range cl.Servers {
				rdb := s.Client()
				if got := rdb.Get(ctx, key).Val(); got != other {
					t.Errorf("variant %d node %d: another owner's key is %q, want %q", k, i, got, other)
				}
				if ttl := rdb.PTTL(ctx, key).Val(); ttl < 50*time.Second {
					t.Errorf("variant %d node %d: another owner's key's TTL %v, want it untouched (~1m)", k, i, ttl)
				}
			}
		}
	})
}

// TestNativeMixedClientsNeverReviveALostLock: two clients on the same
// nodes, one on the native path and one on the scripts only (an older
// version of the library). A's keys vanish on every node (they expired
// unseen, say), B takes the lock; A's native Extend must not take it back
// and must leave B's keys; then B releases and fencing alone stops A's
// repair (the register shows B's newer token).
func TestNativeMixedClientsNeverReviveALostLock(t *testing.T) {
	eachBuild(t, nativeBuilds, 30*time.Second, func(t *testing.T, ctx context.Context, server string) {
		cl, logA, a := nativeNodes(t, redistest.Options{Server: server}, "")
		b := nativeClient(t, cl, &sentLog{}, "")
		scriptsOnly(b)
		la, err := a.TryAcquire(ctx, "mixed")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.TryAcquire(ctx, "mixed"); !errors.Is(err, ErrLocked) {
			t.Fatalf("B while A holds: %v, want ErrLocked", err)
		}
		a.bg.wait() // every acquire call has ended: a late one would write over what the test sets
		b.bg.wait()
		key := la.a.keys[0]
		delOn(t, ctx, cl.Servers, key)
		lb, err := b.TryAcquire(ctx, "mixed")
		if err != nil {
			t.Fatal(err)
		}
		mark := logA.mark()
		if err := la.Extend(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("A's Extend while B holds: %v, want ErrLockLost", err)
		}
		if logA.since(mark, "set ifeq") == 0 {
			t.Fatalf("A's extend did not go native")
		}
		if err := a.Close(); err != nil { // A's background release of what it left
			t.Fatal(err)
		}
		// B's acquire may still be on its way to the third node when
		// A's extend meets it there: A's fallback script repairs the
		// missing key, and its background release deletes it again
		// (B's late SET NX then finds A's key and is refused). B
		// keeps a quorum; no node may keep A's key.
		held := 0
		for i, s := range cl.Servers {
			switch got := s.Client().Get(ctx, key).Val(); got {
			case lb.a.value:
				held++
			case la.a.value:
				t.Errorf("node %d: A's key is back after A's lost extend", i)
			}
		}
		if held < b.quorum() {
			t.Errorf("B's key is on %d nodes after A's extend, want a quorum", held)
		}
		if err := lb.Extend(ctx); err != nil {
			t.Fatalf("B's scripted extend after A's native one: %v", err)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}

		// A second holder C (native) takes it and releases it; the
		// stale lock D of before must not come back.
		c := nativeClient(t, cl, &sentLog{}, "")
		ld, err := c.TryAcquire(ctx, "mixed-2")
		if err != nil {
			t.Fatal(err)
		}
		c.bg.wait() // every acquire call has ended: a late one would write over what the test sets
		delOn(t, ctx, cl.Servers, ld.a.keys[0])
		le, err := b.TryAcquire(ctx, "mixed-2")
		if err != nil {
			t.Fatal(err)
		}
		if err := le.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := ld.Extend(ctx); !errors.Is(err, ErrLockLost) {
			t.Fatalf("a stale native holder's Extend after a newer token: %v, want ErrLockLost", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		for i, s := range cl.Servers {
			if n := s.Client().Exists(ctx, ld.a.keys[0]).Val(); n != 0 {
				t.Errorf("node %d: the stale holder's extend revived the lock", i)
			}
		}
	})
}

// TestNativeExtendRacingRelease: Extend and Release of one lock at once,
// many times, on the native path: no key is left behind on any node once
// both returned and the client closed (the release is never overtaken by
// an extend's SET, nor by its fallback script's repair).
func TestNativeExtendRacingRelease(t *testing.T) {
	eachBuild(t, nativeBuilds, 60*time.Second, func(t *testing.T, ctx context.Context, server string) {
		cl, log, c := nativeNodes(t, redistest.Options{Server: server}, "")
		mark := log.mark()
		var keys []string
		for i := range 40 {
			l, err := c.TryAcquire(ctx, fmt.Sprintf("race-%d", i), WithAutoExtend())
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, l.a.keys[0])
			if i%2 == 0 { // node 0 lost the key: the extend's fallback repairs it
				delOn(t, ctx, cl.Servers[:1], l.a.keys[0])
			}
			// The release goes out once the extend's first write has
			// (or the extend ended without one): left to the scheduler,
			// a busy machine may run every release first, and no
			// extend would race one.
			extending, extended := make(chan struct{}), make(chan struct{})
			var once sync.Once
			onSend := func(name string) {
				if name == "set ifeq" || name == "script extend.lua" {
					once.Do(func() { close(extending) })
				}
			}
			log.sending.Store(&onSend)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); defer close(extended); _ = l.Extend(ctx) }()
			go func() {
				defer wg.Done()
				select {
				case <-extending:
				case <-extended:
				}
				_ = l.Release(ctx)
			}()
			wg.Wait()
			log.sending.Store(nil)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if log.since(mark, "set ifeq") == 0 {
			t.Fatalf("no extend went native")
		}
		for i, s := range cl.Servers {
			for _, key := range keys {
				if n := s.Client().Exists(ctx, key).Val(); n != 0 {
					t.Errorf("node %d: %s left after Extend raced Release", i, key)
				}
			}
		}
	})
}

// TestNativeSubSecondTTL: a 300ms lock renewed natively keeps its key
// renewed to its TTL, never longer, and is not lost.
func TestNativeSubSecondTTL(t *testing.T) {
	eachBuild(t, nativeBuilds, 30*time.Second, func(t *testing.T, ctx context.Context, server string) {
		cl := redistest.StartT(t, 3, redistest.Options{Server: server})
		log := &sentLog{}
		c, err := New(loggedClients(t, cl, log, ""), Options{TTL: 300 * time.Millisecond, NodeTimeout: 20 * time.Millisecond, RestartGrace: NoRestartGrace})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l, err := c.TryAcquire(ctx, "short", WithAutoExtend())
		if err != nil {
			t.Skipf("acquire on a busy machine: %v", err)
		}
		mark := log.mark()
		log.await(t, ctx, mark, "set ifeq", 3*5)
		if err := l.Err(); err != nil {
			t.Skipf("lost on a busy machine (%v)", err)
		}
		for i, s := range cl.Servers {
			if ttl := s.Client().PTTL(ctx, l.a.keys[0]).Val(); ttl > 300*time.Millisecond {
				t.Errorf("node %d: key's TTL %v above the lock's 300ms", i, ttl)
			}
		}
		_ = l.Release(ctx)
	})
}

// TestNativeExtendSamplesTheClock: the native extend's TIME feeds the
// clock guard as the script's TIME does: a node whose clock jumped
// forward since the last probe sits out from the extend that saw it (no
// probe in between), and its vote in that extend does not count.
func TestNativeExtendSamplesTheClock(t *testing.T) {
	eachBuild(t, nativeBuilds, 60*time.Second, func(t *testing.T, ctx context.Context, server string) {
		cl, log, c := nativeNodes(t, redistest.Options{Server: server, FakeTime: true}, "")
		l, err := c.TryAcquire(ctx, "clock")
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Servers[2].Kill(); err != nil { // the extend needs node 0's vote
			t.Fatal(err)
		}
		for try := 1; ; try++ {
			if err := cl.Servers[0].SetClockOffset(time.Duration(try) * 2 * time.Second); err != nil {
				t.Fatal(err)
			}
			mark := log.mark()
			err := l.Extend(ctx)
			if log.since(mark, "info") != 0 {
				// A probe ran before the extend and saw the jump: not
				// the schedule under test. The lock may be lost by now.
				if try == 3 || l.Err() != nil {
					t.Skip("a probe came first every time")
				}
				continue
			}
			if log.since(mark, "set ifeq") == 0 {
				t.Fatal("the extend did not go native")
			}
			if err == nil {
				t.Errorf("Extend counted the vote of a node whose clock jumped %v since the last probe", time.Duration(try)*2*time.Second)
			}
			info := c.Nodes(ctx)[0]
			if info.Voting || !strings.Contains(info.SitOutReason, "clock jumped") {
				t.Errorf("node 0 after the native extend saw its jump: voting %v, reason %q", info.Voting, info.SitOutReason)
			}
			return
		}
	})
}

// The renewal rounds: extendBatch, as the auto-renewal sends it, batched
// per node.

// TestNativeRenewalRound: the auto-renewal rounds, batched per node, take
// the native path too on a server with IFEQ, and keep the locks.
func TestNativeRenewalRound(t *testing.T) {
	eachBuild(t, nativeBuilds, 30*time.Second, func(t *testing.T, ctx context.Context, server string) {
		_, log, c := nativeNodes(t, redistest.Options{Server: server}, "")
		locks := acquireEach(t, ctx, c, "auto", 4, WithTTL(3*time.Second), WithAutoExtend())
		mark := log.mark()
		// Wait for the rounds to renew every lock twice (each a third
		// of the TTL apart): the log, not the clock, says when.
		if err := redistest.Await(ctx, "two renewal rounds", 20*time.Second, func(context.Context) (bool, error) {
			return log.since(mark, "set ifeq") >= 2*3*len(locks), nil
		}); err != nil {
			t.Fatal(err)
		}
		if got := log.since(mark, "script extend.lua"); got != 0 {
			t.Errorf("the renewal rounds ran %d extend scripts, want none: every key was ours", got)
		}
		for _, l := range locks {
			select {
			case <-l.Done():
				t.Fatalf("%s lost while renewed natively: %v", l.a.name, l.Err())
			default:
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestNativeRenewalWrongTypeFailsAlone: in a native renewal round, a lock
// whose key holds another type fails alone (WRONGTYPE), as in the batched
// script (TestBatchedRenewalWrongTypeFailsAlone): the other locks of the
// round keep their quorum.
func TestNativeRenewalWrongTypeFailsAlone(t *testing.T) {
	eachBuild(t, nativeBuilds, 30*time.Second, func(t *testing.T, ctx context.Context, server string) {
		cl, log, c := nativeNodes(t, redistest.Options{Server: server}, "")
		locks := acquireEach(t, ctx, c, "wrongtype", 8)
		c.bg.wait() // every acquire call has ended: a late one would write the key over the list
		listOn(t, ctx, cl.Servers, locks[3].a.keys[0])
		mark := log.mark()
		errs := renewalRound(ctx, c, locks)
		if got := log.since(mark, "set ifeq"); got != 3*len(locks) {
			t.Errorf("the round sent %d SET IFEQ, want %d: the native path", got, 3*len(locks))
		}
		for i, err := range errs {
			switch {
			case i == 3 && (err == nil || !strings.Contains(err.Error(), "WRONGTYPE")):
				t.Errorf("the lock whose key is a list: %v, want WRONGTYPE from every node", err)
			case i != 3 && err != nil:
				t.Errorf("lock %d, renewed beside a key of the wrong type: %v", i, err)
			}
		}
	})
}

// Full nodes. A node at its maxmemory under noeviction (the only policy
// the client accepts by default) refuses SET with OOM, since SET is
// flagged denyoom; the extend script's GET and PEXPIRE are not denyoom,
// and a script's first write is refused only when it is a denyoom
// command, so the script keeps renewing a held lock on a full node (until
// the client must raise the TTL register again, whose SET is refused:
// registerWindow, max(TTL, 10s) after the last raise; measured: a 3s lock
// on 3 full Redis 8.6 nodes kept extending for 10.09s). The native extend
// (SET IFEQ PX) is refused there, and must fall back to the script in the
// same call (native.go takes OOM for a reason to): else a lock the script
// path keeps through a transient full node would be lost on the native
// path. Each test runs the schedule on the script path (the control), then
// on the native path.

// TestNativeExtendOnAFullNode: acquire on 3 nodes; the 3 nodes fill up
// (maxmemory reached, noeviction); the holder extends. Script path and
// native path: extended on 3 of 3 (before the fallback on OOM, the native
// path got OOM on 3 of 3 and ErrNoQuorum, and the auto-renewal lost the
// lock at its deadline).
func TestNativeExtendOnAFullNode(t *testing.T) {
	eachBuild(t, nativeBuilds, 30*time.Second, func(t *testing.T, ctx context.Context, server string) {
		cl, log, c := nativeNodes(t, redistest.Options{Server: server}, "")
		script, err := c.TryAcquire(ctx, "full-script")
		if err != nil {
			t.Fatal(err)
		}
		native, err := c.TryAcquire(ctx, "full-native")
		if err != nil {
			t.Fatal(err)
		}
		c.bg.wait() // every acquire call has ended: a late one would write over what the test sets
		undo := fillNodes(t, ctx, cl)
		defer undo()

		// The control: the script path on the same full nodes.
		scriptsOnly(c)
		mark := log.mark()
		if err := script.Extend(ctx); err != nil {
			t.Fatalf("control: the extend script on full nodes: %v", err)
		}
		if got := log.since(mark, "set ifeq"); got != 0 {
			t.Fatalf("control sent %d SET IFEQ", got)
		}

		// The native path on the same nodes.
		nativeAgain(c)
		mark = log.mark()
		err = native.Extend(ctx)
		if log.since(mark, "set ifeq") == 0 {
			t.Fatalf("the extend did not go native")
		}
		if err != nil {
			t.Errorf("native extend on full nodes: %v; the extend script renews the same lock on the same nodes", err)
		}
	})
}

// TestNativeRenewalRoundOnAFullNode: TestNativeExtendOnAFullNode for
// extendBatch, as the auto-renewal sends it: on full nodes the batched
// extend script renews every lock of the round, and so must the native
// round (SET IFEQ, before the fallback on OOM: none).
func TestNativeRenewalRoundOnAFullNode(t *testing.T) {
	eachBuild(t, nativeBuilds, 30*time.Second, func(t *testing.T, ctx context.Context, server string) {
		cl, log, c := nativeNodes(t, redistest.Options{Server: server}, "")
		locks := acquireEach(t, ctx, c, "full-round", 4)
		c.bg.wait() // every acquire call has ended: a late one would write over what the test sets
		undo := fillNodes(t, ctx, cl)
		defer undo()
		scriptsOnly(c)
		for i, err := range renewalRound(ctx, c, locks) {
			if err != nil {
				t.Fatalf("control: lock %d in a scripted round on full nodes: %v", i, err)
			}
		}
		nativeAgain(c)
		mark := log.mark()
		errs := renewalRound(ctx, c, locks)
		if log.since(mark, "set ifeq") == 0 {
			t.Fatal("the round did not go native")
		}
		for i, err := range errs {
			if err != nil {
				t.Errorf("lock %d in a native round on full nodes: %v; the batched script renews it", i, err)
			}
		}
	})
}

// The fallbacks: a native command refused (NOPERM) or unknown (a failover
// to an older build), and a Cluster node.

// TestNativeFallsBackOnNOPERM: a user with ACLRule alone (which cannot
// name DELEX or DELIFEQ) gets NOPERM for the native delete: the release
// runs the script in the same call, deletes our key all the same, and the
// node stays on the script (no second NOPERM). With +delex or +delifeq
// added, the native delete runs.
func TestNativeFallsBackOnNOPERM(t *testing.T) {
	eachBuild(t, nativeBuilds, 30*time.Second, func(t *testing.T, ctx context.Context, server string) {
		del := deleteName(nativeExpected[server])
		if !slices.Contains(aclNativeCommands, del) {
			t.Fatalf("aclNativeCommands %v does not name %s", aclNativeCommands, del)
		}
		cl, log, c := nativeNodes(t, redistest.Options{Server: server, Users: []string{
			"locker on >pw " + ACLRule(""),
			"native on >pw " + ACLRule("") + " +" + del,
		}}, "locker")
		mark := log.mark()
		other := failQuietly(t, ctx, cl, c, "noperm")
		// The release is logged once answered; the acquire on the
		// node won may still have been in flight at the decision.
		log.await(t, ctx, mark, "script release.lua", 1)
		checkQuietCleanup(t, ctx, cl, c.Keys("noperm").Lock, other)
		if got, scripted := log.since(mark, del), log.since(mark, "script release.lua"); got != 1 || scripted != 1 {
			t.Errorf("first cleanup: %d %s refused, %d release scripts; want the node won to try %s once and run the script", got, del, scripted, del)
		}
		won := c.nodes[len(c.nodes)-1]
		if won.pipes.nativeCaps()&(nativeDelex|nativeDelifeq) != 0 {
			t.Errorf("the node won still sends %s after NOPERM", del)
		}
		// The next probes must not switch it on again: COMMAND INFO
		// shows the command, not the ACL.
		for _, n := range c.nodes {
			n.stale.Store(true)
		}
		if err := c.Verify(ctx); err != nil {
			t.Fatal(err)
		}
		mark = log.mark()
		other = failQuietly(t, ctx, cl, c, "noperm-2")
		log.await(t, ctx, mark, "script release.lua", 1)
		checkQuietCleanup(t, ctx, cl, c.Keys("noperm-2").Lock, other)
		if got := log.since(mark, del); got != 0 {
			t.Errorf("after new probes, the nodes sent %s %d times more, want none: a NOPERM is for good", del, got)
		}
		// The extend's SET IFEQ is +set, which the rule allows.
		l, err := c.TryAcquire(ctx, "noperm-extend")
		if err != nil {
			t.Fatal(err)
		}
		mark = log.mark()
		if err := l.Extend(ctx); err != nil {
			t.Fatal(err)
		}
		log.await(t, ctx, mark, "set ifeq", 3)
		if got := log.since(mark, "set ifeq"); got != 3 {
			t.Errorf("Extend as a user of ACLRule sent %d SET IFEQ, want 3", got)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}

		log2 := &sentLog{}
		allowed := nativeClient(t, cl, log2, "native")
		other = failQuietly(t, ctx, cl, allowed, "allowed")
		log2.await(t, ctx, 0, del, 1)
		checkQuietCleanup(t, ctx, cl, allowed.Keys("allowed").Lock, other)
		if got, scripted := log2.since(0, del), log2.since(0, "script release.lua"); got != 1 || scripted != 0 {
			t.Errorf("with +%s: %d native deletes, %d release scripts; want native on the node won", del, got, scripted)
		}
	})
}

// TestNativeDetectionFollowsAFailover: a node's server is replaced by one
// of another build (a failover to an older replica, then back). The probe
// after each switch finds what the new server has: the scripts on 7.0,
// the native commands again after the fail-back. And a native command the
// probe has not caught up with yet (sent to 7.0 before its probe) is
// answered "unknown command" or a syntax error: the node falls back to the
// script in the same call, which still succeeds.
func TestNativeDetectionFollowsAFailover(t *testing.T) {
	eachBuild(t, nativeBuilds, 60*time.Second, func(t *testing.T, ctx context.Context, newer string) {
		a := redistest.StartT(t, 1, redistest.Options{Server: newer}).Servers[0]
		b := redistest.StartT(t, 1, redistest.Options{Server: redistest.Redis70}).Servers[0]
		d := &switchDialer{}
		d.target.Store(&a.Addr)
		log := &sentLog{}
		rdb := redis.NewClient(&redis.Options{Addr: a.Addr, Dialer: d.dial, MaxRetries: -1})
		rdb.AddHook(log)
		t.Cleanup(func() { _ = rdb.Close() })
		c := nativeClientOf(t, []redis.UniversalClient{rdb}, false)
		n := c.nodes[0]
		failTo := func(s *redistest.Server, from *redistest.Server) {
			t.Helper()
			d.target.Store(&s.Addr)
			// Break every connection to the old server: the next call
			// dials the new one, as after a failover.
			if err := from.Client().ClientKillByFilter(ctx, "TYPE", "normal").Err(); err != nil {
				t.Fatal(err)
			}
		}
		l, err := c.TryAcquire(ctx, "fo")
		if err != nil {
			t.Fatal(err)
		}
		if got := n.pipes.nativeCaps(); got != nativeExpected[newer] {
			t.Fatalf("on %s: native %b, want %b", newer, got, nativeExpected[newer])
		}
		mark := log.mark()
		if err := l.Extend(ctx); err != nil {
			t.Fatal(err)
		}
		if log.since(mark, "set ifeq") != 1 {
			t.Fatalf("Extend on %s did not go native", newer)
		}

		failTo(b, a)
		// The first call after the failover dials 7.0 and may go out
		// on the new connection before the probe it triggers: a SET
		// IFEQ that 7.0 refuses, and the script in the same call,
		// which repairs the key 7.0 never had. Either way it holds.
		if err := l.Extend(ctx); err != nil {
			t.Fatalf("the first Extend after the failover to 7.0: %v", err)
		}
		if got := n.pipes.nativeCaps(); got != 0 {
			t.Errorf("after the failover to 7.0: native %b, want none", got)
		}
		mark = log.mark()
		if err := l.Extend(ctx); err != nil {
			t.Fatal(err)
		}
		if sets, scripted := log.since(mark, "set ifeq"), log.since(mark, "script extend.lua"); sets != 0 || scripted != 1 {
			t.Errorf("Extend after the probe of 7.0: %d SET IFEQ, %d extend scripts; want the script", sets, scripted)
		}

		// A detection not caught up yet: the node believes it has
		// the newer server's commands while 7.0 answers.
		n.pipes.native.Store(uint32(nativeExpected[newer]))
		mark = log.mark()
		if err := l.Extend(ctx); err != nil {
			t.Fatalf("Extend whose SET IFEQ met 7.0: %v, want the script's success", err)
		}
		if sets, scripted := log.since(mark, "set ifeq"), log.since(mark, "script extend.lua"); sets != 1 || scripted != 1 {
			t.Errorf("Extend meeting 7.0 with a stale detection: %d SET IFEQ, %d scripts; want one of each (the fallback)", sets, scripted)
		}
		if got := n.pipes.nativeCaps() & nativeSetIfEq; got != 0 {
			t.Errorf("SET IFEQ still on after 7.0 refused it")
		}
		// The same for a quiet release: the native delete 7.0 does
		// not know, then the script, which deletes our key and only
		// ours.
		n.pipes.native.Store(uint32(nativeExpected[newer]))
		del := deleteName(nativeExpected[newer])
		q := quietAttempt(c, "fo-quiet")
		for _, value := range []string{"another-owner", q.value} {
			mark = log.mark()
			checkQuietDelete(t, ctx, "7.0 with a stale detection", b.Client(), q, n, value)
			if got, scripted := log.since(mark, del), log.since(mark, "script release.lua"); got != 1 || scripted != 1 {
				t.Errorf("release meeting 7.0 with a stale detection: %d %s, %d scripts; want one of each (the fallback)", got, del, scripted)
			}
			n.pipes.native.Store(uint32(nativeExpected[newer]))
		}

		failTo(a, b)
		mark = log.mark()
		if err := l.Extend(ctx); err != nil {
			t.Fatal(err)
		}
		if got := n.pipes.nativeCaps(); got != nativeExpected[newer] {
			t.Errorf("after the fail-back to %s: native %b, want %b", newer, got, nativeExpected[newer])
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestNativeOnAClusterNode: a Redis Cluster node of 2 masters, on each
// build with native forms. A quiet release is the native compare-and-delete,
// routed to the lock's master by its key, and still deletes only our key;
// the extend stays the script, whose TIME is read on the lock's master (a
// keyless TIME through the ClusterClient would reach an arbitrary master).
func TestNativeOnAClusterNode(t *testing.T) {
	eachBuild(t, nativeBuilds, 60*time.Second, func(t *testing.T, ctx context.Context, server string) {
		rc := redistest.StartRedisClusterT(t, 2, 0, redistest.Options{Server: server})
		cc := rc.ClusterClient()
		t.Cleanup(func() { _ = cc.Close() })
		log := &sentLog{}
		cc.AddHook(log)
		c := nativeClientOf(t, []redis.UniversalClient{cc}, true)
		n := c.nodes[0]
		if got := n.pipes.nativeCaps(); got != nativeExpected[server] {
			t.Fatalf("cluster node: native %b, want %b (every master has them)", got, nativeExpected[server])
		}
		del := deleteName(nativeExpected[server])
		q := quietAttempt(c, "cluster-quiet")
		for _, value := range []string{"another-owner", q.value} {
			mark := log.mark()
			checkQuietDelete(t, ctx, "cluster node", cc, q, n, value)
			if got := log.since(mark, del); got != 1 {
				t.Errorf("the release sent %s %d times, want once", del, got)
			}
		}
		l, err := c.TryAcquire(ctx, "cluster-extend")
		if err != nil {
			t.Fatal(err)
		}
		mark := log.mark()
		if err := l.Extend(ctx); err != nil {
			t.Fatal(err)
		}
		if sets, scripted := log.since(mark, "set ifeq"), log.since(mark, "script extend.lua"); sets != 0 || scripted != 1 {
			t.Errorf("Extend on a cluster node: %d SET IFEQ, %d scripts; want the script", sets, scripted)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestNativeNamesNoPrimitive keeps native.go on the core's side of the
// seam: it asks the kind (kindSpec.bare), never which primitive a lock is.
func TestNativeNamesNoPrimitive(t *testing.T) {
	for _, hit := range primitiveNames(t, "native.go") {
		t.Error(hit)
	}
}
