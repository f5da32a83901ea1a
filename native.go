package redlock

import (
	"context"
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
// The extend has no native form here: a compare-and-set (SET k v PX ttl
// IFEQ v, Redis 8.4, Valkey 8.1) does not answer the node's clock, which
// the extend script does for the clock guard (recheck), and the TIME that
// would make up for it costs more than the script saves; on a Cluster node
// a keyless TIME would even reach an arbitrary master (DESIGN §6). See
// docs/BENCHMARKS.md for the figures.
//
// What a node has is read from COMMAND INFO at every probe, never from a
// version string, so a failover to a server without the command is seen at
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
)

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
	msg := err.Error()
	return strings.HasPrefix(msg, "ERR unknown command") || strings.HasPrefix(msg, "ERR Unknown command"), false
}

// nativeDelete runs the compare-and-delete of the attempt's lock key on n
// in place of its quiet release script, if n's server has one and the
// release would do nothing more (see above). done is false when the
// script must run instead: the node has no native form, or it answered
// that it cannot run it, which switches the node back to the script.
func (a *attempt) nativeDelete(ctx context.Context, n *node) (deleted, done bool, err error) {
	ps := n.pipes
	if ps == nil || !a.quieted || !a.spec.bare || len(a.releaseArgs) != 6 || ps.acquire.durable != nil {
		// A test fake, a release that announces, a kind whose release
		// does more, a holder key to delete too (metadata), or durable
		// votes (whose writes are grouped by a script's key).
		return false, false, nil
	}
	caps := ps.nativeCaps()
	args := caps.deleteArgs(a.releaseArgs[3], a.releaseArgs[4])
	if args == nil {
		return false, false, nil
	}
	cmd := redis.NewIntCmd(ctx, args...)
	if err := ps.acquire.do(ctx, cmd); err != nil {
		return false, true, err
	}
	if fallback, refused := nativeRefusal(cmd.Err()); fallback {
		ps.dropNative(caps, refused)
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
