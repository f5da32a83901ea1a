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
// Valkey 9.1 (DELIFEQ, SET IFEQ), each test on all three in one run.

// nativeExpected is what the probe must find on each build, from the
// builds' documentation: the test knows versions, the client must not.
var nativeExpected = map[string]nativeCaps{
	redistest.Redis70:  0,
	redistest.Redis86:  nativeDelex | nativeSetIfEq,
	redistest.Valkey91: nativeDelifeq | nativeSetIfEq,
}

// sentLog records the commands a client sends, by name, with the script
// a call of EVALSHA or EVAL runs: what path an operation took, as the
// client wrote it (the server's commandstats also count the commands
// scripts call, and the probes').
type sentLog struct {
	mu   sync.Mutex
	sent []string
}

func (r *sentLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *sentLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.add(cmd, err) // go-redis sets cmd's error after the hooks
		return err
	}
}

func (r *sentLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
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
	r.mu.Lock()
	r.sent = append(r.sent, name)
	r.mu.Unlock()
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

// nativeClient is a client of the servers of cl whose commands log
// records; user "" for the default user, else user with password "pw".
func nativeClient(t *testing.T, cl *redistest.Cluster, log *sentLog, user string) *Client {
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
	c, err := New(rdbs, Options{TTL: 10 * time.Second, NodeTimeout: time.Second, RestartGrace: NoRestartGrace, AllowNoFaultTolerance: len(rdbs) < 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
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

// failQuietly makes c's TryAcquire of name fail after winning on the last
// node only: another owner holds the key on every other node. The failed
// attempt's cleanup is a quiet release on every node; Close waits for it.
// It returns the other owner's value.
func failQuietly(t *testing.T, ctx context.Context, cl *redistest.Cluster, c *Client, name string) string {
	t.Helper()
	other := "another-owner-" + name
	key := c.Keys(name).Lock
	for _, s := range cl.Servers[:len(cl.Servers)-1] {
		if err := s.Client().Set(ctx, key, other, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
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

// TestNativeQuietReleaseDeletesOnlyOurKey: on every build the probe finds
// the native commands the build has (and none on 7.0), and a failed
// attempt's cleanup, which announces nothing, goes through the server's
// compare-and-delete where there is one and the release script where
// there is none. Either way it deletes our key on the node we won and
// leaves another owner's key and its TTL on the others.
func TestNativeQuietReleaseDeletesOnlyOurKey(t *testing.T) {
	for _, server := range redistest.ServerNames {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := redistest.StartT(t, 3, redistest.Options{Server: server})
			log := &sentLog{}
			c := nativeClient(t, cl, log, "")
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
}

// quietAttempt is an attempt at name whose release is quiet, as a failed
// attempt's cleanup is (attempt.abandon), for calling deleteOn directly.
func quietAttempt(c *Client, name string) *attempt {
	a := c.newAttempt(mutexKind, name, c.opts.TTL)
	a.kind.quiet(a)
	a.quieted = true
	return a
}

// TestNativeDeleteNeverTakesAnotherOwnersKey: the quiet release, native
// where the server has a compare-and-delete and the script where it has
// none, deletes the key only while it holds our value: never another
// owner's (a key ours at the acquire, taken by another since it expired),
// whose TTL it leaves too.
func TestNativeDeleteNeverTakesAnotherOwnersKey(t *testing.T) {
	for _, server := range redistest.ServerNames {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := redistest.StartT(t, 3, redistest.Options{Server: server})
			log := &sentLog{}
			c := nativeClient(t, cl, log, "")
			path := "script release.lua"
			if name := deleteName(nativeExpected[server]); name != "" {
				path = name
			}
			a := quietAttempt(c, "theirs")
			for i, n := range c.nodes {
				rdb := cl.Servers[i].Client()
				if err := rdb.Set(ctx, a.keys[0], "another-owner", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				mark := log.mark()
				deleted, err := a.deleteOn(ctx, n)
				if err != nil || deleted {
					t.Errorf("node %d: release of another owner's key: deleted %v, %v; want false, nil", i, deleted, err)
				}
				if got := rdb.Get(ctx, a.keys[0]).Val(); got != "another-owner" {
					t.Errorf("node %d: another owner's key is %q after our release, want it kept", i, got)
				}
				if ttl := rdb.PTTL(ctx, a.keys[0]).Val(); ttl <= 0 {
					t.Errorf("node %d: another owner's key lost its TTL (%v)", i, ttl)
				}
				if err := rdb.Set(ctx, a.keys[0], a.value, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				if deleted, err := a.deleteOn(ctx, n); err != nil || !deleted {
					t.Errorf("node %d: release of our key: deleted %v, %v; want true, nil", i, deleted, err)
				}
				if got := rdb.Exists(ctx, a.keys[0]).Val(); got != 0 {
					t.Errorf("node %d: our key is still there after our release", i)
				}
				if got := log.since(mark, path); got != 2 {
					t.Errorf("node %d: %d sends of %s for two releases, want 2", i, got, path)
				}
			}
		})
	}
}

// TestNativeLoudReleaseKeepsTheScript: a held lock's release wakes
// waiters, so it stays the script, which publishes only when it deleted
// (a native delete and a PUBLISH would announce a release that deleted
// nothing too). A lock with metadata keeps the script for its quiet
// release as well: two keys to delete.
func TestNativeLoudReleaseKeepsTheScript(t *testing.T) {
	for _, server := range []string{redistest.Redis86, redistest.Valkey91} {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := redistest.StartT(t, 3, redistest.Options{Server: server})
			log := &sentLog{}
			c := nativeClient(t, cl, log, "")
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
			for _, s := range cl.Servers[:2] {
				if err := s.Client().Set(ctx, key, "another-owner", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
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
}

// TestNativeExtend: a held mutex's Extend is SET IFEQ PX and a TIME on a
// server that has IFEQ, the script on 7.0, and does what the script does
// either way: renews our key; puts it back on a node that lost it (the
// SET finds nothing, the script repairs); refuses where another owner
// holds it, leaving that key alone. Auto-renewal rounds take the same
// path.
func TestNativeExtend(t *testing.T) {
	for _, server := range redistest.ServerNames {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := redistest.StartT(t, 3, redistest.Options{Server: server})
			log := &sentLog{}
			c := nativeClient(t, cl, log, "")
			native := nativeExpected[server]&nativeSetIfEq != 0
			l, err := c.TryAcquire(ctx, "ext")
			if err != nil {
				t.Fatal(err)
			}
			key := c.Keys("ext").Lock
			// Shorten the key's life on every node: only an extend
			// brings it back to the TTL.
			for _, s := range cl.Servers {
				if err := s.Client().PExpire(ctx, key, time.Second).Err(); err != nil {
					t.Fatal(err)
				}
			}
			// Node 0 lost the key: the extend there must repair it.
			if err := cl.Servers[0].Client().Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
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
			for _, s := range cl.Servers[:2] {
				if err := s.Client().Set(ctx, key, "another-owner", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
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
}

// TestNativeRenewalRound: the auto-renewal rounds, batched per node, take
// the native path too on a server with IFEQ, and keep the locks.
func TestNativeRenewalRound(t *testing.T) {
	for _, server := range []string{redistest.Redis86, redistest.Valkey91} {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := redistest.StartT(t, 3, redistest.Options{Server: server})
			log := &sentLog{}
			c := nativeClient(t, cl, log, "")
			var locks []*Lock
			for i := range 4 {
				l, err := c.TryAcquire(ctx, fmt.Sprintf("auto-%d", i), WithTTL(3*time.Second), WithAutoExtend())
				if err != nil {
					t.Fatal(err)
				}
				locks = append(locks, l)
			}
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
}

// scriptsOnly makes c's nodes take the scripts, as if their ACL refused
// every native command: for the tests of the scripts' own behaviour on
// servers that have native forms.
func scriptsOnly(c *Client) {
	for _, n := range c.nodes {
		n.pipes.nativeRefused.Store(^uint32(0))
	}
}

// TestNativeRenewalWrongTypeFailsAlone: in a native renewal round, a lock
// whose key holds another type fails alone (WRONGTYPE), as in the batched
// script: the other locks of the round keep their quorum.
func TestNativeRenewalWrongTypeFailsAlone(t *testing.T) {
	for _, server := range []string{redistest.Redis86, redistest.Valkey91} {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := redistest.StartT(t, 3, redistest.Options{Server: server})
			log := &sentLog{}
			c := nativeClient(t, cl, log, "")
			var locks []*Lock
			for i := range 8 {
				l, err := c.TryAcquire(ctx, fmt.Sprintf("wrongtype-%d", i))
				if err != nil {
					t.Fatal(err)
				}
				locks = append(locks, l)
			}
			bad := locks[3]
			for _, s := range cl.Servers {
				rdb := s.Client()
				if err := rdb.Del(ctx, bad.a.keys[0]).Err(); err != nil {
					t.Fatal(err)
				}
				if err := rdb.RPush(ctx, bad.a.keys[0], "x").Err(); err != nil {
					t.Fatal(err)
				}
			}
			mark := log.mark()
			for _, l := range locks {
				l.extendMu.Lock()
			}
			_, _, errs := c.extendBatch(ctx, locks, nil, time.Second)
			for _, l := range locks {
				l.extendMu.Unlock()
			}
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
}

// TestNativeFallsBackOnNOPERM: a user with ACLRule alone (which cannot
// name DELEX or DELIFEQ) gets NOPERM for the native delete: the release
// runs the script in the same call, deletes our key all the same, and the
// node stays on the script (no second NOPERM). With +delex or +delifeq
// added, the native delete runs.
func TestNativeFallsBackOnNOPERM(t *testing.T) {
	for _, server := range []string{redistest.Redis86, redistest.Valkey91} {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			del := deleteName(nativeExpected[server])
			if !slices.Contains(aclNativeCommands, del) {
				t.Fatalf("aclNativeCommands %v does not name %s", aclNativeCommands, del)
			}
			cl := redistest.StartT(t, 3, redistest.Options{Server: server, Users: []string{
				"locker on >pw " + ACLRule(""),
				"native on >pw " + ACLRule("") + " +" + del,
			}})
			log := &sentLog{}
			c := nativeClient(t, cl, log, "locker")
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
}

// switchDialer dials whichever server target names: a node whose server
// is replaced behind one address, as a failover does.
type switchDialer struct{ target atomic.Pointer[string] }

func (d *switchDialer) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	var nd net.Dialer
	return nd.DialContext(ctx, network, *d.target.Load())
}

// TestNativeDetectionFollowsAFailover: a node's server is replaced by one
// of another build (a failover to an older replica, then back). The probe
// after each switch finds what the new server has: the scripts on 7.0,
// the native commands again after the fail-back. And a native command the
// probe has not caught up with yet (sent to 7.0 before its probe) is
// answered "unknown command" or a syntax error: the node falls back to the
// script in the same call, which still succeeds.
func TestNativeDetectionFollowsAFailover(t *testing.T) {
	for _, newer := range []string{redistest.Redis86, redistest.Valkey91} {
		t.Run(newer, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			a := redistest.StartT(t, 1, redistest.Options{Server: newer}).Servers[0]
			b := redistest.StartT(t, 1, redistest.Options{Server: redistest.Redis70}).Servers[0]
			d := &switchDialer{}
			d.target.Store(&a.Addr)
			log := &sentLog{}
			rdb := redis.NewClient(&redis.Options{Addr: a.Addr, Dialer: d.dial, MaxRetries: -1})
			rdb.AddHook(log)
			defer rdb.Close()
			c, err := New([]redis.UniversalClient{rdb}, Options{TTL: 10 * time.Second, NodeTimeout: time.Second, RestartGrace: NoRestartGrace, AllowNoFaultTolerance: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
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
				if err := b.Client().Set(ctx, q.keys[0], value, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				mark = log.mark()
				deleted, err := q.deleteOn(ctx, n)
				if err != nil || deleted != (value == q.value) {
					t.Errorf("release of a key holding %q on 7.0: deleted %v, %v", value, deleted, err)
				}
				if value != q.value && b.Client().Get(ctx, q.keys[0]).Val() != value {
					t.Errorf("the fallback release deleted another owner's key")
				}
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
}

// TestNativeNamesNoPrimitive keeps native.go on the core's side of the
// seam: it asks the kind (kindSpec.bare), never which primitive a lock is.
func TestNativeNamesNoPrimitive(t *testing.T) {
	for _, hit := range primitiveNames(t, "native.go") {
		t.Error(hit)
	}
}

// TestNativeOnAClusterNode: a Redis Cluster node of 2 masters, on each
// build with native forms. A quiet release is the native compare-and-delete,
// routed to the lock's master by its key, and still deletes only our key;
// the extend stays the script, whose TIME is read on the lock's master (a
// keyless TIME through the ClusterClient would reach an arbitrary master).
func TestNativeOnAClusterNode(t *testing.T) {
	for _, server := range []string{redistest.Redis86, redistest.Valkey91} {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rc := redistest.StartRedisClusterT(t, 2, 0, redistest.Options{Server: server})
			cc := rc.ClusterClient()
			defer cc.Close()
			log := &sentLog{}
			cc.AddHook(log)
			c, err := New([]redis.UniversalClient{cc}, Options{TTL: 10 * time.Second, NodeTimeout: time.Second, RestartGrace: NoRestartGrace, AllowNoFaultTolerance: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.Verify(ctx); err != nil {
				t.Fatal(err)
			}
			n := c.nodes[0]
			if got := n.pipes.nativeCaps(); got != nativeExpected[server] {
				t.Fatalf("cluster node: native %b, want %b (every master has them)", got, nativeExpected[server])
			}
			del := deleteName(nativeExpected[server])
			q := quietAttempt(c, "cluster-quiet")
			for _, value := range []string{"another-owner", q.value} {
				if err := cc.Set(ctx, q.keys[0], value, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				mark := log.mark()
				deleted, err := q.deleteOn(ctx, n)
				if err != nil || deleted != (value == q.value) {
					t.Errorf("release of a key holding %q: deleted %v, %v", value, deleted, err)
				}
				if got, _ := cc.Get(ctx, q.keys[0]).Result(); value != q.value && got != value {
					t.Errorf("the native release deleted another owner's key on a cluster")
				}
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
}
