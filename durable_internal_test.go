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

// withWait appends the WAIT (or WAITAOF) that asks need acknowledgements,
// and its judge fails the votes, not the releases, when the answer is
// short.
func TestWithWaitJudgesTheVotesByTheAcknowledgements(t *testing.T) {
	ctx := context.Background()
	vote := func() redis.Cmder { return redis.NewIntSliceCmd(ctx, acquireScript.args([]string{"k"}, 1)...) }
	release := func() redis.Cmder { return redis.NewIntSliceCmd(ctx, releaseScript.args([]string{"k"}, 1)...) }
	for _, tc := range []struct {
		what    string
		waitAOF bool
		answer  func(wait redis.Cmder)
		durable bool
	}{
		{"WAIT reached every replica", false, func(w redis.Cmder) { w.(*redis.IntCmd).SetVal(2) }, true},
		{"WAIT came back short", false, func(w redis.Cmder) { w.(*redis.IntCmd).SetVal(1) }, false},
		{"WAIT failed", false, func(w redis.Cmder) { w.SetErr(errors.New("NOPERM")) }, false},
		{"WAITAOF: local and replicas fsynced", true, func(w redis.Cmder) { w.(*redis.IntSliceCmd).SetVal([]int64{1, 2}) }, true},
		{"WAITAOF: a replica short", true, func(w redis.Cmder) { w.(*redis.IntSliceCmd).SetVal([]int64{1, 1}) }, false},
		{"WAITAOF: no local fsync", true, func(w redis.Cmder) { w.(*redis.IntSliceCmd).SetVal([]int64{0, 2}) }, false},
	} {
		cmds := []redis.Cmder{vote(), release(), vote()}
		sent, judge := withWait(ctx, cmds, 2, tc.waitAOF)
		if len(sent) != len(cmds)+1 {
			t.Fatalf("%s: %d commands sent for %d calls, want one WAIT after them", tc.what, len(sent), len(cmds))
		}
		wait := sent[len(sent)-1]
		wantName := map[bool]string{false: "wait", true: "waitaof"}[tc.waitAOF]
		if args := wait.Args(); wait.Name() != wantName || args[len(args)-2] != 2 || args[len(args)-1].(int64) < 1 {
			t.Fatalf("%s: sent %v, want %s asking 2 replicas with a timeout of at least 1ms", tc.what, args, wantName)
		}
		tc.answer(wait)
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
	// No vote, or no replica: nothing to wait for.
	for _, tc := range []struct {
		cmds []redis.Cmder
		need int
	}{{[]redis.Cmder{release()}, 2}, {[]redis.Cmder{vote()}, 0}} {
		if sent, _ := withWait(ctx, tc.cmds, tc.need, false); len(sent) != len(tc.cmds) {
			t.Errorf("need %d, %v: a WAIT was added", tc.need, tc.cmds)
		}
	}
}

// The WAIT's timeout is never 0 (WAIT 0 blocks for ever) and leaves most
// of the time before the deadline for its answer.
func TestWaitTimeoutStaysWithinTheDeadline(t *testing.T) {
	if got := waitTimeout(context.Background()); got != (DefaultNodeTimeout / 3).Milliseconds() {
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
