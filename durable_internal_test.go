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
