package redlock

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Batched script runs (the batched form of scripts.go batchSrc) are made in
// two places: the renewal scheduler's rounds (renew.go runBatched), and a
// pipe's write of the calls that queued while the previous write was in
// flight (grouper, below). Both bound a run at batchBound calls and read
// each call's answer with batchAnswers.

// batchBound bounds the calls of one batched script run, so that no run
// keeps the node from its other clients for long: on a local Redis 7.0, 100
// extends ran in at most 1.4ms (mutexes) and 1.8ms (readers, permits) by
// SLOWLOG, and the cost per lock stopped falling at about 50 a run; 100
// acquires, the heaviest calls, took 1.6ms (mutexes), 2.4-3.3ms (rw lock
// sides, permits) and 7.3ms (fair locks) in the median of 5 runs, on a
// machine at load 10 (see docs/BENCHMARKS.md). A write carries at most
// maxBatch calls in all, so a node answers it well within a node timeout.
const batchBound = 100

// splitBatch gives each of calls its answer from the reply of a batched
// run of s: err, or the run's error, when the run was not answered as a
// whole; else each call's own reply or error.
func splitBatch(s *script, cmd *redis.IntSliceCmd, err error, calls []int, vals [][]int64, errs []error) {
	batchAnswers(cmd, err, len(calls), func(j int, v []int64, err error) {
		vals[calls[j]], errs[calls[j]] = v, s.explain(err)
	})
}

// batchAnswers calls answer(j, reply, err) with the answer of each of the n
// calls of a batched run: err, or the run's error, when the run was not
// answered as a whole; else the call's own reply or error, as the node gave
// it (the reply's layout is in batchSrc). The replies share the run's
// array; they are only read.
func batchAnswers(cmd *redis.IntSliceCmd, err error, n int, answer func(j int, v []int64, err error)) {
	// A run that was not answered (its caller gave up while it was
	// written) may still be getting its reply from the pipe's writer: it
	// is not read at all then.
	var flat []int64
	if err == nil {
		err = cmd.Err()
		flat = cmd.Val()
	}
	p := 0
	for j := range n {
		if err == nil && p >= len(flat) {
			err = fmt.Errorf("redlock: batched script reply %v ends before the answer of call %d of %d", flat, j+1, n)
		}
		if err != nil {
			answer(j, nil, err)
			continue
		}
		head := flat[p]
		p++
		size := max(head, -head) // a reply's length, or an error's
		if int64(len(flat)-p) < size {
			err = fmt.Errorf("redlock: batched script reply %v ends inside the answer of call %d of %d", flat, j+1, n)
			answer(j, nil, err)
			continue
		}
		v := flat[p : p+int(size) : p+int(size)]
		p += int(size)
		if head >= 0 {
			answer(j, v, nil)
			continue
		}
		msg := make([]byte, len(v))
		for x, b := range v {
			msg[x] = byte(b)
		}
		answer(j, nil, callError(msg))
	}
}

// callError is the error one call of a batched run met on the node: an
// error reply of its own, as go-redis gives a script's (redis.Error).
type callError string

func (e callError) Error() string { return string(e) }

// RedisError marks it as the node's answer (redis.Error), not the client's.
func (callError) RedisError() {}

// grouper turns the calls of one pipe write into its commands: the calls of
// one script (on a Cluster node, of one hash slot) go as one run of the
// script's batched form, which pays the server's fixed cost of a script
// once for them all and still answers each call on its own.
//
// Grouping moves a call up to the place of its group's first call, past the
// calls queued in between. It does so only past calls that use none of its
// keys, and never past a command it cannot see into (a batched run already
// built, such as a renewal round's): the calls that share a key reach the
// node in the order they were queued, as without grouping (an acquire,
// then a release, then another owner's acquire of one key run in that
// order). Calls on distinct keys commute: the scripts touch only the keys
// they are given.
//
// A pipe has one grouper, used by its one drainer between take and the
// answers: its maps and slices are kept from write to write.
type grouper struct {
	open    map[groupKey]int // the command the calls of each group join
	lastUse map[string]int   // the last command that uses each key
	runs    []groupRun
	cmds    []redis.Cmder
}

// groupKey is what the calls of one batched run share.
type groupKey struct {
	s    *script
	slot int  // the calls' hash slot on a Cluster node, else -1
	eval bool // sent by EVAL: the node did not know the script (see pipe.run)
}

// groupRun is one command of the write: a lone call, or a batched run.
type groupRun struct {
	key   groupKey
	calls []*pipeCall
	run   *redis.IntSliceCmd // the batched run, nil for a lone call
}

// commands gives the commands that carry calls, in order. slotted tells
// whether the keys of one command must share a hash slot.
func (g *grouper) commands(ctx context.Context, calls []*pipeCall, slotted bool) []redis.Cmder {
	if g.open == nil {
		g.open, g.lastUse = make(map[groupKey]int), make(map[string]int)
	}
	barrier := -1 // the last command no call may be moved past
	for _, c := range calls {
		if c.script == nil {
			barrier = g.add(groupKey{slot: -1}, c)
			continue
		}
		key := groupKey{s: c.script, slot: -1, eval: c.args[0] == "eval"}
		if slotted {
			key.slot = keySlot(scriptKey(c.args))
		}
		keys := c.args[3 : 3+c.args[2].(int)]
		at, ok := g.open[key]
		ok = ok && at > barrier && len(g.runs[at].calls) < batchBound
		for _, k := range keys {
			if used, seen := g.lastUse[k.(string)]; ok && seen && used > at {
				ok = false
			}
		}
		if ok {
			g.runs[at].calls = append(g.runs[at].calls, c)
		} else {
			at = g.add(key, c)
			g.open[key] = at
		}
		for _, k := range keys {
			g.lastUse[k.(string)] = at
		}
	}
	for i := range g.runs {
		r := &g.runs[i]
		if len(r.calls) == 1 {
			g.cmds = append(g.cmds, r.calls[0].cmd)
			continue
		}
		group := make([][]any, len(r.calls))
		for j, c := range r.calls {
			group[j] = c.args
		}
		r.run = redis.NewIntSliceCmd(ctx, r.key.s.batchArgs(group, r.key.eval)...)
		g.cmds = append(g.cmds, r.run)
	}
	return g.cmds
}

// add opens a command for c and gives its index.
func (g *grouper) add(key groupKey, c *pipeCall) int {
	if len(g.runs) < cap(g.runs) {
		g.runs = g.runs[:len(g.runs)+1]
		r := &g.runs[len(g.runs)-1]
		r.key, r.calls, r.run = key, append(r.calls[:0], c), nil
	} else {
		g.runs = append(g.runs, groupRun{key: key, calls: []*pipeCall{c}})
	}
	return len(g.runs) - 1
}

// answer gives each call of a batched run its own reply or error, in its
// command, once the write was answered (a run's error, NOSCRIPT among them,
// is each of its calls'), and forgets the write.
func (g *grouper) answer() {
	for i := range g.runs {
		r := &g.runs[i]
		if r.run != nil {
			batchAnswers(r.run, nil, len(r.calls), func(j int, v []int64, err error) {
				cmd := r.calls[j].cmd.(*redis.IntSliceCmd)
				if err != nil {
					cmd.SetErr(err)
				} else {
					cmd.SetVal(v)
				}
			})
		}
		clear(r.calls)
		r.run = nil
	}
	g.runs = g.runs[:0]
	clear(g.cmds)
	g.cmds = g.cmds[:0]
	clear(g.open)
	clear(g.lastUse)
}
