package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
// followed by a WAIT and a read of the replicas the master lists now, and
// turns the answer of every vote that those do not make durable into an
// error wrapping ErrVoteNotDurable. The error is the one a write of the
// calls alone would give (for the pipe's bookkeeping).
func (n *node) writeDurable(ctx context.Context, cmds []redis.Cmder) error {
	cc, ok := n.rdb.(*redis.ClusterClient)
	if !ok {
		g := n.guard.Load()
		m := masterReplicas{need: int(n.replicas.Load()), waitAOF: n.waitAOF.Load(), cluster: g != nil && g.cluster != nil}
		listed, err := writeWaited(ctx, n.rdb, cmds, m)
		// The next writes wait for every replica listed now: the most
		// seen, as the probe counts them.
		for {
			seen := n.replicas.Load()
			if int64(listed) <= seen || n.replicas.CompareAndSwap(seen, int64(listed)) {
				break
			}
		}
		return err
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
			var listed int
			listed, errs[i] = writeWaited(ctx, g.m, g.cmds, masterReplicas{need: sh.replicas, waitAOF: sh.waitAOF, cluster: true})
			if listed > sh.replicas {
				// A replica joined since the probe: the probe learns it
				// (and what else changed) before the next vote.
				n.stale.Store(true)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// masterReplicas is what a durable write knows of the master it goes to.
type masterReplicas struct {
	need    int  // the replicas to wait for, as last learned
	waitAOF bool // the master has WAITAOF and its AOF on
	// cluster: the master is in cluster mode, and its CLUSTER NODES lists
	// its replicas whether their link is up or not
	cluster bool
}

// writeWaited sends cmds to one master as one pipeline, followed by the
// WAIT that m.need acknowledgements ask and a read of the replicas the
// master lists, and judges the votes among them. listed is how many
// replicas the master listed (0 if the read failed, or if cmds hold no
// vote and nothing was read).
func writeWaited(ctx context.Context, rdb redis.UniversalClient, cmds []redis.Cmder, m masterReplicas) (listed int, err error) {
	sent, judge := withWait(ctx, cmds, m)
	pl := rdb.Pipeline()
	for _, cmd := range sent {
		_ = pl.Process(ctx, cmd)
	}
	_, err = pl.Exec(ctx)
	return judge(), err
}

// withWait is the durable step of a write: cmds with the WAIT (or
// WAITAOF) that asks m.need replicas' acknowledgements appended, then the
// reads of the replicas the master has, and the function that, once the
// write was answered, marks every vote among cmds that they do not make
// durable with ErrVoteNotDurable and tells how many replicas the master
// listed. A write with no vote needs neither; a master with no replica to
// wait for is sent no WAIT, but its replicas are read all the same.
//
// The replicas are read after the WAIT, on the same connection: a replica
// listed then that the WAIT did not ask for (it joined since the probe,
// or replaced another) makes the votes fail, and the next write waits for
// it too. A replica that joins later starts with a full sync of the
// master's data, which holds the vote's write (PROTOCOL §12, case a).
func withWait(ctx context.Context, cmds []redis.Cmder, m masterReplicas) ([]redis.Cmder, func() int) {
	votes := 0
	for _, cmd := range cmds {
		if isVote(cmd) {
			votes++
		}
	}
	if votes == 0 {
		return cmds, func() int { return 0 }
	}
	sent := cmds[:len(cmds):len(cmds)]
	ms := waitTimeout(ctx)
	var wait redis.Cmder
	switch {
	case m.need <= 0:
	case m.waitAOF:
		wait = redis.NewIntSliceCmd(ctx, "waitaof", 1, m.need, ms)
	default:
		wait = redis.NewIntCmd(ctx, "wait", m.need, ms)
	}
	if wait != nil {
		sent = append(sent, wait)
	}
	info := redis.NewStringCmd(ctx, "info", "replication")
	sent = append(sent, info)
	var nodes *redis.StringCmd
	if m.cluster {
		nodes = redis.NewStringCmd(ctx, "cluster", "nodes")
		sent = append(sent, nodes)
	}
	return sent, func() int {
		listed, err := listedReplicas(info, nodes)
		switch {
		case err != nil:
			err = fmt.Errorf("%w: the master's replicas could not be read after the write: %w", ErrVoteNotDurable, err)
		case listed > m.need:
			err = fmt.Errorf("%w: the master lists %d replicas now, and the write waited for %d (the next write waits for them all)", ErrVoteNotDurable, listed, max(m.need, 0))
		case wait != nil:
			err = waitShort(wait, m.need, ms)
		}
		if err != nil {
			for _, cmd := range cmds {
				if cmd.Err() == nil && isVote(cmd) {
					cmd.SetErr(err)
				}
			}
		}
		return listed
	}
}

// listedReplicas reads how many replicas a master has from its INFO
// replication (connected_slaves) and, on a Cluster's master, its CLUSTER
// NODES (its replicas whether their link is up or not): the larger.
func listedReplicas(info, nodes *redis.StringCmd) (int, error) {
	if err := info.Err(); err != nil {
		return 0, err
	}
	listed, err := strconv.Atoi(parseInfo(info.Val())["connected_slaves"])
	if err != nil {
		return 0, fmt.Errorf("INFO replication has no connected_slaves: %w", err)
	}
	if nodes != nil {
		if err := nodes.Err(); err != nil {
			return 0, err
		}
		listed = max(listed, replicasInView(nodes.Val()))
	}
	return listed, nil
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
	left := defaultNodeTimeout
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	return max((left / 3).Milliseconds(), 1)
}

// isVote tells whether cmd, a script call, writes what a vote or a token
// depends on: every script but those the kinds registered as no vote
// (registerKind), their releases mostly. A release that a failover undoes
// leaves a key that expires by itself, as a release that never reached the
// node does.
func isVote(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	code := args[1]
	for _, s := range unvotedScripts {
		for _, form := range s.forms() {
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
