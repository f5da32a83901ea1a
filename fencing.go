package redlock

// Fencing tokens across independent masters (DESIGN §2).
//
// Every node keeps a fence register F beside the lock key. The acquire
// script, when it takes the lock, returns F and raises it to the client's
// proposal p if p is higher. The client proposes p = max(highest token it
// has seen + 1, its wall clock in µs). If p is above F on every node of the
// winning quorum S, the token is p and every node of S now holds F = p: no
// extra round trip. Otherwise the token is max F over S + 1, written on a
// quorum by a second script that only writes while the node still holds our
// lock.
//
// Why tokens strictly increase: a token t_A was written on a quorum W_A
// while A held the lock there. A later winner B's set S_B is a quorum too,
// so it meets W_A in a node j. On j, A's key had to be gone before B's SET
// NX succeeded, so B read F_j >= t_A and chose a token above it. F only
// grows on a node that keeps its data (AOF with appendfsync always). A node
// that restarted empty lost F, and sitting out the restart grace does not
// give it back: after the grace, B's quorum may hold t_A nowhere. Then only
// the time-based proposals keep tokens rising, as long as client clocks
// differ by less than the time between two acquisitions (at least the
// grace, here).
//
// A holder of a kind that shares the lock (kindSpec.shared) takes
// max(proposal, max F over S), without the +1, written on a quorum the same
// way (its acquire raises F to the proposal; its raise script writes a
// higher value on the slow path). So an exclusive holder after it draws a
// token above it, and its token is at least every exclusive holder's that
// ended before it began.

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// token picks the fencing token for a won decision, running the slow path
// when some winner had already seen a token at or above our proposal.
//
// An exclusive holder's token is above every fence value its winners
// returned. A shared holder (kindSpec.shared) takes
// max(proposal, highest fence value), without the +1: shared holders may
// share a token, and one equal to the last exclusive holder's is what "at
// least every earlier exclusive holder's" asks. The acquire already raised every winner's
// register to at least the proposal; only a register above it needs the
// slow path.
func (a *attempt) token(d decision) (int64, error) {
	switch {
	case d.maxFence < a.proposal:
		return a.proposal, nil
	case a.spec.shared && d.maxFence == a.proposal:
		return a.proposal, nil
	}
	token := d.maxFence
	if !a.spec.shared {
		token++
	}
	return token, a.raiseFence(token)
}

// raiseFence is the slow path: raise the fence register to token on a
// quorum of nodes that still hold the lock for us (the kind's raise
// script).
func (a *attempt) raiseFence(token int64) error {
	keys := a.keys[:]
	if a.extKeys != nil {
		keys = a.extKeys
	}
	raise := a.spec.raise
	args := raise.args(keys, a.value, token, a.c.fenceLifetimeArg)
	// Its time counts against the lock's validity, like the acquire's.
	timeout := max(a.nodeTimeout, DefaultNodeTimeout)
	return a.c.broadcast(context.Background(), "fence", a.name, timeout, a.nodeTimeout, func(ctx context.Context, n *node) (bool, error) {
		vals, err := n.run.run(ctx, raise, args)
		return err == nil && len(vals) == 1 && vals[0] == 1, err
	})
}

// Fence is the resource side of fencing, in process: it admits an operation
// only with a token at least as high as every token admitted before. Put
// one in front of each resource the lock guards. The zero value is ready;
// a Fence is safe for concurrent use.
//
// A Fence protects only what goes through it. When the resource is shared
// by several processes, the check must live in the resource itself: see
// FencedSet for a Redis value, and docs/FENCING.md for an SQL pattern.
type Fence struct {
	mu      sync.Mutex
	highest int64
}

// Admit records token and returns nil if it is not below the highest token
// admitted so far; otherwise it returns a *StaleTokenError (matching
// ErrStaleToken) and the caller must not touch the resource.
func (f *Fence) Admit(token int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if token < f.highest {
		return &StaleTokenError{Token: token, Highest: f.highest}
	}
	f.highest = token
	return nil
}

// Highest is the highest token admitted so far.
func (f *Fence) Highest() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.highest
}

// FencedSet writes value to a Redis-held resource only if token is at least
// the highest token that wrote it before, in one atomic script. The
// resource is a hash at key with fields "value" and "fence". A stale token
// gets a *StaleTokenError (matching ErrStaleToken) and changes nothing.
func FencedSet(ctx context.Context, rdb redis.UniversalClient, key string, token int64, value string) error {
	if key == "" {
		return configErr("resource key", `""`, "must not be empty")
	}
	if token < 0 {
		return configErr("token", token, "must not be negative")
	}
	vals, err := runScript(ctx, rdb, fencedSetScript, 2, []string{key}, token, value)
	if err != nil {
		return err
	}
	if vals[0] == 0 {
		return &StaleTokenError{Token: token, Highest: vals[1]}
	}
	return nil
}

// FencedGet reads a resource written by FencedSet: its value and the token
// of the last write. An absent resource gives "", 0 and no error.
func FencedGet(ctx context.Context, rdb redis.UniversalClient, key string) (value string, token int64, err error) {
	vals, err := rdb.HMGet(ctx, key, "value", "fence").Result()
	if err != nil {
		return "", 0, err
	}
	if len(vals) != 2 || vals[0] == nil {
		return "", 0, nil
	}
	value, _ = vals[0].(string)
	fence, _ := vals[1].(string)
	if token, err = strconv.ParseInt(fence, 10, 64); err != nil {
		return "", 0, errors.New("redlock: resource " + key + " has a malformed fence field")
	}
	return value, token, nil
}
