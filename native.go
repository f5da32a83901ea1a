package redlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Server-native compare-and-act (issue 27). Redis 8.4 has DELEX key IFEQ
// value, Valkey 9.0 DELIFEQ key value: a compare-and-delete the server runs
// without a script. A node uses one in place of the release script where
// the release has nothing else to do: a kind whose release only compares
// its one key with the owner value and deletes it (kindSpec.bare), of a
// lock without metadata, released quietly (a failed attempt's cleanup,
// which wakes nobody). A release that wakes waiters keeps the script: the
// PUBLISH as a command of its own costs the server more than the script
// saves (docs/BENCHMARKS.md, BenchmarkNativeServerCPU), pipelined or not.
//
// The extend of such a lock (kindSpec.bare, no metadata) is SET k v PX
// ttl IFEQ v (Redis 8.4, Valkey 8.1) where it renews the key, which is
// the script's common answer. The script also answers the node's clock
// for the clock guard (recheck): the native form sends a TIME on the same
// pipe, inside the same bracket of send and answer, one TIME for all the
// locks of a renewal round as the batched script reads one. That is why a
// Cluster node keeps the script: a keyless TIME through a ClusterClient
// reaches an arbitrary master, not the one that holds the key (DESIGN §6).
// Where the SET finds the key gone or another owner's, the script runs
// for that lock after all, and decides as it always does: a repair, a
// refusal, a newer token. Durable votes keep the script too: their WAIT
// is grouped by a script's keys (durable.go).
//
// What a node has is read from COMMAND INFO and COMMAND DOCS at every
// probe, never from a version string, so a failover to a server without the command is seen at
// the probe that follows it; a call that meets such a server before then
// gets "unknown command", and the node falls back to the script at once
// (the call still succeeds). An ACL user without the command gets NOPERM:
// the node falls back too, and stays on the script for the client's life,
// since a probe cannot see an ACL.

// nativeCaps are the native commands a node's server has (a Cluster
// node's: every master has them), as bits.
type nativeCaps uint32

const (
	nativeDelex   nativeCaps = 1 << iota // DELEX key IFEQ value (Redis 8.4+)
	nativeDelifeq                        // DELIFEQ key value (Valkey 9.0+)
	nativeSetIfEq                        // SET ... IFEQ value (Redis 8.4+, Valkey 8.1+)
)

// setDocs asks for SET's arguments: IFEQ is an argument of SET, which
// COMMAND INFO does not list.
var setDocs = []any{"command", "docs", "set"}

// setIfEqOf reads the answer to setDocs: whether SET lists an IFEQ token.
func setIfEqOf(cmd *redis.Cmd) nativeCaps {
	if cmd == nil || cmd.Err() != nil || !mentions(cmd.Val(), "IFEQ") {
		return 0
	}
	return nativeSetIfEq
}

// mentions tells whether the reply v holds the string word anywhere, in
// any case (COMMAND DOCS is a nested map under RESP3, nested arrays under
// RESP2).
func mentions(v any, word string) bool {
	switch v := v.(type) {
	case string:
		return strings.EqualFold(v, word)
	case []any:
		for _, e := range v {
			if mentions(e, word) {
				return true
			}
		}
	case map[any]any:
		for k, e := range v {
			if mentions(k, word) || mentions(e, word) {
				return true
			}
		}
	case map[string]any:
		for _, e := range v {
			if mentions(e, word) {
				return true
			}
		}
	}
	return false
}

// nativeDeletes are the compare-and-delete commands.
const nativeDeletes = nativeDelex | nativeDelifeq

// nativeCommands are the commands the probe asks COMMAND INFO about, in
// the order of the bits above.
var nativeCommands = []any{"command", "info", "delex", "delifeq"}

// nativeCapsOf reads the answer to COMMAND INFO of nativeCommands: an
// entry per command asked, nil for one the server does not have. An error
// (a server that refuses COMMAND INFO, an ACL without it) gives none.
func nativeCapsOf(cmd *redis.Cmd) nativeCaps {
	if cmd == nil || cmd.Err() != nil {
		return 0
	}
	v, ok := cmd.Val().([]any)
	if !ok || len(v) != len(nativeCommands)-2 {
		return 0
	}
	var caps nativeCaps
	for i, e := range v {
		if e != nil {
			caps |= 1 << i
		}
	}
	return caps
}

// deleteArgs is the compare-and-delete of key for its owner value on a
// server with caps, nil when it has none.
func (caps nativeCaps) deleteArgs(key, value any) []any {
	switch {
	case caps&nativeDelex != 0:
		return []any{"delex", key, "ifeq", value}
	case caps&nativeDelifeq != 0:
		return []any{"delifeq", key, value}
	}
	return nil
}

// nativeRefusal tells whether err is a node's answer that it cannot run a
// native command for us: it does not have it (a failover to an older
// server since the last probe) or the ACL refuses it. refused is the
// latter, which no probe can see.
func nativeRefusal(err error) (fallback, refused bool) {
	if err == nil {
		return false, false
	}
	if redis.HasErrorPrefix(err, "NOPERM") {
		return true, true
	}
	// A server without IFEQ takes it for a syntax error of SET.
	msg := err.Error()
	return strings.HasPrefix(msg, "ERR unknown command") || strings.HasPrefix(msg, "ERR Unknown command") ||
		strings.HasPrefix(msg, "ERR syntax error"), false
}

// nativeDelete runs the compare-and-delete of the attempt's lock key on n
// in place of its quiet release script, if n's server has one and the
// release would do nothing more (see above). done is false when the
// script must run instead: the node has no native form, or it answered
// that it cannot run it, which switches the node back to the script.
func (a *attempt) nativeDelete(ctx context.Context, n *node) (deleted, done bool, err error) {
	ps := n.pipes
	if ps == nil || !a.quieted || !a.spec.bare || ps.renew.durable != nil {
		// A test fake, a release that announces, a kind whose release
		// does more, or durable votes (whose writes are grouped by a
		// script's key).
		return false, false, nil
	}
	if _, _, ok := a.holder(); ok {
		return false, false, nil // a holder key to delete too (metadata)
	}
	caps := ps.nativeCaps()
	args := caps.deleteArgs(a.keys[0], a.value)
	if args == nil {
		return false, false, nil
	}
	cmd := redis.NewIntCmd(ctx, args...)
	if err := ps.lane(a.keys[0]).do(ctx, cmd); err != nil { // the lane of the acquire it cleans up after
		return false, true, err
	}
	if fallback, refused := nativeRefusal(cmd.Err()); fallback {
		ps.dropNative(caps&nativeDeletes, refused) // the extend's SET may still be allowed
		return false, false, nil
	}
	if err := cmd.Err(); err != nil {
		return false, true, err
	}
	return cmd.Val() == 1, true, nil
}

// nativeCaps are the native commands n may be sent now: those the last
// probe found, but those the ACL refused.
func (ps *nodePipes) nativeCaps() nativeCaps {
	return nativeCaps(ps.native.Load() &^ ps.nativeRefused.Load())
}

// dropNative switches the node back to the scripts after it refused a
// native command of caps: until the next probe finds it again when the
// server did not know it, for good when the ACL refused it.
func (ps *nodePipes) dropNative(caps nativeCaps, refused bool) {
	if refused {
		ps.nativeRefused.Or(uint32(caps))
	}
	ps.native.And(^uint32(caps))
}

// nativeExtendOK tells whether n may take the extends of a round natively:
// it has SET IFEQ, its TIME is the keys' server's (not a ClusterClient),
// and its votes are not durable.
func nativeExtendOK(n *node) bool {
	ps := n.pipes
	if ps == nil || ps.renew.durable != nil || ps.nativeCaps()&nativeSetIfEq == 0 {
		return false
	}
	_, cluster := n.rdb.(*redis.ClusterClient)
	return !cluster
}

// bareExtends are the SET IFEQ PX commands of args[i], the extend commands
// of locks of specs[i] (their kinds' extendArgs), in one allocation: a
// round builds them once for every node that takes them. A lock has no
// native form unless its kind is bare and it has no metadata: the
// command's keys are then the lock key and the fence register, its
// arguments the owner value and the TTL first. ok is false if one of
// them has none.
func bareExtends(specs []*kindSpec, args [][]any) (sets [][]any, ok bool) {
	const setLen = 7
	all := make([]any, 0, setLen*len(args))
	sets = make([][]any, len(args))
	for i, a := range args {
		if !specs[i].bare || len(a) < 7 || a[2] != 2 {
			return nil, false
		}
		key, value, ttl := a[3], a[5], a[6]
		all = append(all, "set", key, value, "px", ttl, "ifeq", value)
		sets[i] = all[len(all)-setLen : len(all) : len(all)]
	}
	return sets, true
}

// nativeExtend runs on n the extends args[i] of locks of specs[i], the
// native way (see above), and answers each as the extend script would:
// {status, sec, usec}, or the call's error. sets are the calls'
// bareExtends, nil to build them. ok is false when n or a call has no
// native form: nothing was sent, and the caller runs the scripts.
func nativeExtend(ctx context.Context, n *node, specs []*kindSpec, args, sets [][]any) (vals [][]int64, errs []error, ok bool) {
	if len(args) == 0 || !nativeExtendOK(n) {
		return nil, nil, false
	}
	if sets == nil {
		if sets, ok = bareExtends(specs, args); !ok {
			return nil, nil, false
		}
	}
	cmds := make([]redis.Cmder, len(args)+1)
	for i, set := range sets {
		cmds[i] = redis.NewStatusCmd(ctx, set...)
	}
	clock := redis.NewStringSliceCmd(ctx, "time")
	cmds[len(args)] = clock
	sendErrs := make([]error, len(cmds))
	caps := n.pipes.nativeCaps()
	n.pipes.renew.doMany(ctx, cmds, func(int) int { return 1 }, sendErrs)
	vals, errs = make([][]int64, len(args)), make([]error, len(args))
	answers := make([]int64, 0, 3*len(args)) // every renewed lock's answer, in one allocation
	sec, usec, clockErr := timeReply(clock, sendErrs[len(args)])
	var again []int // the calls the script must judge
	for i := range args {
		cmd := cmds[i].(*redis.StatusCmd)
		switch err := cmd.Err(); {
		case sendErrs[i] != nil:
			errs[i] = sendErrs[i]
		case err == redis.Nil: // gone, or another owner's
			again = append(again, i)
		case redis.HasErrorPrefix(err, "OOM"):
			// A full noeviction server refuses SET (a write that may
			// grow memory) but runs the script's GET and PEXPIRE: a
			// memory spike must not cost the holders their locks. The
			// node keeps its native form for the next extend.
			again = append(again, i)
		case err != nil:
			if fallback, refused := nativeRefusal(err); fallback {
				n.pipes.dropNative(caps&nativeSetIfEq, refused)
				again = append(again, i)
				continue
			}
			errs[i] = err
		case clockErr != nil:
			errs[i] = clockErr
		default:
			answers = append(answers, 1, sec, usec)
			vals[i] = answers[len(answers)-3 : len(answers) : len(answers)]
		}
	}
	if len(again) > 0 {
		scripts, calls := make([]*script, len(again)), make([][]any, len(again))
		for j, i := range again {
			scripts[j], calls[j] = specs[i].extend, args[i]
		}
		v, e := runBatched(ctx, n, scripts, calls)
		for j, i := range again {
			vals[i], errs[i] = v[j], e[j]
		}
	}
	return vals, errs, true
}

// extendOn runs the extend args of l on n: natively where n and l allow
// it (nativeExtend), else by the script.
func (l *Lock) extendOn(ctx context.Context, n *node, args []any) ([]int64, error) {
	if vals, errs, ok := nativeExtend(ctx, n, []*kindSpec{l.a.spec}, [][]any{args}, nil); ok {
		return vals[0], errs[0]
	}
	return n.run.run(ctx, l.a.spec.extend, args)
}

// timeReply reads a TIME answer (seconds, microseconds); sendErr is the
// call's own error if it got no answer.
func timeReply(cmd *redis.StringSliceCmd, sendErr error) (sec, usec int64, err error) {
	if sendErr != nil {
		return 0, 0, sendErr
	}
	v, err := cmd.Result()
	if err != nil {
		return 0, 0, err
	}
	if len(v) != 2 {
		return 0, 0, fmt.Errorf("redlock: unexpected TIME reply %v", v)
	}
	if sec, err = strconv.ParseInt(v[0], 10, 64); err == nil {
		usec, err = strconv.ParseInt(v[1], 10, 64)
	}
	return sec, usec, err
}
