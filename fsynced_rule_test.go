package redlock_test

// The rule of FsyncedVotes as the design fix states it (docs/PROTOCOL.md
// §13): every vote on every master waits for a WAITAOF, whatever the
// client's last probe saw; a vote counts without a confirmed fsync only
// where the master itself answers that its AOF is off (or that it has no
// WAITAOF) as that probe saw too; any other answer fails the vote. The
// break2 tests (break2_fsynced_test.go) hold it to the schedules the second
// review found; these hold it to the two answers that decide.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// aclServer is the build for a test of ACL rules naming WAITAOF: Redis
// 7.0 refuses a rule that names a command it does not have.
func aclServer() string {
	if s := redistest.SelectedServer(); s == redistest.Redis86 || s == redistest.Valkey91 {
		return s
	}
	return redistest.Redis86
}

// An ACL user without +waitaof (and without command|info, so that its
// probe cannot tell whether the server has WAITAOF) gets NOPERM for every
// WAITAOF: its votes must not count. Another client of the nodes, whose
// user has the full rule, counts the everysec Redis 8.6 masters as
// persistent and excuses their restart, relying on every vote counted
// there being fsynced; a vote counted behind a NOPERM was not. Before the
// fix X sent no WAITAOF at all (its probe saw none) and took the lock; the
// power loss that turns that into a second holder is
// TestBreak2ClientWithoutCommandInfo's.
//
// Run: REDLOCK_TEST_SERVER=redis-8.6 go test -race -count=1 -run TestFsyncedVotesRefusedWithoutWaitAOFPermission .
func TestFsyncedVotesRefusedWithoutWaitAOFPermission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	full := redlock.ACLRule("") + " +waitaof +incr"
	cl := redistest.StartT(t, 3, redistest.Options{Server: aclServer(), Args: everysec,
		Users: []string{"full on >pw " + full, "nowait on >pw " + full + " -waitaof -command|info"}})
	t.Logf("server: %s", cl.Servers[0].Build())
	opts := fsyncedOptions()
	opts.RestartGrace = redlock.NoRestartGrace // the fresh nodes' grace is not what the test judges
	y := fromURLs(t, aclURLs(cl, "full"), opts)
	x := fromURLs(t, aclURLs(cl, "nowait"), opts)
	for i, info := range y.Nodes(ctx) {
		if info.Err != nil || !info.Voting {
			t.Fatalf("Y, node %d: %+v, want it voting", i, info)
		}
	}
	const name = "job"
	before := waitAOFCalls(ctx, t, cl.Servers)
	l, err := x.TryAcquire(ctx, name)
	t.Logf("WAITAOF calls during X's acquire: %v", diffCalls(waitAOFCalls(ctx, t, cl.Servers), before))
	if err == nil {
		_ = l.Release(ctx)
		t.Fatalf("BROKEN: X (FsyncedVotes, its ACL user without +waitaof) took %q with votes whose fsync no WAITAOF confirmed, on masters Y counts as persistent", name)
	}
	if !errors.Is(err, redlock.ErrVoteNotDurable) {
		t.Fatalf("X: %v, want ErrVoteNotDurable", err)
	}
	t.Logf("X refused: %v", err)
	// Y, with the full rule, takes it: the refusal was X's alone.
	l, err = y.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("Y: %v", err)
	}
	_ = l.Release(ctx)
}

// The AOF turned off at run time (CONFIG SET appendonly no). X's probe saw
// it on, so the master's "appendonly is disabled" is news: that vote fails
// (another client whose last probe saw the master persistent would excuse
// a restart that loses it) and the node is probed again. Once X's probe has
// seen the AOF off, the same answer counts the vote, unconfirmed: no
// client counts such a master as persistent while it looks, and X's own
// guard excuses no restart after it. A kill -9 and a restart, whose config
// file turns the AOF on again, then cost the grace, for X and for Y, which
// looked while the AOF was off. (A client that did not look cannot tell:
// docs/PROTOCOL.md §11's limit for persistence changed at run time.)
//
// Run: REDLOCK_TEST_SERVER=redis-8.6 go test -race -count=1 -run TestFsyncedVotesAfterTheAOFWasTurnedOff .
func TestFsyncedVotesAfterTheAOFWasTurnedOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := redistest.StartT(t, 3, redistest.Options{Server: fsyncTrustedServer(), Args: everysec})
	t.Logf("server: %s", cl.Servers[0].Build())
	opts := fsyncedOptions()
	x, y := newClient(t, cl, opts), newClient(t, cl, opts)
	for _, c := range []*redlock.Client{y, x, x} { // X's second look asks no barrier: it is quick
		for i, info := range c.Nodes(ctx) {
			if info.Err != nil || !info.Voting {
				t.Fatalf("node %d: %+v, want it voting (persistent: everysec with WAITAOF)", i, info)
			}
		}
	}
	probed := time.Now()
	configSetOn(ctx, t, cl.Servers, "appendonly", "no")
	if age := time.Since(probed); age > 700*time.Millisecond {
		t.Skipf("X's probe is %v old at its vote, and may be read again: the machine is too loaded to pick the case", age)
	}
	l, err := x.TryAcquire(ctx, "first")
	if err == nil {
		_ = l.Release(ctx)
		t.Fatal("BROKEN: X counted votes answered 'appendonly is disabled' on masters its probe saw persistent")
	}
	if !errors.Is(err, redlock.ErrVoteNotDurable) {
		t.Fatalf("X's first acquire: %v, want ErrVoteNotDurable", err)
	}
	t.Logf("X's first acquire, on its probe from before the switch: %v", err)
	// X and Y look again: the AOF is off, the nodes vote (no restart).
	for _, c := range []*redlock.Client{x, y} {
		for i, info := range c.Nodes(ctx) {
			if info.Err != nil || !info.Voting {
				t.Fatalf("node %d with its AOF off: %+v, want it voting", i, info)
			}
		}
	}
	held, err := x.TryAcquire(ctx, "second")
	if err != nil {
		t.Fatalf("X, once it saw the AOF off: %v, want the votes counted (unconfirmed)", err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	// The operator turns the AOF on again only in the config file: a
	// kill -9 and a restart load the AOF from before the switch, which
	// lacks X's lock.
	for _, s := range cl.Servers[:2] {
		if err := s.Restart(true); err != nil {
			t.Fatal(err)
		}
	}
	for name, c := range map[string]*redlock.Client{"X": x, "Y": y} {
		l, err := c.TryAcquire(ctx, "second")
		if err == nil {
			_ = l.Release(ctx)
			t.Fatalf("BROKEN: %s took the lock X holds after a restart of nodes whose AOF was off at X's vote", name)
		}
		if !errors.Is(err, redlock.ErrNodeSittingOut) {
			t.Fatalf("%s after the restart: %v, want the restarted nodes sitting out", name, err)
		}
		t.Logf("%s refused: %v", name, err)
	}
}
