package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// aclURLs are the nodes' URLs with user and password.
func aclURLs(cl *redistest.Cluster, user string) []string {
	urls := make([]string, len(cl.Servers))
	for i, s := range cl.Servers {
		urls[i] = strings.Replace(s.URL(), "://", "://"+user+":pw@", 1)
	}
	return urls
}

// TestACLRuleAllowsEveryOperation: a user with exactly ACLRule acquires,
// extends, releases, waits (woken by the release's pub/sub message, not by
// a retry), inspects and probes the nodes, over TLS with a client
// certificate.
func TestACLRuleAllowsEveryOperation(t *testing.T) {
	pki := redistest.NewPKIT(t, "test-ca")
	files, err := pki.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	cl := redistest.StartT(t, 3, redistest.Options{TLS: files, Persistence: true,
		Users: []string{"locker on >pw " + redlock.ACLRule("")}})
	cfg, err := redlock.LoadTLSConfig(redlock.TLSFiles{CACert: pki.CAFile, Cert: files.Client.Cert, Key: files.Client.Key})
	if err != nil {
		t.Fatal(err)
	}
	// Retries a minute apart, past the test's deadline: only the release's
	// wake-up lets the waiter in.
	opts, failed := failures(redlock.Options{TTL: time.Minute, RetryDelayMin: time.Minute, RetryDelayMax: time.Minute})
	opts.TLSConfig = cfg
	holder := fromURLs(t, aclURLs(cl, "locker"), opts)
	waiter := fromURLs(t, aclURLs(cl, "locker"), opts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	l, err := holder.TryAcquire(ctx, "acl")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := holder.Inspect(ctx, "acl")
	if err != nil || !st.Held || st.Fence != l.Token() {
		t.Fatalf("Inspect: %+v, %v; want held with fence %d", st, err, l.Token())
	}
	for _, info := range holder.Nodes(ctx) {
		if info.Err != nil || info.AppendFsync != "always" || !info.Voting {
			t.Errorf("%s: err %v, appendfsync %q, voting %v", info.Node, info.Err, info.AppendFsync, info.Voting)
		}
	}

	got := acquireReleaseAsync(ctx, waiter, "acl")
	awaitWaiting(t, ctx, failed, "acl")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter was not woken by the release: %v", err)
	}
}

// TestACLUserLackingAPermissionIsToldWhichCommandOnWhichNode: a user
// missing one permission of ACLRule gets the node's NOPERM error, in a
// *NodeError that names the node, with the command in its text.
func TestACLUserLackingAPermissionIsToldWhichCommandOnWhichNode(t *testing.T) {
	rule := redlock.ACLRule("")
	cl := redistest.StartT(t, 3, redistest.Options{Users: []string{
		"no-info on >pw " + rule + " -info",
		"no-set on >pw " + rule + " -set",
		"no-pexpire on >pw " + rule + " -pexpire",
		"no-publish on >pw " + rule + " -publish",
		"other-keys on >pw " + strings.ReplaceAll(rule, "~redlock:*", "~app:*"),
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cases := []struct {
		user, op string
		want     []string
	}{
		{"no-info", "acquire", []string{"NOPERM", "'info'"}},
		{"no-set", "acquire", []string{"NOPERM", "'set'"}},
		{"no-pexpire", "extend", []string{"NOPERM", "'pexpire'"}},
		{"no-publish", "release", []string{"NOPERM", "'publish'"}},
		{"other-keys", "acquire", []string{"NOPERM", "key"}},
	}
	for _, tc := range cases {
		t.Run(tc.user, func(t *testing.T) {
			c := fromURLs(t, aclURLs(cl, tc.user), redlock.Options{})
			name := "acl-" + tc.user
			var err error
			var opts []redlock.LockOption
			if tc.op == "extend" {
				// With metadata the extend is the script on every server:
				// a plain mutex's is SET IFEQ where the server has it,
				// which calls no pexpire.
				opts = append(opts, redlock.WithMetadata("m"))
			}
			l, aerr := c.TryAcquire(ctx, name, opts...)
			switch {
			case tc.op == "acquire":
				err = aerr
			case aerr != nil:
				t.Fatalf("acquire: %v", aerr)
			case tc.op == "extend":
				err = l.Extend(ctx)
			default:
				err = l.Release(ctx)
			}
			if err == nil {
				t.Fatalf("%s succeeded", tc.op)
			}
			t.Logf("%s: %v", tc.op, err)
			var nodeErr *redlock.NodeError
			var redisErr redis.Error
			if !errors.As(err, &nodeErr) || !errors.As(err, &redisErr) {
				t.Fatalf("%v: want a *NodeError around the node's error", err)
			}
			// Nodes that fail for one reason are named together: "3 nodes (a, b, c): ...".
			if !strings.Contains(err.Error(), nodeErr.Node) || !strings.Contains(strings.Join(cl.Addrs(), " "), nodeErr.Node) {
				t.Errorf("%q does not name the node (%s)", err, nodeErr.Node)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
		})
	}
}

// TestACLUserWithoutSubscribeIsWarnedAndStillGetsTheLock: the wake-ups
// are an optimisation: without subscribe a waiter gets the lock by its
// retries, and the log says which command was refused on which node.
func TestACLUserWithoutSubscribeIsWarnedAndStillGetsTheLock(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{Users: []string{"no-subscribe on >pw " + redlock.ACLRule("") + " -subscribe"}})
	var log syncBuffer
	opts := redlock.Options{TTL: time.Second, Logger: slog.New(slog.NewTextHandler(&log, nil))}
	c := fromURLs(t, aclURLs(cl, "no-subscribe"), opts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.TryAcquire(ctx, "acl-wait"); err != nil {
		t.Fatal(err)
	}
	// Not released: the waiter gets it when it expires, by a retry.
	l, err := c.Acquire(ctx, "acl-wait")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	got := log.String()
	t.Logf("log: %s", got)
	for _, w := range []string{"cannot listen for releases", cl.Servers[0].Addr, "NOPERM", "'subscribe'"} {
		if !strings.Contains(got, w) {
			t.Errorf("log does not say %q:\n%s", w, got)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestACLUserWithoutScriptLoadStillLocks: SCRIPT LOAD only spares the
// scripts' source on every call; a user without it locks all the same (by
// EVAL, until a probe of some node learned the SHAs).
func TestACLUserWithoutScriptLoadStillLocks(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{Users: []string{"no-load on >pw " + redlock.ACLRule("") + " -script|load"}})
	c := fromURLs(t, aclURLs(cl, "no-load"), redlock.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	takeExtendRelease(t, ctx, c, "acl-no-load")
}

// TestDocsShowTheACLRule: the rule in the operations guide is the one the
// code needs.
func TestDocsShowTheACLRule(t *testing.T) {
	guide, err := os.ReadFile("docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(guide), redlock.ACLRule("")) {
		t.Errorf("docs/OPERATIONS.md does not show the ACL rule:\n%s", redlock.ACLRule(""))
	}
}

// TestACLRuleAllowsEveryPrimitive: the same rule serves the semaphore, both
// sides of the read-write lock, the fair lock and its queue view, a
// multi-lock and Inspect: their scripts call commands the mutex's do not
// (sorted sets, hashes), and Redis checks those against the user too.
func TestACLRuleAllowsEveryPrimitive(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{Persistence: true,
		Users: []string{"locker on >pw " + redlock.ACLRule("")}})
	c := fromURLs(t, aclURLs(cl, "locker"), redlock.Options{TTL: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	release := func(what string, l *redlock.Lock, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := l.Extend(ctx); err != nil {
			t.Fatalf("%s: extend: %v", what, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("%s: release: %v", what, err)
		}
	}
	sem, err := c.Semaphore("acl-sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("semaphore: %v", err)
	}
	release("semaphore", p.Lock, nil)
	rw := c.RWLock("acl-rw")
	r, err := rw.TryRLock(ctx)
	release("read lock", r, err)
	w, err := rw.TryLock(ctx)
	release("write lock", w, err)
	f, err := c.TryAcquire(ctx, "acl-fair", redlock.WithFairness())
	release("fair lock", f, err)
	if _, err := c.Queue(ctx, "acl-fair"); err != nil {
		t.Fatalf("fair queue: %v", err)
	}
	m, err := c.TryAcquireMulti(ctx, []string{"acl-a", "acl-b"})
	if err != nil {
		t.Fatalf("multi-lock: %v", err)
	}
	if err := m.Extend(ctx); err != nil {
		t.Fatalf("multi-lock: extend: %v", err)
	}
	if err := m.Release(ctx); err != nil {
		t.Fatalf("multi-lock: release: %v", err)
	}
}
