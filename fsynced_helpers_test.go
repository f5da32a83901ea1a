package redlock_test

// Steps the FsyncedVotes review and power-loss tests (break2-5,
// fsynced_powerloss_test.go) take again and again, in about the order a
// run takes them.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// untilTheScheduleIsHit runs a schedule up to three times, each run on
// fresh servers, and stops at the first run that hit it (run tells); when
// none did, it logs notHit. Whether a run hits the schedule is up to
// timing (an fsync may come first), so a run that misses is tried again.
func untilTheScheduleIsHit(t *testing.T, notHit string, run func(try int) bool) {
	t.Helper()
	for try := range 3 {
		if run(try) {
			return
		}
	}
	t.Log(notHit)
}

// startEverysecRun starts three fresh servers of server (appendonly yes,
// appendfsync everysec) for run try of a schedule, and logs their build.
func startEverysecRun(t *testing.T, server string, try int) *redistest.Cluster {
	t.Helper()
	cl := redistest.StartT(t, 3, redistest.Options{Server: server, Args: everysec})
	t.Logf("run %d, server: %s", try, cl.Servers[0].Build())
	return cl
}

// traceAOFs attaches strace to each of servers (traceAOF), one after the
// other; the traces are in the order of servers.
func traceAOFs(t *testing.T, servers []*redistest.Server) []*aofTrace {
	t.Helper()
	traces := make([]*aofTrace, len(servers))
	for i, s := range servers {
		traces[i] = traceAOF(t, s)
	}
	return traces
}

// killAll kills each of servers with SIGKILL (kill -9), one after the
// other.
func killAll(t *testing.T, servers []*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
}

// restartAll starts each of servers again on its own data, one after the
// other.
func restartAll(t *testing.T, servers []*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		if err := s.Restart(true); err != nil {
			t.Fatal(err)
		}
	}
}

// powerLossAtKill kills servers with SIGKILL, plays a power loss at that
// moment from their traces (playPowerLoss: a server whose trace shows no
// fsync after the write holding marker loses its AOF from that write on),
// and restarts them on what is left. It tells on how many servers the
// write was lost.
func powerLossAtKill(t *testing.T, servers []*redistest.Server, traces []*aofTrace, marker string) (lost int) {
	t.Helper()
	killAll(t, servers)
	lost = playPowerLoss(t, traces, marker)
	restartAll(t, servers)
	return lost
}

// wantEveryNodeVoting fails t unless c, looking now (Nodes), counts every
// node voting. failf is the failure's format; it is given the node's
// index and its NodeInfo.
func wantEveryNodeVoting(ctx context.Context, t *testing.T, c *redlock.Client, failf string) {
	t.Helper()
	for i, info := range c.Nodes(ctx) {
		if info.Err != nil || !info.Voting {
			t.Fatalf(failf, i, info)
		}
	}
}

// secondHolderRefused has Y ask for X's lock name after the power loss, by
// take (Y's TryAcquire, or its Acquire with ctx ending at X's deadline),
// and returns Y's refusal. Y taking the lock while X's validity lasts is
// the second holder the test looks for: t fails with broken, given the
// validity X had left. Y taking it only after X's validity proves nothing
// (too slow a machine to judge), and fails t too.
func secondHolderRefused(ctx context.Context, t *testing.T, take func(context.Context, string, ...redlock.LockOption) (*redlock.Lock, error), name string, held *redlock.Lock, broken func(left time.Duration) string) error {
	t.Helper()
	l, errY := take(ctx, name)
	if errY == nil {
		defer func() { _ = l.Release(context.Background()) }()
		if time.Now().Before(held.Deadline()) {
			t.Fatal(broken(time.Until(held.Deadline()).Round(time.Millisecond)))
		}
		t.Fatalf("Y took %q only after X's validity (a machine too slow to judge)", name)
	}
	return errY
}

// tryAcquireInBackground starts c's TryAcquire of name and returns at once,
// so that the test can act on the servers while the acquire waits for its
// WAITAOF; the returned func waits for the acquire's end and gives its
// result.
func tryAcquireInBackground(ctx context.Context, t *testing.T, c *redlock.Client, name string) (wait func() (*redlock.Lock, error)) {
	t.Helper()
	type result struct {
		l   *redlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.TryAcquire(ctx, name)
		got <- result{l, err}
	}()
	return func() (*redlock.Lock, error) {
		r := <-got
		return r.l, r.err
	}
}

// awaitVoteOnEach waits, polling every millisecond until ctx ends, for X's
// key on each of servers in turn: once a server has it, the vote's write
// is in its AOF file (the server writes its AOF buffer before it reads the
// next command), and the vote's WAITAOF waits for the next fsync.
func awaitVoteOnEach(ctx context.Context, t *testing.T, servers []*redistest.Server, key string) {
	t.Helper()
	for _, s := range servers {
		for s.Client().Exists(ctx, key).Val() == 0 {
			if ctx.Err() != nil {
				t.Fatalf("%s: X's vote never came", s.Addr)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// onEachServerAtOnce runs step on every one of servers, each in a
// goroutine of its own, and fails t with the first error once all are
// done.
func onEachServerAtOnce(t *testing.T, servers []*redistest.Server, step func(s *redistest.Server) error) {
	t.Helper()
	done := make(chan error, len(servers))
	for _, s := range servers {
		go func() { done <- step(s) }()
	}
	for range servers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// playPowerLossAtTheAnswer plays, on each traced server (killed), a power
// loss at the WAITAOF answer that came before the fsync of X's vote, where
// it did (replyBeforeFsync: the vote's write holds marker). It tells on
// how many servers.
func playPowerLossAtTheAnswer(t *testing.T, traces []*aofTrace, marker string) (early int) {
	t.Helper()
	for _, tr := range traces {
		if tr.replyBeforeFsync(t, marker) {
			early++
		}
	}
	return early
}

// refusedYetAnsweredEarly judges a run that plays a power loss at the
// WAITAOF answer (break3, break4) in which X's acquire failed with errX:
// since the fix the vote is refused with ErrVoteNotDurable, and any other
// error fails t. The servers are killed all the same and the traces still
// tell whether the schedule was hit: a WAITAOF answered before the fsync
// of file ("the old file's") returned, on at least 2 of the 3 servers.
func refusedYetAnsweredEarly(t *testing.T, servers []*redistest.Server, traces []*aofTrace, key string, errX error, file string) (hit bool) {
	t.Helper()
	if !errors.Is(errX, redlock.ErrVoteNotDurable) {
		t.Fatalf("X: %v, want the lock or ErrVoteNotDurable", errX)
	}
	t.Logf("X refused: %v", errX)
	killAll(t, servers)
	early := playPowerLossAtTheAnswer(t, traces, key)
	t.Logf("X's WAITAOF was answered before %s fsync returned on %d of %d servers; no vote counted", file, early, len(servers))
	return early >= 2
}

// serversHolding tells on how many of servers key is; a server that does
// not answer counts as one without it.
func serversHolding(ctx context.Context, t *testing.T, servers []*redistest.Server, key string) (n int) {
	t.Helper()
	for _, s := range servers {
		if has, err := s.Client().Exists(ctx, key).Result(); err == nil && has == 1 {
			n++
		}
	}
	return n
}
