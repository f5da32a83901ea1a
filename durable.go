package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Durable votes (Options.DurableVotes, docs/PROTOCOL.md §11-12): a node's
// vote counts only once every replica that could be promoted in its
// master's place has the write. The pipe (pipe.go) hands each write of a
// node with durable votes to writeDurable, which sends the write's calls
// followed by one WAIT on the same connection: WAIT covers every earlier
// write of its connection, so one WAIT covers a whole batch. On a Cluster
// node the calls go to the master that serves their slot, each master's
// calls with a WAIT of their own: a keyless WAIT through the ClusterClient
// would reach an arbitrary master.

// writeDurable sends cmds, one write of n's pipe, each master's calls
// followed by a WAIT, and turns the answer of every vote whose WAIT came
// back short into an error wrapping ErrVoteNotDurable. The error is the
// one a write of the calls alone would give (for the pipe's bookkeeping).
func (n *node) writeDurable(ctx context.Context, cmds []redis.Cmder) error {
	cc, ok := n.rdb.(*redis.ClusterClient)
	if !ok {
		return writeWaited(ctx, n.rdb, cmds, int(n.replicas.Load()), n.waitAOF.Load())
	}
	// Group the calls by their slot's master, keeping their order within
	// each group: the calls on one key share a slot, so their order holds.
	type group struct {
		m    *redis.Client
		cmds []redis.Cmder
	}
	var groups []*group
	byMaster := make(map[*redis.Client]*group)
	for _, cmd := range cmds {
		m, err := cc.MasterForKey(ctx, scriptKey(cmd.Args()))
		if err != nil {
			cmd.SetErr(fmt.Errorf("%w (no master for the lock's slot: %w)", errNotSent, err))
			continue
		}
		g := byMaster[m]
		if g == nil {
			g = &group{m: m}
			byMaster[m] = g
			groups = append(groups, g)
		}
		g.cmds = append(g.cmds, cmd)
	}
	guard := n.guard.Load()
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		n.watch(g.m)
		sh := guard.shard(g.m.Options().Addr)
		if sh == nil {
			// A master the last probe did not see (a failover, a slot
			// moved): how many replicas it has is unknown, so nothing is
			// sent to it; the node is probed again first.
			n.stale.Store(true)
			for _, cmd := range g.cmds {
				cmd.SetErr(fmt.Errorf("%w (%s serves the lock's slot now, and its replicas are not known yet)", errNotSent, g.m.Options().Addr))
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = writeWaited(ctx, g.m, g.cmds, sh.replicas, sh.waitAOF)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeWaited sends cmds to one master as one pipeline, followed by the
// WAIT that need acknowledgements ask, and judges the votes among them.
func writeWaited(ctx context.Context, rdb redis.UniversalClient, cmds []redis.Cmder, need int, waitAOF bool) error {
	sent, judge := withWait(ctx, cmds, need, waitAOF)
	pl := rdb.Pipeline()
	for _, cmd := range sent {
		_ = pl.Process(ctx, cmd)
	}
	_, err := pl.Exec(ctx)
	judge()
	return err
}

// withWait is the durable step of a write: cmds with the WAIT (or
// WAITAOF) that asks need replicas' acknowledgements appended, and the
// function that, once the write was answered, marks every vote among cmds
// that the acknowledgements do not cover with ErrVoteNotDurable. A write
// with no vote, or a master with no replica, needs no WAIT.
func withWait(ctx context.Context, cmds []redis.Cmder, need int, waitAOF bool) ([]redis.Cmder, func()) {
	votes := 0
	for _, cmd := range cmds {
		if isVote(cmd) {
			votes++
		}
	}
	if votes == 0 || need <= 0 {
		return cmds, func() {}
	}
	ms := waitTimeout(ctx)
	var wait redis.Cmder
	if waitAOF {
		wait = redis.NewIntSliceCmd(ctx, "waitaof", 1, need, ms)
	} else {
		wait = redis.NewIntCmd(ctx, "wait", need, ms)
	}
	sent := append(cmds[:len(cmds):len(cmds)], wait)
	return sent, func() {
		err := waitShort(wait, need, ms)
		if err == nil {
			return
		}
		for _, cmd := range cmds {
			if cmd.Err() == nil && isVote(cmd) {
				cmd.SetErr(err)
			}
		}
	}
}

// waitShort tells why the answer of wait, which asked need replicas'
// acknowledgements within ms, does not make the writes before it durable;
// nil if it does. WAITAOF answers [local fsyncs, replica fsyncs].
func waitShort(wait redis.Cmder, need int, ms int64) error {
	if err := wait.Err(); err != nil {
		return fmt.Errorf("%w: %s failed: %w", ErrVoteNotDurable, wait.Name(), err)
	}
	var acks int64
	switch w := wait.(type) {
	case *redis.IntCmd:
		acks = w.Val()
	case *redis.IntSliceCmd:
		v := w.Val()
		if len(v) != 2 || v[0] < 1 {
			return fmt.Errorf("%w: WAITAOF answered %v: the master's own fsync is not confirmed", ErrVoteNotDurable, v)
		}
		acks = v[1]
	}
	if acks < int64(need) {
		return fmt.Errorf("%w: %d of the master's %d replicas acknowledged the write within %dms", ErrVoteNotDurable, acks, need, ms)
	}
	return nil
}

// waitTimeout is the WAIT's timeout in ms: a third of the time left
// before ctx's deadline, and at least 1 (WAIT 0 blocks for ever). A WAIT
// that times out answers late: the server serves blocked clients'
// timeouts from its cron, up to 1/hz (100ms at the default hz 10) after
// they are due, and its answer must still come back before the deadline,
// or the vote fails as unanswered rather than as not durable. Without a
// deadline, a third of the default node timeout.
func waitTimeout(ctx context.Context) int64 {
	left := DefaultNodeTimeout
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	return max((left / 3).Milliseconds(), 1)
}

// releaseScripts are the scripts whose answer is not a vote: a release
// that a failover undoes leaves a key that expires by itself, as a
// release that never reached the node does.
var releaseScripts = []*script{releaseScript, rwReadReleaseScript, rwWriteReleaseScript, rwIntentClearScript, semaphoreReleaseScript}

// isVote tells whether cmd, a script call, writes what a vote or a token
// depends on: every script but the releases.
func isVote(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	code := args[1]
	for _, s := range releaseScripts {
		for _, form := range []*script{s, s.batched} {
			if code == form.srcArg {
				return false
			}
			if sha := form.sha.Load(); sha != nil && code == *sha {
				return false
			}
		}
	}
	return true
}

// hasCommand tells whether a COMMAND INFO reply for one command describes
// it: a server that does not know the command answers [nil].
func hasCommand(reply any) bool {
	v, ok := reply.([]any)
	return ok && len(v) == 1 && v[0] != nil
}
