package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// WAITAOF is used only where COMMAND INFO describes it (7.2+); a server
// that does not know it answers [nil]. Redis here is 7.0, so the decision
// is tested on replies as the servers give them.
func TestWaitAOFIsDetectedNotAssumed(t *testing.T) {
	for _, tc := range []struct {
		what  string
		reply any
		want  bool
	}{
		{"7.0: unknown command", []any{nil}, false},
		{"7.2: described", []any{[]any{"waitaof", int64(4), []any{"noscript"}, int64(0), int64(0), int64(0)}}, true},
		{"no reply (COMMAND refused)", nil, false},
		{"empty", []any{}, false},
	} {
		if got := hasCommand(tc.reply); got != tc.want {
			t.Errorf("%s: hasCommand(%v) = %v, want %v", tc.what, tc.reply, got, tc.want)
		}
	}
}

// withWait appends the WAIT (or WAITAOF) that asks need acknowledgements
// and the read of the master's replicas, and its judge fails the votes,
// not the releases, when the answer is short or the master lists more
// replicas than the WAIT asked for.
func TestWithWaitJudgesTheVotesByTheAcknowledgements(t *testing.T) {
	ctx := context.Background()
	vote := func() redis.Cmder { return redis.NewIntSliceCmd(ctx, acquireScript.args([]string{"k"}, 1)...) }
	release := func() redis.Cmder { return redis.NewIntSliceCmd(ctx, releaseScript.args([]string{"k"}, 1)...) }
	replicas := func(n string) func(redis.Cmder) {
		return func(c redis.Cmder) {
			c.(*redis.StringCmd).SetVal("# Replication\r\nrole:master\r\nconnected_slaves:" + n + "\r\n")
		}
	}
	for _, tc := range []struct {
		what    string
		waitAOF bool
		answer  func(wait redis.Cmder)
		listing func(info redis.Cmder)
		durable bool
	}{
		{"WAIT reached every replica", false, func(w redis.Cmder) { w.(*redis.IntCmd).SetVal(2) }, replicas("2"), true},
		{"WAIT came back short", false, func(w redis.Cmder) { w.(*redis.IntCmd).SetVal(1) }, replicas("2"), false},
		{"WAIT failed", false, func(w redis.Cmder) { w.SetErr(errors.New("NOPERM")) }, replicas("2"), false},
		{"a replica more than the WAIT asked for", false, func(w redis.Cmder) { w.(*redis.IntCmd).SetVal(2) }, replicas("3"), false},
		{"the replicas could not be read", false, func(w redis.Cmder) { w.(*redis.IntCmd).SetVal(2) }, func(c redis.Cmder) { c.SetErr(errors.New("NOPERM")) }, false},
		{"WAITAOF: local and replicas fsynced", true, func(w redis.Cmder) { w.(*redis.IntSliceCmd).SetVal([]int64{1, 2}) }, replicas("2"), true},
		{"WAITAOF: a replica short", true, func(w redis.Cmder) { w.(*redis.IntSliceCmd).SetVal([]int64{1, 1}) }, replicas("2"), false},
		{"WAITAOF: no local fsync", true, func(w redis.Cmder) { w.(*redis.IntSliceCmd).SetVal([]int64{0, 2}) }, replicas("2"), false},
	} {
		cmds := []redis.Cmder{vote(), release(), vote()}
		sent, judge := withWait(ctx, cmds, masterReplicas{need: 2, waitAOF: tc.waitAOF})
		if len(sent) != len(cmds)+2 {
			t.Fatalf("%s: %d commands sent for %d calls, want one WAIT and one INFO after them", tc.what, len(sent), len(cmds))
		}
		wait, info := sent[len(cmds)], sent[len(cmds)+1]
		wantName := map[bool]string{false: "wait", true: "waitaof"}[tc.waitAOF]
		if args := wait.Args(); wait.Name() != wantName || args[len(args)-2] != 2 || args[len(args)-1].(int64) < 1 {
			t.Fatalf("%s: sent %v, want %s asking 2 replicas with a timeout of at least 1ms", tc.what, args, wantName)
		}
		if info.Name() != "info" {
			t.Fatalf("%s: sent %v after the WAIT, want INFO replication", tc.what, info.Args())
		}
		tc.answer(wait)
		tc.listing(info)
		judge()
		for i, cmd := range cmds {
			isRelease := i == 1
			switch err := cmd.Err(); {
			case isRelease && err != nil:
				t.Errorf("%s: the release was judged: %v", tc.what, err)
			case !isRelease && tc.durable && err != nil:
				t.Errorf("%s: vote %d: %v", tc.what, i, err)
			case !isRelease && !tc.durable && !errors.Is(err, ErrVoteNotDurable):
				t.Errorf("%s: vote %d: want ErrVoteNotDurable, got %v", tc.what, i, err)
			}
		}
	}
	// No vote: nothing to wait for, nothing to read.
	if sent, _ := withWait(ctx, []redis.Cmder{release()}, masterReplicas{need: 2}); len(sent) != 1 {
		t.Errorf("a release alone: %d commands sent, want it alone", len(sent))
	}
	// No replica known: no WAIT, but the replicas are read, and one
	// listed now makes the vote fail.
	for _, listed := range []string{"0", "1"} {
		cmds := []redis.Cmder{vote()}
		sent, judge := withWait(ctx, cmds, masterReplicas{need: 0})
		if len(sent) != 2 || sent[1].Name() != "info" {
			t.Fatalf("need 0: sent %d commands, want the vote and INFO", len(sent))
		}
		replicas(listed)(sent[1])
		judge()
		if err := cmds[0].Err(); (listed == "0") != (err == nil) || (err != nil && !errors.Is(err, ErrVoteNotDurable)) {
			t.Errorf("need 0, %s listed: the vote's error is %v", listed, err)
		}
	}
	// On a Cluster's master, CLUSTER NODES lists the replicas whose link
	// is down too.
	cmds := []redis.Cmder{vote()}
	sent, judge := withWait(ctx, cmds, masterReplicas{need: 0, cluster: true})
	if len(sent) != 3 || sent[2].Name() != "cluster" {
		t.Fatalf("a Cluster's master: sent %d commands, want the vote, INFO and CLUSTER NODES", len(sent))
	}
	replicas("0")(sent[1])
	sent[2].(*redis.StringCmd).SetVal("m1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-16383\n" +
		"r1 127.0.0.1:7001@17001 slave m1 0 0 1 disconnected\n")
	if judge(); !errors.Is(cmds[0].Err(), ErrVoteNotDurable) {
		t.Errorf("a replica listed in CLUSTER NODES with its link down: the vote's error is %v", cmds[0].Err())
	}
}

// The WAIT's timeout is never 0 (WAIT 0 blocks for ever) and leaves most
// of the time before the deadline for its answer.
func TestWaitTimeoutStaysWithinTheDeadline(t *testing.T) {
	if got := waitTimeout(context.Background()); got != (defaultNodeTimeout / 3).Milliseconds() {
		t.Errorf("no deadline: %dms", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if got := waitTimeout(ctx); got < 1 || got > 100 {
		t.Errorf("300ms left: %dms, want at most a third", got)
	}
	past, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	if got := waitTimeout(past); got != 1 {
		t.Errorf("deadline passed: %dms, want 1 (never 0)", got)
	}
}

// With FsyncedVotes every vote is followed by a WAITAOF 1 whatever the
// last probe saw of the master (its AOF off, no WAITAOF, nothing yet), and
// its answer alone decides: confirmed, the vote counts; the master's own
// "appendonly is disabled" (or "unknown command", Redis before 7.2) where
// the probe saw the same, it counts unconfirmed; anything else fails it.
// Every vote without a confirmed fsync moves the node's unconfirmed count,
// and an answer the probe did not expect makes the node probed again.
func TestFsyncedVotesWaitForWAITAOFWhateverTheProbeSaw(t *testing.T) {
	ctx := context.Background()
	vote := func() redis.Cmder { return redis.NewIntSliceCmd(ctx, acquireScript.args([]string{"k"}, 1)...) }
	aofOff := serverError("ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.")
	unknown := serverError("ERR unknown command 'waitaof', with args beginning with: '1' '0' '10' ")
	noPerm := serverError("NOPERM User u has no permissions to run the 'waitaof' command")
	for _, tc := range []struct {
		what        string
		view        aofView
		answer      func(redis.Cmder)
		counts      bool
		unconfirmed bool
		relearn     bool
	}{
		{"confirmed", 0, func(w redis.Cmder) { w.(*redis.IntSliceCmd).SetVal([]int64{1, 0}) }, true, false, false},
		{"confirmed where the probe saw the AOF off", aofSeenOff, func(w redis.Cmder) { w.(*redis.IntSliceCmd).SetVal([]int64{1, 0}) }, true, false, false},
		{"confirmed where the probe saw no WAITAOF", waitAOFSeenMissing, func(w redis.Cmder) { w.(*redis.IntSliceCmd).SetVal([]int64{1, 0}) }, true, false, false},
		{"numlocal 0", 0, func(w redis.Cmder) { w.(*redis.IntSliceCmd).SetVal([]int64{0, 0}) }, false, true, true},
		{"numlocal 0 where the probe saw the AOF off", aofSeenOff, func(w redis.Cmder) { w.(*redis.IntSliceCmd).SetVal([]int64{0, 0}) }, false, true, true},
		{"AOF off, as the probe saw", aofSeenOff, func(w redis.Cmder) { w.SetErr(aofOff) }, true, true, false},
		{"AOF off since the probe", 0, func(w redis.Cmder) { w.SetErr(aofOff) }, false, true, true},
		{"no WAITAOF, as the probe saw", waitAOFSeenMissing | aofSeenOff, func(w redis.Cmder) { w.SetErr(unknown) }, true, true, false},
		{"no WAITAOF, where the probe saw one", 0, func(w redis.Cmder) { w.SetErr(unknown) }, false, true, true},
		{"NOPERM", aofSeenOff | waitAOFSeenMissing, func(w redis.Cmder) { w.SetErr(noPerm) }, false, true, true},
		{"no answer", aofSeenOff, func(w redis.Cmder) { w.SetErr(errors.New("i/o timeout")) }, false, true, true},
	} {
		for _, need := range []int{-1, 0} { // -1: FsyncedVotes alone
			m := masterReplicas{fsyncRequired: true, fsyncOnly: need < 0, view: tc.view}
			cmds := []redis.Cmder{vote(), vote()}
			sent, judge := withWait(ctx, cmds, m)
			wait := sent[1+len(cmds)]
			if args := wait.Args(); wait.Name() != "waitaof" || args[1] != 1 || args[2] != 0 {
				t.Fatalf("%s: sent %v after the votes, want WAITAOF 1 0", tc.what, args)
			}
			answerPersistence(t, sent[0], sent[2+len(cmds)], "3", "3")
			if need == 0 {
				sent[3+len(cmds)].(*redis.StringCmd).SetVal("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n")
			}
			tc.answer(wait)
			w := judge()
			for i, cmd := range cmds {
				if err := cmd.Err(); tc.counts != (err == nil) || err != nil && !errors.Is(err, ErrVoteNotDurable) {
					t.Errorf("%s (need %d): vote %d: %v, want counted %v", tc.what, need, i, err, tc.counts)
				}
			}
			if (w.unconfirmed == len(cmds)) != tc.unconfirmed || (w.unconfirmed != 0 && w.unconfirmed != len(cmds)) {
				t.Errorf("%s (need %d): %d votes unconfirmed of %d, want all: %v", tc.what, need, w.unconfirmed, len(cmds), tc.unconfirmed)
			}
			if w.relearn != tc.relearn {
				t.Errorf("%s (need %d): probe again %v, want %v", tc.what, need, w.relearn, tc.relearn)
			}
		}
	}
	// With replicas to wait for on a master whose AOF was off at the
	// probe: a WAIT for them, and a WAITAOF 1 0 all the same.
	cmds := []redis.Cmder{vote()}
	sent, judge := withWait(ctx, cmds, masterReplicas{fsyncRequired: true, need: 1, view: aofSeenOff})
	if len(sent) != 6 || sent[2].Name() != "wait" || sent[3].Name() != "waitaof" || sent[3].Args()[2] != 0 {
		t.Fatalf("replicas and the AOF off at the probe: sent %v, want INFO, the vote, WAIT, WAITAOF 1 0, INFO and INFO", sent)
	}
	answerPersistence(t, sent[0], sent[4], "0", "0")
	sent[2].(*redis.IntCmd).SetVal(1)
	sent[3].SetErr(aofOff)
	sent[5].(*redis.StringCmd).SetVal("# Replication\r\nrole:master\r\nconnected_slaves:1\r\n")
	if w := judge(); cmds[0].Err() != nil || w.unconfirmed != 1 {
		t.Errorf("replicas acknowledged, AOF off as the probe saw: %v, %d unconfirmed; want counted, unconfirmed", cmds[0].Err(), w.unconfirmed)
	}
	// One WAITAOF asking for the replicas too (the probe saw the AOF on):
	// its failure leaves the replicas unconfirmed, so the vote fails.
	cmds = []redis.Cmder{vote()}
	sent, judge = withWait(ctx, cmds, masterReplicas{fsyncRequired: true, need: 1, waitAOF: true, view: aofSeenOff})
	if len(sent) != 5 || sent[2].Name() != "waitaof" || sent[2].Args()[2] != 1 {
		t.Fatalf("replicas and the AOF on at the probe: sent %v, want INFO, the vote, WAITAOF 1 1, INFO and INFO", sent)
	}
	answerPersistence(t, sent[0], sent[3], "0", "0")
	sent[2].SetErr(aofOff)
	sent[4].(*redis.StringCmd).SetVal("# Replication\r\nrole:master\r\nconnected_slaves:1\r\n")
	if judge(); !errors.Is(cmds[0].Err(), ErrVoteNotDurable) {
		t.Errorf("WAITAOF 1 1 refused: the vote's error is %v, want ErrVoteNotDurable", cmds[0].Err())
	}
}

// answerPersistence answers the INFO persistence that withWait sends
// before the votes and after their WAITAOF, with aof_rewrites at each.
func answerPersistence(t *testing.T, before, after redis.Cmder, rewrites, then string) {
	t.Helper()
	for i, c := range []redis.Cmder{before, after} {
		if args := c.Args(); c.Name() != "info" || len(args) != 3 || args[1] != "persistence" || args[2] != "stats" {
			t.Fatalf("sent %v where INFO persistence stats belongs (%d)", args, i)
		}
	}
	before.(*redis.StringCmd).SetVal(persistenceInfo(rewrites, "0", "ok"))
	after.(*redis.StringCmd).SetVal(persistenceInfo(then, "0", "ok"))
}

// persistenceInfo is an INFO persistence stats answer of an AOF on, as
// Redis 8.6 gives it, with the rewrite fields given and 1000 commands
// processed.
func persistenceInfo(rewrites, inProgress, status string) string {
	return persistenceStatsInfo(rewrites, inProgress, status, "1000")
}

// persistenceStatsInfo is persistenceInfo with total_commands_processed
// given.
func persistenceStatsInfo(rewrites, inProgress, status, commands string) string {
	return "# Persistence\r\nloading:0\r\naof_enabled:1\r\naof_rewrite_in_progress:" + inProgress +
		"\r\naof_rewrite_scheduled:0\r\naof_last_bgrewrite_status:" + status +
		"\r\naof_rewrites:" + rewrites + "\r\naof_rewrites_consecutive_failures:0\r\naof_pending_bio_fsync:0\r\n" +
		"\r\n# Stats\r\ntotal_connections_received:12\r\ntotal_commands_processed:" + commands + "\r\n"
}

// A WAITAOF's confirmation counts only when the master's INFO persistence,
// read on the same connection before the votes and after the WAITAOF's
// answer, shows no AOF rewrite started in between: at a rewrite's start
// Redis 8.x may confirm before the old AOF file's fsync
// (TestBreak3WAITAOFConfirmsBeforeTheOldFileFsyncAtARewriteStart). Such a
// vote fails, unconfirmed, and the node is probed again; so does one whose
// INFO cannot be read. A rewrite running at either read fails them too: it
// may have ended and another started, hidden by a CONFIG RESETSTAT
// (TestBreak4RewriteSwapHiddenByResetStat), and so does a reset seen in
// total_commands_processed.
func TestFsyncedVotesFailWhenARewriteStartedBeforeTheConfirmation(t *testing.T) {
	ctx := context.Background()
	vote := func() redis.Cmder { return redis.NewIntSliceCmd(ctx, acquireScript.args([]string{"k"}, 1)...) }
	type info struct{ rewrites, inProgress, status, commands string }
	for _, tc := range []struct {
		what          string
		before, after info
		unreadable    bool
		counts        bool
	}{
		{"no rewrite", info{"4", "0", "ok", "1000"}, info{"4", "0", "ok", "1000"}, false, true},
		{"a rewrite running all along", info{"4", "1", "ok", "1000"}, info{"4", "1", "ok", "1000"}, false, false},
		{"a rewrite running at the first read, ended, CONFIG RESETSTAT, another started", info{"1", "1", "ok", "1000"}, info{"1", "1", "ok", "1000"}, false, false},
		{"a rewrite started and ended, CONFIG RESETSTAT", info{"0", "0", "ok", "1000"}, info{"0", "0", "ok", "40"}, false, false},
		{"commands processed in between", info{"4", "0", "ok", "1000"}, info{"4", "0", "ok", "1003"}, false, true},
		{"a rewrite started and running", info{"4", "0", "ok", "1000"}, info{"5", "1", "ok", "1000"}, false, false},
		{"a rewrite started and ended", info{"4", "0", "ok", "1000"}, info{"5", "0", "ok", "1000"}, false, false},
		{"a rewrite whose fork failed after the files were switched", info{"4", "0", "ok", "1000"}, info{"5", "0", "err", "1000"}, false, false},
		{"a rewrite ended and another started", info{"4", "1", "ok", "1000"}, info{"5", "1", "ok", "1000"}, false, false},
		{"CONFIG RESETSTAT, then a rewrite started", info{"1", "0", "ok", "1000"}, info{"1", "1", "ok", "1000"}, false, false},
		{"CONFIG RESETSTAT alone", info{"4", "0", "ok", "1000"}, info{"0", "0", "ok", "1000"}, false, false},
		{"a failed rewrite's retry failed too", info{"4", "0", "err", "1000"}, info{"4", "0", "ok", "1000"}, false, false},
		{"INFO persistence refused", info{"4", "0", "ok", "1000"}, info{"4", "0", "ok", "1000"}, true, false},
	} {
		for _, need := range []int{-1, 0} { // -1: FsyncedVotes alone
			cmds := []redis.Cmder{vote(), vote()}
			sent, judge := withWait(ctx, cmds, masterReplicas{fsyncRequired: true, fsyncOnly: need < 0})
			before, after := sent[0], sent[2+len(cmds)]
			answerPersistence(t, before, after, "0", "0")
			before.(*redis.StringCmd).SetVal(persistenceStatsInfo(tc.before.rewrites, tc.before.inProgress, tc.before.status, tc.before.commands))
			after.(*redis.StringCmd).SetVal(persistenceStatsInfo(tc.after.rewrites, tc.after.inProgress, tc.after.status, tc.after.commands))
			if tc.unreadable {
				after.SetErr(serverError("NOPERM User u has no permissions to run the 'info' command"))
			}
			sent[1+len(cmds)].(*redis.IntSliceCmd).SetVal([]int64{1, 0})
			if need == 0 {
				sent[3+len(cmds)].(*redis.StringCmd).SetVal("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n")
			}
			w := judge()
			for i, cmd := range cmds {
				if err := cmd.Err(); tc.counts != (err == nil) || err != nil && !errors.Is(err, ErrVoteNotDurable) {
					t.Errorf("%s (need %d): vote %d: %v, want counted %v", tc.what, need, i, err, tc.counts)
				}
			}
			if want := map[bool]int{true: 0, false: len(cmds)}[tc.counts]; w.unconfirmed != want || w.relearn != !tc.counts {
				t.Errorf("%s (need %d): %d unconfirmed, probe again %v; want %d, %v", tc.what, need, w.unconfirmed, w.relearn, want, !tc.counts)
			}
		}
	}
	// Without FsyncedVotes nothing is read: the cost is the option's.
	cmds := []redis.Cmder{vote()}
	sent, _ := withWait(ctx, cmds, masterReplicas{need: 1, waitAOF: true})
	for _, c := range sent {
		if c.Name() == "info" && len(c.Args()) > 1 && c.Args()[1] == "persistence" {
			t.Fatalf("DurableVotes alone: sent %v, want no INFO persistence", sent)
		}
	}
}

// serverError is an error as the server answers it (a redis.Error).
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}
