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
	timeout := max(a.nodeTimeout, defaultNodeTimeout)
	return a.c.broadcast(context.Background(), "fence", a.name, timeout, a.nodeTimeout, func(ctx context.Context, n *node) (bool, error) {
		vals, err := n.run.run(ctx, raise, args)
		return err == nil && len(vals) == 1 && vals[0] == 1, err
	})
}
