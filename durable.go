package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
// followed by what the node's votes wait for: with DurableVotes a WAIT (or
// WAITAOF) for its replicas and a read of the replicas the master lists
// now; with FsyncedVotes, on a master that has WAITAOF and its AOF on, a
// WAITAOF that asks for the master's own fsync too. It turns the answer of
// every vote that those do not make durable into an error wrapping
// ErrVoteNotDurable. The error is the one a write of the calls alone would
// give (for the pipe's bookkeeping).
func (n *node) writeDurable(ctx context.Context, cmds []redis.Cmder) error {
	cc, ok := n.rdb.(*redis.ClusterClient)
	if !ok {
		g := n.guard.Load()
		m := n.masterWrite("", int(n.replicas.Load()), n.waitAOF.Load(), aofView(n.aofView.Load()), g != nil && g.cluster != nil)
		w, err := writeWaited(ctx, n.rdb, cmds, m)
		n.judged(w)
		// The next writes wait for every replica listed now: the most
		// seen, as the probe counts them.
		for {
			seen := n.replicas.Load()
			if int64(w.listed) <= seen || n.replicas.CompareAndSwap(seen, int64(w.listed)) {
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
			// moved): how many replicas it has, and whether it has
			// WAITAOF, is unknown, so nothing is sent to it; the node is
			// probed again first.
			n.stale.Store(true)
			for _, cmd := range g.cmds {
				cmd.SetErr(fmt.Errorf("%w (%s serves the lock's slot now, and its replicas are not known yet)", errNotSent, g.m.Options().Addr))
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var w waited
			m := n.masterWrite("its master "+sh.addr, sh.replicas, sh.waitAOF, sh.aofView, true)
			w, errs[i] = writeWaited(ctx, g.m, g.cmds, m)
			n.judged(w)
			if w.listed > sh.replicas {
				// A replica joined since the probe: the probe learns it
				// (and what else changed) before the next vote.
				n.stale.Store(true)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// masterWrite is what a durable write of n to one of its masters waits
// for; who names a Cluster node's master in errors, need is its replicas as
// last learned, waitAOF whether it has WAITAOF and its AOF on, view what
// the last probe saw of its AOF (only to tell news from what was known).
func (n *node) masterWrite(who string, need int, waitAOF bool, view aofView, cluster bool) masterReplicas {
	m := masterReplicas{who: who, waitAOF: waitAOF, cluster: cluster, fsyncOnly: !n.durableVotes, view: view}
	if n.durableVotes {
		m.need = need
	}
	// With FsyncedVotes every vote on every master waits for its fsync,
	// whatever the last probe saw of the master (its AOF off, no WAITAOF,
	// a build whose WAITAOF is not trusted, a rewrite, appendfsync no, or
	// no probe yet): another client with FsyncedVotes whose last probe saw
	// the master persistent excuses its restart, and so relies on every
	// vote counted there being fsynced, whoever counted it. A probe is
	// never the master at the vote: its AOF may have been turned on since
	// (TestBreak2AOFTurnedOnAfterTheProbe, TestBreak2ExtendAfterAOFTurnedOn),
	// and a probe that could not ask (an ACL user without command|info)
	// knows nothing (TestBreak2ClientWithoutCommandInfo). Only the
	// master's own answer to the WAITAOF sent behind the vote decides
	// (withWait, fsyncVerdict).
	m.fsyncRequired = n.fsyncedVotes
	return m
}

// aofView is what a node's last probe saw of a master's AOF, kept beside
// the guard for the durable step: it only tells whether a WAITAOF answer
// is news (the master changed since), never whether to send one.
type aofView uint32

const (
	// aofSeenOff: the probe saw the AOF off (aof_enabled:0).
	aofSeenOff aofView = 1 << iota
	// waitAOFSeenMissing: the probe's COMMAND INFO waitaof answered that
	// the server has no WAITAOF (Redis before 7.2), not an error.
	waitAOFSeenMissing
)

// viewOf is the aofView of a probe of one server.
func viewOf(r probeResult) aofView {
	var v aofView
	if !r.appendOnly {
		v |= aofSeenOff
	}
	if r.noWaitAOF {
		v |= waitAOFSeenMissing
	}
	return v
}

// judged records what a durable write told of the node: votes whose fsync
// was not confirmed, and a master whose answer was news.
func (n *node) judged(w waited) {
	if w.unconfirmed > 0 {
		n.unconfirmed.Add(int64(w.unconfirmed))
	}
	if w.relearn {
		// Its AOF was turned off, or WAITAOF failed: what the last probe
		// learned of its persistence no longer holds.
		n.stale.Store(true)
	}
}

// masterReplicas is what a durable write knows of the master it goes to.
type masterReplicas struct {
	who     string // a Cluster node's master, for errors ("" for a node that is one server: the quorum names the node)
	need    int    // the replicas to wait for, as last learned (0 without DurableVotes)
	waitAOF bool   // the master has WAITAOF and its AOF on, as last learned
	// cluster: the master is in cluster mode, and its CLUSTER NODES lists
	// its replicas whether their link is up or not
	cluster bool
	// fsyncOnly: without Options.DurableVotes (FsyncedVotes alone), the
	// master's replicas are neither waited for nor read.
	fsyncOnly bool
	// fsyncRequired: Options.FsyncedVotes. Every vote is followed by a
	// WAITAOF that asks for the master's own fsync, and counts only once
	// the master confirms it (numlocal >= 1) and no AOF rewrite started
	// between the vote and that answer (INFO persistence read before the
	// votes and after the WAITAOF: rewriteStarted), or, unconfirmed, where
	// the master itself answers that it has no AOF to fsync
	// (fsyncVerdict). Every vote whose fsync is not confirmed moves
	// node.unconfirmed.
	fsyncRequired bool
	// view is what the last probe saw of the master's AOF: an answer that
	// disagrees with it makes the node probed again.
	view aofView
}

// waited is what the answer of a durable write told.
type waited struct {
	listed      int  // replicas the master listed (0 if not read)
	unconfirmed int  // votes answered without a confirmed fsync (counted or not)
	relearn     bool // the master's answer is news to the last probe: probe it again
}

// writeWaited sends cmds to one master as one pipeline, followed by what
// m asks, and judges the votes among them.
func writeWaited(ctx context.Context, rdb redis.UniversalClient, cmds []redis.Cmder, m masterReplicas) (waited, error) {
	sent, judge := withWait(ctx, cmds, m)
	pl := rdb.Pipeline()
	for _, cmd := range sent {
		_ = pl.Process(ctx, cmd)
	}
	_, err := pl.Exec(ctx)
	return judge(), err
}

// withWait is the durable step of a write: cmds with the WAIT (or
// WAITAOF) that m asks appended, then, with DurableVotes, the reads of the
// replicas the master has, and the function that, once the write was
// answered, marks every vote among cmds that they do not make durable with
// ErrVoteNotDurable. A write with no vote needs neither; a master with no
// replica to wait for and no fsync to confirm is sent no WAIT, but its
// replicas are read all the same.
//
// The replicas are read after the WAIT, on the same connection: a replica
// listed then that the WAIT did not ask for (it joined since the probe,
// or replaced another) makes the votes fail, and the next write waits for
// it too. A replica that joins later starts with a full sync of the
// master's data, which holds the vote's write (PROTOCOL §12, case a).
//
// WAITAOF, like WAIT, covers every write its connection made before it
// (the master's replication offset after the connection's last write),
// so one covers a batch; a vote script that answers yes always writes
// (lua/acquire.lua), so a vote's yes is never covered by nothing.
//
// With FsyncedVotes the write starts with an INFO persistence, and the
// WAITAOF is followed by another: a confirmation with a rewrite started
// in between does not count (rewriteStarted).
func withWait(ctx context.Context, cmds []redis.Cmder, m masterReplicas) ([]redis.Cmder, func() waited) {
	// With FsyncedVotes alone, a raise of the TTL register on a node that
	// is one server waits for no fsync of its own: the votes that rely on
	// it come after it on the same server, and their WAITAOF covers it
	// (fsyncBarrier says why). A vote that does not come never relied on
	// it. On a Cluster node the register's key (no hash tag) sits in a
	// slot of its own, most often on another master than the vote's,
	// whose WAITAOF does not cover it: there a raise waits for its own
	// fsync, and fails (so no vote relies on it) without one. A read of
	// the register (a raise to 0) writes nothing, and waits for nothing.
	judged := isVote
	if m.fsyncOnly {
		judged = func(cmd redis.Cmder) bool {
			if !isScript(cmd, ttlRegisterScript) {
				return isVote(cmd)
			}
			return m.cluster && isRaise(cmd)
		}
	}
	votes := 0
	for _, cmd := range cmds {
		if judged(cmd) {
			votes++
		}
	}
	if votes == 0 {
		return cmds, func() waited { return waited{} }
	}
	sent := cmds[:len(cmds):len(cmds)]
	// With FsyncedVotes the master's AOF rewrites are read just before the
	// votes and just after their WAITAOF, on the same connection: a
	// rewrite that starts in between may have the WAITAOF confirm an fsync
	// that has not happened (rewriteStarted).
	var marksBefore, marksAfter *redis.StringCmd
	if m.fsyncRequired {
		marksBefore = redis.NewStringCmd(ctx, "info", "persistence", "stats")
		sent = append([]redis.Cmder{marksBefore}, cmds...)
	}
	ms, aofMS := waitTimeout(ctx), int64(0)
	// wait asks for the replicas' acknowledgements (and is aof too when
	// one WAITAOF asks for both), aof for the master's own fsync.
	var wait, aof redis.Cmder
	switch {
	case m.fsyncRequired && (m.need <= 0 || m.waitAOF):
		// An fsync comes about once a second with everysec, not at a
		// timeout: give the WAITAOF most of the time left.
		ms = fsyncTimeout(ctx)
		aofMS = ms
		wait = redis.NewIntSliceCmd(ctx, "waitaof", 1, m.need, ms)
		aof = wait
	case m.fsyncRequired:
		// Replicas to wait for on a master whose AOF was off (or whose
		// WAITAOF was not seen) at the last probe: a WAIT for them, then
		// a WAITAOF for the master's own fsync all the same, whose
		// answer tells whether the AOF is still off.
		wait = redis.NewIntCmd(ctx, "wait", m.need, ms)
		aofMS = fsyncTimeout(ctx)
		aof = redis.NewIntSliceCmd(ctx, "waitaof", 1, 0, aofMS)
	case m.need <= 0:
	case m.waitAOF:
		wait = redis.NewIntSliceCmd(ctx, "waitaof", 1, m.need, ms)
	default:
		wait = redis.NewIntCmd(ctx, "wait", m.need, ms)
	}
	if wait != nil {
		sent = append(sent, wait)
	}
	if aof != nil && aof != wait {
		sent = append(sent, aof)
	}
	if marksBefore != nil {
		marksAfter = redis.NewStringCmd(ctx, "info", "persistence", "stats")
		sent = append(sent, marksAfter)
	}
	var info, nodes *redis.StringCmd
	if !m.fsyncOnly {
		info = redis.NewStringCmd(ctx, "info", "replication")
		sent = append(sent, info)
		if m.cluster {
			nodes = redis.NewStringCmd(ctx, "cluster", "nodes")
			sent = append(sent, nodes)
		}
	}
	return sent, func() waited {
		var w waited
		var err error
		if !m.fsyncOnly {
			w.listed, err = listedReplicas(info, nodes)
			switch {
			case err != nil:
				err = fmt.Errorf("%w: the master's replicas could not be read after the write: %w", ErrVoteNotDurable, err)
			case w.listed > m.need:
				err = fmt.Errorf("%w: the master lists %d replicas now, and the write waited for %d (the next write waits for them all)", ErrVoteNotDurable, w.listed, max(m.need, 0))
			}
		}
		var local error // the master's own fsync was asked for and not confirmed
		fsynced := false
		if err == nil && wait != nil {
			fsynced, local, err = waitShort(wait, m.need, ms)
			if local != nil && !m.fsyncRequired {
				// DurableVotes alone: its WAITAOF asked for the master's
				// fsync and the replicas' together.
				err = local
			}
		}
		if err == nil && aof != nil && aof != wait {
			fsynced, local, _ = waitShort(aof, 0, aofMS)
		}
		if fsynced && marksBefore != nil {
			if why := rewriteStarted(marksBefore, marksAfter); why != nil {
				// The confirmation may precede the fsync: the vote
				// fails (fsyncVerdict makes it news, so the node is
				// probed again), unconfirmed.
				fsynced, local = false, why
			}
		}
		if m.fsyncRequired && err == nil {
			counts, news := fsyncVerdict(aof, local, m.view)
			switch {
			case local == nil:
			case counts && aof != wait || counts && m.need <= 0:
				// The master has no AOF (or no WAITAOF) to fsync: the
				// vote counts, unconfirmed (below).
			default:
				err = local
			}
			w.relearn = news
		}
		if err != nil && m.who != "" {
			err = fmt.Errorf("%w (on %s)", err, m.who)
		}
		for _, cmd := range cmds {
			if !judged(cmd) || cmd.Err() != nil {
				continue
			}
			if m.fsyncRequired && !fsynced && !isScript(cmd, ttlRegisterScript) {
				// Answered without a confirmed fsync, counted or not:
				// this client no longer excuses the master's restart
				// (unconfirmedSince). (A raise of the register is no
				// vote: on a master that is persistent it is fsynced or
				// covered, see above.)
				w.unconfirmed++
			}
			if err != nil {
				cmd.SetErr(err)
			}
		}
		return w
	}
}

// fsyncVerdict judges a WAITAOF 1 that followed votes with FsyncedVotes,
// whose local error (waitShort) is not nil when it did not confirm the
// master's own fsync. counts: the vote counts all the same, unconfirmed,
// because the master itself answered that it has nothing to fsync, and
// the last probe saw the same: its AOF is off ("WAITAOF cannot be used
// when numlocal is set but appendonly is disabled") as the probe saw it
// (aof_enabled:0), or it has no WAITAOF at all ("unknown command", Redis
// before 7.2) as the probe's COMMAND INFO told. Such a master counts as
// persistent through WAITAOF for no client at that moment (probe.go,
// persistent, asks for its AOF on and a trusted WAITAOF), and the vote
// moves node.unconfirmed, so this client's guard excuses no restart after
// it. Every other answer fails the vote and is news (the node is probed
// again): numlocal 0 (no fsync within the timeout, as with appendfsync
// no, a rewrite with no-appendfsync-on-rewrite yes, or the first rewrite
// of an AOF turned on at run time); NOPERM (an ACL user without
// +waitaof); a replica's refusal; no answer; and the two answers above
// where the probe saw the AOF on or WAITAOF there: the AOF was turned off
// since the probe, and another client whose last probe saw the master
// persistent would excuse a restart that loses the vote, or the answer
// did not come from the server the probe saw.
func fsyncVerdict(aof redis.Cmder, local error, view aofView) (counts, news bool) {
	if local == nil {
		return false, false
	}
	var rerr redis.Error
	if err := aof.Err(); err != nil && errors.As(err, &rerr) {
		msg := rerr.Error()
		switch {
		case strings.HasPrefix(msg, "ERR ") && strings.Contains(msg, "appendonly is disabled"):
			counts = view&aofSeenOff != 0
		case strings.HasPrefix(msg, "ERR unknown command"):
			counts = view&waitAOFSeenMissing != 0
		}
	}
	return counts, !counts
}

// rewriteStarted tells whether a WAITAOF's confirmation of the master's
// own fsync (numlocal >= 1) may have come before that fsync: before and
// after are the master's INFO persistence, read on the WAITAOF's
// connection just before the writes it covers and just after its answer.
// It returns nil when they show no AOF rewrite started in between, and
// otherwise, or when they cannot be read, an error wrapping
// ErrVoteNotDurable.
//
// A rewrite's start (rewriteAppendOnlyFileBackground, Redis 7.0+ aof.c)
// switches the master to a new incremental AOF file and hands the old one
// to a background job that fsyncs and closes it; on Redis 8.x
// (openNewIncrAofForAppend) it also resets the fsynced and written sizes
// of the incremental file to 0, so the next flush with nothing to write
// takes everything as fsynced and releases the blocked WAITAOFs while the
// old file's fsync may still be running: a vote written to the old file
// is confirmed before it is on disk
// (TestBreak3WAITAOFConfirmsBeforeTheOldFileFsyncAtARewriteStart). The
// start moves aof_rewrites (INFO persistence, Redis 7.0+), which is
// counted before the fork, so also for a rewrite whose fork fails after
// the files were switched (measured on 8.6: aof_rewrites +1,
// aof_last_bgrewrite_status:err, aof_rewrite_in_progress stays 0).
// CONFIG RESETSTAT sets aof_rewrites back to 0, so a count alone can be
// fooled: a rewrite running at the first read may end, the statistics be
// reset, and another start, leaving the same marks
// (TestBreak4RewriteSwapHiddenByResetStat). So a rewrite running at
// either read fails the votes (it may have ended and another started
// unseen), and so do any change of aof_rewrites or of
// aof_last_bgrewrite_status, and total_commands_processed going back (a
// reset in between). What a reset still hides is a rewrite that starts
// and ends within the wait, on a server that processes more commands
// after the reset than it had before the first read (docs/PROTOCOL.md
// §13). A rewrite makes a node's votes fail while it runs: the quorum
// rides on the others.
func rewriteStarted(before, after *redis.StringCmd) error {
	b, err := rewriteMarks(before)
	if err == nil {
		var a rewriteMarkSet
		if a, err = rewriteMarks(after); err == nil {
			switch {
			case a.rewrites != b.rewrites, b.inProgress != "0", a.inProgress != "0", a.status != b.status, a.commands < b.commands:
				return fmt.Errorf("%w: an AOF rewrite ran or started on the master around the write and WAITAOF's answer, or its statistics were reset (aof_rewrites %s, then %s; aof_rewrite_in_progress %s, then %s; total_commands_processed %d, then %d): its confirmation may precede the old AOF file's fsync",
					ErrVoteNotDurable, b.rewrites, a.rewrites, b.inProgress, a.inProgress, b.commands, a.commands)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: the master's AOF rewrites could not be read around the WAITAOF, so its confirmation may precede an fsync: %w", ErrVoteNotDurable, err)
}

// rewriteMarkSet is what rewriteStarted compares of INFO persistence and
// stats.
type rewriteMarkSet struct {
	rewrites, inProgress, status string
	commands                     int64 // total_commands_processed: CONFIG RESETSTAT sets it back to 0
}

// rewriteMarks reads the rewriteMarkSet of an INFO persistence answer.
func rewriteMarks(info *redis.StringCmd) (rewriteMarkSet, error) {
	if err := info.Err(); err != nil {
		return rewriteMarkSet{}, err
	}
	f := parseInfo(info.Val())
	r := rewriteMarkSet{rewrites: f["aof_rewrites"], inProgress: f["aof_rewrite_in_progress"], status: f["aof_last_bgrewrite_status"]}
	commands, err := strconv.ParseInt(f["total_commands_processed"], 10, 64)
	if r.rewrites == "" || r.inProgress == "" || r.status == "" || err != nil {
		return r, errors.New("INFO persistence stats has no aof_rewrites, aof_rewrite_in_progress, aof_last_bgrewrite_status or total_commands_processed")
	}
	r.commands = commands
	return r, nil
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
// acknowledgements within ms, does not make the writes before it durable:
// local if the master's own fsync is not confirmed (WAITAOF answers
// [local fsyncs, replica fsyncs]; it fails once the AOF is off), err if
// the replicas fall short; fsynced if the master confirmed its fsync.
func waitShort(wait redis.Cmder, need int, ms int64) (fsynced bool, local, err error) {
	if err := wait.Err(); err != nil {
		err = fmt.Errorf("%w: %s failed: %w", ErrVoteNotDurable, wait.Name(), err)
		if _, aof := wait.(*redis.IntSliceCmd); aof {
			return false, err, nil
		}
		return false, nil, err
	}
	var acks int64
	switch w := wait.(type) {
	case *redis.IntCmd:
		acks = w.Val()
	case *redis.IntSliceCmd:
		v := w.Val()
		if len(v) != 2 || v[0] < 1 {
			return false, fmt.Errorf("%w: WAITAOF answered %v within %dms: the master's own fsync is not confirmed", ErrVoteNotDurable, v, ms), nil
		}
		fsynced, acks = true, v[1]
	}
	if acks < int64(need) {
		return fsynced, nil, fmt.Errorf("%w: %d of the master's %d replicas acknowledged the write within %dms", ErrVoteNotDurable, acks, need, ms)
	}
	return fsynced, nil, nil
}

// waitTimeout is the WAIT's timeout in ms: a third of the time left
// before ctx's deadline, and at least 1 (WAIT 0 blocks for ever). A WAIT
// that times out answers late: the server serves blocked clients'
// timeouts from its cron, up to 1/hz (100ms at the default hz 10) after
// they are due, and its answer must still come back before the deadline,
// or the vote fails as unanswered rather than as not durable. Without a
// deadline, a third of the default node timeout.
func waitTimeout(ctx context.Context) int64 {
	return max((timeLeft(ctx) / 3).Milliseconds(), 1)
}

// fsyncTimeout is the timeout in ms of a WAITAOF that asks for the
// master's own fsync: with appendfsync everysec the answer comes at the
// next fsync, up to a second (and the server's cron period, 100ms at hz
// 10) away, so it gets the time left less a margin for a late timeout
// (as waitTimeout) and the reply's way back: a third of the time left,
// at most 500ms. A node timeout of 2s leaves the fsync 1.5s.
func fsyncTimeout(ctx context.Context) int64 {
	left := timeLeft(ctx)
	return max((left - min(left/3, 500*time.Millisecond)).Milliseconds(), 1)
}

// timeLeft is the time left before ctx's deadline, or the default node
// timeout without one.
func timeLeft(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d)
	}
	return defaultNodeTimeout
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

// isRaise tells whether cmd, a call of the TTL register's script, raises
// the register (ARGV[1], the TTL to raise it to, above 0) rather than
// only reading it.
func isRaise(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 5 {
		return false
	}
	switch ttl := args[4].(type) {
	case int64:
		return ttl > 0
	case int:
		return ttl > 0
	case string:
		v, err := strconv.ParseInt(ttl, 10, 64)
		return err == nil && v > 0
	}
	return true // unknown: wait, which costs time, never safety
}

// isScript tells whether cmd calls s (in any of its forms).
func isScript(cmd redis.Cmder, s *script) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	for _, form := range s.forms() {
		if args[1] == form.srcArg {
			return true
		}
		if sha := form.sha.Load(); sha != nil && args[1] == *sha {
			return true
		}
	}
	return false
}

// hasCommand tells whether a COMMAND INFO reply for one command describes
// it: a server that does not know the command answers [nil].
func hasCommand(reply any) bool {
	v, ok := reply.([]any)
	return ok && len(v) == 1 && v[0] != nil
}
