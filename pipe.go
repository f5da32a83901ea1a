package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipe is one ordered stream of script calls from this client to one
// node: one lane of the node's acquire stream, or its renewal stream (see
// nodePipes). Calls from every goroutine queue on it; what arrives while a
// write to the node is in flight goes out together in the next write, as
// one go-redis pipeline. A call that finds the pipe idle is written at once,
// by its own goroutine, with no hand-off: a lone caller pays nothing for the
// coalescing. At most one write is in flight, so calls reach the node in
// the order they were queued, on one connection at a time.
//
// The order holds while the connection does. When a write times out or its
// connection breaks, its calls' fate is unknown and the next write goes out
// on another connection, which may overtake it: the per-node record of an
// attempt (quorum.go) and the sweep of unanswered nodes keep a release after
// the calls that may set its key in that case too.
//
// Time spent queued is the client's own back-pressure, not the node's: a
// call that gives up before it was written fails with errNotSent, which is
// known to have left nothing on the node and never marks the node down.
type pipe struct {
	rdb redis.UniversalClient
	// durable is the node whose votes wait for its replicas
	// (Options.DurableVotes): every write goes through its writeDurable.
	// nil without the option.
	durable *node

	mu      sync.Mutex
	busy    bool        // a write is in flight, or a goroutine is about to make one
	queue   []*pipeCall // calls waiting for the next write
	spare   []*pipeCall // storage for the next batch
	drainer bool        // a goroutine writes the queued calls
	group   grouper     // the drainer's: groups a batch's calls into batched runs

	// slotted tells whether the keys of one command must share a hash
	// slot (a Cluster node); nil for never.
	slotted func() bool

	// writtenAt is when the write in flight went out (nanoseconds since
	// writeEpoch), 0 while none is in flight: how long the node has left
	// the oldest call unanswered. answeredWrite is when the last write
	// that was answered went out: a node that answers writes sent after
	// another node's unanswered one shows that the other is the slow one.
	writtenAt, answeredWrite atomic.Int64
}

// writeEpoch anchors pipe.writtenAt to the monotonic clock.
var writeEpoch = time.Now()

// maxBatch bounds the calls of one write, so a burst is written in slices
// the node answers well within a node timeout, and the calls still queued
// can give up unsent. A batched script run counts as the calls it carries
// (its weight): one write carries a few runs of 100 locks, not 256 of them.
const maxBatch = 256

// pipeCall is one queued call.
type pipeCall struct {
	ctx    context.Context
	cmd    redis.Cmder
	weight int // the calls cmd carries: 1, or a batched run's locks
	// script is the script cmd calls with args, which a write may group
	// with other calls of it (see grouper); nil for a command not to group.
	script *script
	args   []any
	state  atomic.Int32  // callQueued, callWritten or callAbandoned
	done   chan struct{} // one token once the answer is in cmd
}

// pipeCalls recycles the calls whose caller received their answer: the
// writer is done with a call once it sent that token, while a call whose
// caller gave up may still be in a batch and is left to the collector.
var pipeCalls = sync.Pool{New: func() any { return &pipeCall{done: make(chan struct{}, 1)} }}

const (
	callQueued int32 = iota
	callWritten
	callAbandoned
)

// errNotSent is the error of a call that gave up while queued in the
// client: it never reached the node.
var errNotSent = errors.New("not sent: waited in the client's queue for the node past the node timeout")

// nodePipes are a node's streams of calls: the lanes of acquires and
// releases, and one pipe for renewals (and the TTL register they depend
// on), so that a burst of acquisitions, however far above what the nodes
// can serve, never delays the renewals of the locks already held. Nothing
// is lost by splitting the renewals off: the calls whose order on a node
// matters across the two (an attempt's acquire, extends and release) are
// ordered by the attempt's own record of the calls running there
// (quorum.go) and by Lock.extendMu, not by the pipe.
//
// The acquire stream has Options.Lanes lanes, each a pipe of its own with
// its own connection, so that several writes can be in flight to the node at once:
// while the node runs one lane's write, the client reads the answers of
// another and builds the next, and neither side waits for the other's
// turn. A call goes to the lane of its keys' hash slot (lane). The keys of
// one call always share a hash slot (a Cluster node refuses them
// otherwise, and the library builds every lock's keys with the lock's name
// as their hash tag): two calls that touch a common key therefore have the
// same slot, go to the same lane, and reach the node in the order they
// were queued, as on one pipe. All the calls of one lock (its acquire,
// releases, quiet clean-up, and the calls on every other key its kind
// adds) share its name's tag and so its lane. Calls on keys of distinct slots commute: a script touches only the
// keys it is given. A command that carries the calls of several locks (a
// batched run) is made of one lane's calls only: a pipe groups only its
// own calls (grouper), and a batched send of calls of several lanes
// (runPlan) splits them by lane first.
type nodePipes struct {
	acquire []*pipe // the lanes, at least one
	renew   *pipe
	// sharded: the node is a Redis Cluster whose masters all have
	// SPUBLISH, so its scripts announce releases with it (their sharded
	// forms) and waiters listen with SSUBSCRIBE (wait.go). Set by the
	// probes.
	sharded atomic.Bool
	// native are the native compare-and-act commands the last probe found
	// on the node's server (nativeCaps, native.go); nativeRefused those the
	// node's ACL refused, which no probe sees.
	native, nativeRefused atomic.Uint32
}

// maxLanes bounds Options.Lanes: each lane holds a connection to every node.
const maxLanes = 16

// newNodePipes makes the pipes of a node whose acquire stream has lanes
// lanes (1 if fewer).
func newNodePipes(rdb redis.UniversalClient, lanes int) *nodePipes {
	ps := &nodePipes{acquire: make([]*pipe, max(lanes, 1)), renew: &pipe{rdb: rdb}}
	for i := range ps.acquire {
		ps.acquire[i] = &pipe{rdb: rdb}
	}
	return ps
}

// each calls f with every pipe of the node.
func (ps *nodePipes) each(f func(p *pipe)) {
	for _, p := range ps.acquire {
		f(p)
	}
	f(ps.renew)
}

// laneOf is the lane, of lanes, that the calls on key go to: a function of
// its hash slot, so that every key of one call, and of one lock, has the
// same. A single lane needs no hash.
func laneOf(key string, lanes int) int {
	if lanes <= 1 {
		return 0
	}
	return keySlot(key) % lanes
}

// lane is the acquire stream's lane of the calls on key.
func (ps *nodePipes) lane(key string) *pipe { return ps.acquire[laneOf(key, len(ps.acquire))] }

// of is the pipe a call of s with args (built by s.args, or a batched run
// of calls of one lane) goes to.
func (ps *nodePipes) of(s *script, args []any) *pipe {
	if s.renewal {
		return ps.renew
	}
	return ps.lane(scriptKey(args))
}

func (ps *nodePipes) run(ctx context.Context, s *script, args []any) ([]int64, error) {
	if s.sharded != nil && ps.sharded.Load() {
		// The command is shared by the calls to every node: this node's
		// copy names the sharded form.
		sharded := make([]any, len(args))
		copy(sharded, args)
		sharded[0], sharded[1] = s.sharded.head()
		s, args = s.sharded, sharded
	}
	return ps.of(s, args).run(ctx, s, args)
}

// stuckSince is when the oldest write still unanswered, of all the node's
// pipes, went out (nanoseconds since writeEpoch), 0 if none is.
func (ps *nodePipes) stuckSince() int64 {
	var oldest int64
	ps.each(func(p *pipe) {
		if at := p.writtenAt.Load(); at != 0 && (oldest == 0 || at < oldest) {
			oldest = at
		}
	})
	return oldest
}

// lastAnswered is when the last write that was answered, of all the node's
// pipes, went out.
func (ps *nodePipes) lastAnswered() int64 {
	var last int64
	ps.each(func(p *pipe) { last = max(last, p.answeredWrite.Load()) })
	return last
}

// run runs a script call through the pipe, falling back to EVAL when the
// node does not know the script yet (a fresh or restarted node).
func (p *pipe) run(ctx context.Context, s *script, args []any) ([]int64, error) {
	cmd := redis.NewIntSliceCmd(ctx, args...)
	if err := p.doScript(ctx, cmd, s, args); err != nil {
		return nil, err
	}
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		eval := make([]any, len(args))
		copy(eval, args)
		eval[0], eval[1] = "eval", s.srcArg
		cmd = redis.NewIntSliceCmd(ctx, eval...)
		if err := p.doScript(ctx, cmd, s, eval); err != nil {
			return nil, err
		}
	}
	return cmd.Val(), s.explain(cmd.Err())
}

// do sends cmd in its turn and waits for its reply, or for ctx: a call
// still queued then fails with errNotSent; one already written with ctx's
// error (its fate on the node is unknown). Otherwise the error is in cmd.
func (p *pipe) do(ctx context.Context, cmd redis.Cmder) error {
	return p.doScript(ctx, cmd, nil, nil)
}

// doScript is do for cmd, a call of s with args (built by s.args), which
// a write may group with other calls of s; s nil for none.
func (p *pipe) doScript(ctx context.Context, cmd redis.Cmder, s *script, args []any) error {
	p.mu.Lock()
	if !p.busy {
		// Idle: write it ourselves, at once.
		p.busy = true
		p.mu.Unlock()
		p.write1(ctx, cmd)
		p.idle()
		return nil
	}
	c := pipeCalls.Get().(*pipeCall)
	c.ctx, c.cmd, c.weight, c.script, c.args = ctx, cmd, 1, s, args
	c.state.Store(callQueued)
	p.queue = append(p.queue, c)
	p.mu.Unlock()
	select {
	case <-c.done:
		c.ctx, c.cmd, c.script, c.args = nil, nil, nil, nil
		pipeCalls.Put(c)
		return nil
	case <-ctx.Done():
		if c.state.CompareAndSwap(callQueued, callAbandoned) {
			return fmt.Errorf("%w (%w)", errNotSent, ctx.Err())
		}
		return ctx.Err()
	}
}

// write1 writes one call and waits for its answer, bounded by its context.
func (p *pipe) write1(ctx context.Context, cmd redis.Cmder) {
	if p.durable != nil {
		p.writeDurable(ctx, []redis.Cmder{cmd})
		return
	}
	at := p.written()
	_ = p.rdb.Process(ctx, cmd)
	p.answered(at, cmd.Err())
}

// writeDurable is a write of a node with durable votes (durable.go).
func (p *pipe) writeDurable(ctx context.Context, cmds []redis.Cmder) {
	at := p.written()
	p.answered(at, p.durable.writeDurable(ctx, cmds))
}

// written records a write going out and returns its time.
func (p *pipe) written() int64 {
	at := max(int64(sinceEpoch()), 1)
	p.writtenAt.Store(at)
	return at
}

// answered records the end of the write sent at at.
func (p *pipe) answered(at int64, err error) {
	p.writtenAt.Store(0)
	if err == nil || !isTimeout(err) {
		p.answeredWrite.Store(at)
	}
}

// isTimeout tells whether err says a call got no answer in time.
func isTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout())
}

// idle ends a write: the pipe goes idle, or a drainer takes the calls that
// queued meanwhile.
func (p *pipe) idle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		p.busy = false
		return
	}
	if !p.drainer {
		p.drainer = true
		go p.drain()
	}
}

// drain writes the queued calls, a batch a write, until none is left.
func (p *pipe) drain() {
	for {
		p.mu.Lock()
		batch := p.take()
		if batch == nil {
			p.busy, p.drainer = false, false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		p.writeBatch(batch)
		p.mu.Lock()
		clear(batch)
		p.spare = batch[:0]
		p.mu.Unlock()
	}
}

// take moves queued calls of at most maxBatch weight in all (at least one)
// into a batch; nil if none is queued. The caller holds mu.
func (p *pipe) take() []*pipeCall {
	if len(p.queue) == 0 {
		return nil
	}
	n := slice(len(p.queue), func(i int) int { return p.queue[i].weight })
	batch := append(p.spare, p.queue[:n]...)
	p.spare = nil
	rest := copy(p.queue, p.queue[n:])
	clear(p.queue[rest:])
	p.queue = p.queue[:rest]
	return batch
}

// writeBatch writes the calls of batch that are still wanted, as one
// pipeline bounded by the latest of their deadlines, and tells each its
// answer. The calls of one script go as batched runs (see grouper).
func (p *pipe) writeBatch(batch []*pipeCall) {
	live := batch[:0] // filtered in place
	var deadline time.Time
	unbounded := false
	for _, c := range batch {
		if !c.state.CompareAndSwap(callQueued, callWritten) {
			continue // its caller gave up
		}
		live = append(live, c)
		d, ok := c.ctx.Deadline()
		unbounded = unbounded || !ok
		if d.After(deadline) {
			deadline = d
		}
	}
	switch len(live) {
	case 0:
		return
	case 1:
		p.write1(live[0].ctx, live[0].cmd)
	default:
		ctx := context.Background()
		if !unbounded {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		p.writeMany(ctx, p.group.commands(ctx, live, p.slotted != nil && p.slotted()))
		p.group.answer()
	}
	for _, c := range live {
		c.done <- struct{}{} // the last touch of c: its caller may recycle it at once
	}
}

// writeMany writes cmds as one pipeline and waits for the answers, bounded
// by ctx.
func (p *pipe) writeMany(ctx context.Context, cmds []redis.Cmder) {
	if len(cmds) == 1 {
		p.write1(ctx, cmds[0])
		return
	}
	if p.durable != nil {
		p.writeDurable(ctx, cmds)
		return
	}
	pl := p.rdb.Pipeline()
	for _, cmd := range cmds {
		_ = pl.Process(ctx, cmd)
	}
	at := p.written()
	_, err := pl.Exec(ctx)
	p.answered(at, err)
}

// runCmds sends cmds, the script calls of scripts[i] built from args[i],
// all queued at once so they share writes, and runs again by EVAL, in
// one more write, those the node did not know the script of. errs[i] is set
// when call i was not answered; otherwise its reply and error are in
// cmds[i], which may have been replaced by its EVAL.
func (p *pipe) runCmds(ctx context.Context, scripts []*script, args [][]any, cmds []redis.Cmder, weight func(i int) int, errs []error) {
	p.doMany(ctx, cmds, weight, errs)
	var retry []int // the calls the node did not know the script for
	for i, cmd := range cmds {
		if errs[i] == nil && cmd.Err() != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) == 0 {
		return
	}
	evals := make([]redis.Cmder, len(retry))
	retryErrs := make([]error, len(retry))
	for j, i := range retry {
		eval := make([]any, len(args[i]))
		copy(eval, args[i])
		eval[0], eval[1] = "eval", scripts[i].srcArg
		evals[j] = redis.NewIntSliceCmd(ctx, eval...)
	}
	p.doMany(ctx, evals, func(j int) int { return weight(retry[j]) }, retryErrs)
	for j, i := range retry {
		cmds[i], errs[i] = evals[j], retryErrs[j]
	}
}

// doMany is do for several commands, queued together: written at once in
// slices of maxBatch weight if the pipe is idle, else all in the next
// writes. weight(i) is the calls command i carries. errs[i] is set when
// command i was not answered (errNotSent, or ctx's error); otherwise its
// error is in the command.
func (p *pipe) doMany(ctx context.Context, cmds []redis.Cmder, weight func(i int) int, errs []error) {
	p.mu.Lock()
	if !p.busy {
		p.busy = true
		p.mu.Unlock()
		for done := 0; done < len(cmds); {
			n := slice(len(cmds)-done, func(i int) int { return weight(done + i) })
			p.writeMany(ctx, cmds[done:done+n])
			done += n
		}
		p.idle()
		return
	}
	calls := make([]*pipeCall, len(cmds))
	for i, cmd := range cmds {
		c := pipeCalls.Get().(*pipeCall)
		c.ctx, c.cmd, c.weight, c.script, c.args = ctx, cmd, weight(i), nil, nil
		c.state.Store(callQueued)
		calls[i] = c
	}
	p.queue = append(p.queue, calls...)
	p.mu.Unlock()
	for i, c := range calls {
		select {
		case <-c.done:
			c.ctx, c.cmd = nil, nil
			pipeCalls.Put(c)
		case <-ctx.Done():
			if c.state.CompareAndSwap(callQueued, callAbandoned) {
				errs[i] = fmt.Errorf("%w (%w)", errNotSent, ctx.Err())
			} else {
				errs[i] = ctx.Err()
			}
		}
	}
}

// slice is how many of the next n calls, of weight(i) each, one write
// takes: as many as fit in maxBatch, and at least one.
func slice(n int, weight func(i int) int) int {
	k, w := 0, 0
	for k < n && (k == 0 || w+weight(k) <= maxBatch) {
		w += weight(k)
		k++
	}
	return k
}

// sinceEpoch is the monotonic time the pipes record writes in.
func sinceEpoch() time.Duration { return time.Since(writeEpoch) }
