package redlock_test

// Fourth-round adversarial tests of FsyncedVotes (docs/PROTOCOL.md §13),
// written on the branch fsync-rev4 against 5a1683d.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock/redistest"
)

// rewriteStarted (durable.go) compares aof_rewrites, aof_rewrite_in_progress
// (0 -> 1 only) and aof_last_bgrewrite_status before the votes and after
// their WAITAOF. PROTOCOL §13 says a CONFIG RESETSTAT in the vote's wait
// hides "only a rewrite that also started and ended well within it", and
// tells operators to "reset the statistics of nodes that serve locks while
// no rewrite runs". Both are wrong: a rewrite A already running at the first
// INFO (aof_rewrite_in_progress:1), which ends well within the wait, a
// reset while no rewrite runs, and a rewrite B that starts and is still
// running at the second INFO read the same marks before and after
// (aof_rewrites 1, in progress 1, status ok), while B's start released the
// WAITAOF before the fsync of the file holding the votes (the file A's
// start opened: TestBreak3WAITAOFConfirmsBeforeTheOldFileFsyncAtARewriteStart).
//
// Schedule, every client with FsyncedVotes, 3 Redis 8.6 masters with
// appendonly yes, appendfsync everysec, the AOF on all along:
//  1. Y meets the nodes (persistent through WAITAOF), and stays idle.
//  2. On each server a routine rewrite A starts (BGREWRITEAOF; the child is
//     slowed with rdb-key-save-delay to about half a second). A's start
//     opens a new incremental file I and sets aof_last_fsync: the next
//     everysec fsync of I is a second away.
//  3. X acquires: its first INFO reads aof_rewrite_in_progress:1; its votes
//     go to I, and their WAITAOF 1 0 waits for I's fsync.
//  4. A ends well. With no rewrite running, the statistics are reset
//     (CONFIG RESETSTAT: aof_rewrites 0), some MB are written, and rewrite
//     B starts (BGREWRITEAOF, or auto-aof-rewrite): aof_rewrites 1.
//  5. B's start releases X's WAITAOF (numlocal 1) while I's fsync is still
//     queued or running; X's second INFO reads aof_rewrites 1, in progress
//     1, status ok, as the first did: X counts its votes.
//  6. A power loss at that answer (strace tells, per server, whether the
//     answer came before any fsync of I begun after the vote returned), the
//     servers restart on their disks, and Y, idle throughout, excuses the
//     restarts and takes X's lock within X's validity.
//
// Fixed, X's votes fail with ErrVoteNotDurable (e.g. a rewrite in progress
// at either read, or a change of aof_rewrite_in_progress's rewrite, fails
// the vote: rewrite identity, not a count) or Y is refused.
//
// Run: REDLOCK_TEST_SERVER=redis-8.6 go test -race -count=1 -run TestBreak4RewriteSwapHiddenByResetStat .
func TestBreak4RewriteSwapHiddenByResetStat(t *testing.T) {
	inTheServerMatrix(t)
	untilTheScheduleIsHit(t, "in three runs no server answered X's WAITAOF before its file's fsync: the schedule was not hit", func(try int) bool {
		return rewriteSwapHiddenByResetStat(t, try)
	})
}

func rewriteSwapHiddenByResetStat(t *testing.T, try int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cl := startEverysecRun(t, redistest.Redis86, try)
	y, x := fsyncedPair(ctx, t, cl)
	for _, s := range cl.Servers {
		rdb := s.Client()
		for i := range 20 {
			if err := rdb.Set(ctx, fmt.Sprintf("pad:%d", i), "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		n, err := rdb.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		// Rewrite A: about 500ms of child.
		if err := rdb.ConfigSet(ctx, "rdb-key-save-delay", strconv.FormatInt(500000/(n+1), 10)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	traces := traceAOFs(t, cl.Servers)
	// Step 2: A starts everywhere (the statistics reset first, so that A is
	// rewrite 1).
	for i, s := range cl.Servers {
		rdb := s.Client()
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.BgRewriteAOF(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		traces[i].aofFD, traces[i].aof = openIncr(t, s)
	}
	const name = "job"
	key := x.Keys(name).Lock
	xAcquired := tryAcquireInBackground(ctx, t, x, name)
	awaitVoteOnEach(ctx, t, cl.Servers, key)
	// Step 4, on each server at once: A ends; reset while no rewrite runs;
	// B starts.
	big := strings.Repeat("b", 1<<20)
	onEachServerAtOnce(t, cl.Servers, func(s *redistest.Server) error {
		rdb := s.Client()
		for {
			info, err := rdb.Info(ctx, "persistence").Result()
			if err != nil {
				return err
			}
			if strings.Contains(info, "aof_rewrite_in_progress:0") {
				if !strings.Contains(info, "aof_last_bgrewrite_status:ok") {
					return fmt.Errorf("%s: rewrite A did not end well:\n%s", s.Addr, info)
				}
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		pl := rdb.Pipeline()
		pl.ConfigResetStat(ctx)
		for i := range 16 {
			pl.Set(ctx, fmt.Sprintf("big:%d", i), big, 0)
		}
		pl.BgRewriteAOF(ctx)
		_, err := pl.Exec(ctx)
		return err
	})
	held, err := xAcquired()
	if err != nil {
		return refusedYetAnsweredEarly(t, cl.Servers, traces, key, err, "its file's")
	}
	defer func() { _ = held.Release(context.Background()) }()
	for _, s := range cl.Servers {
		if info, err := s.Client().Info(ctx, "persistence").Result(); err == nil {
			t.Logf("%s after X counted: %s", s.Addr, grepInfo(info, "aof_rewrites:", "aof_rewrite_in_progress:", "aof_last_bgrewrite_status:"))
		}
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	lost := playPowerLossAtTheAnswer(t, traces, key)
	restartAll(t, cl.Servers)
	kept := serversHolding(ctx, t, cl.Servers, key)
	t.Logf("X's vote was confirmed before its fsync returned on %d of 3 servers; its key is on %d after the power loss", lost, kept)
	errY := secondHolderRefused(ctx, t, y.TryAcquire, name, held, func(left time.Duration) string {
		return fmt.Sprintf("BROKEN: X's votes counted on %d servers before the fsync of the AOF file holding them returned (a rewrite running at X's first INFO ended, CONFIG RESETSTAT with no rewrite running, a new rewrite started: both INFO reads show aof_rewrites 1, aof_rewrite_in_progress 1); after a power loss at that answer Y took %q with %v of X's validity left",
			lost, name, left)
	})
	t.Logf("Y refused: %v", errY)
	return lost >= 2
}

// grepInfo keeps the lines of an INFO answer that start with one of keys.
func grepInfo(info string, keys ...string) string {
	var out []string
	for _, line := range strings.Split(info, "\r\n") {
		for _, k := range keys {
			if strings.HasPrefix(line, k) {
				out = append(out, line)
			}
		}
	}
	return strings.Join(out, " ")
}
