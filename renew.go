package redlock

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"
)

// renewals is the client's one scheduler of auto-extensions: a heap of held
// locks by the time their next renewal falls due, and one goroutine that
// sleeps until the earliest. The renewals that fall due together go to each
// node as one batch (one write on its pipe), and each lock is then decided
// on its own: a lock whose renewal found another owner closes its Done at
// once, and a node that fails the batch fails it for every lock of the
// batch, which still counts only as that node's failure in each lock's
// quorum. Holding many locks thus costs one timer and a few writes per
// node per renewal round, not a goroutine, a timer and N round trips per
// lock.
type renewals struct {
	c      *Client
	mu     sync.Mutex
	queue  renewalHeap
	wake   chan struct{} // an earlier renewal was queued, or the client closes
	loop   bool          // the scheduling goroutine runs
	closed bool
}

// renewal is one auto-extended lock in the scheduler.
type renewal struct {
	l          *Lock
	extensions int
	lean       bool // WithLeanRenewal: due once two thirds of the remaining validity passed
	// deadline is the lock's deadline when its round was made (renew).
	deadline time.Time
	// args is the lock's extend command, built at its first renewal that
	// runs by EVALSHA: nothing in it changes while the lock is held, so a
	// round neither rebuilds nor re-boxes it.
	args []any
}

// extendArgs gives rn's extend command (see renewal.args). Its numbers go
// as decimal strings, which is how go-redis writes them: the same bytes on
// the wire, formatted once, not once per node and round.
func (rn *renewal) extendArgs() []any {
	if rn.args != nil {
		return rn.args
	}
	args := rn.l.extendArgs()
	if args[0] != "evalsha" {
		return args // by EVAL until the SHA is known: not worth keeping
	}
	for i := 3 + args[2].(int); i < len(args); i++ {
		switch v := args[i].(type) {
		case int:
			args[i] = strconv.Itoa(v)
		case int64:
			args[i] = strconv.FormatInt(v, 10)
		}
	}
	rn.args = args
	return args
}

// renewalCoalesce is how early a renewal may go out to join a batch: a
// renewal is due once a third of the remaining validity has passed (two
// thirds are left, room for a retry), and going a little earlier costs
// nothing.
func renewalCoalesce(ttl time.Duration) time.Duration { return min(ttl/30, 50*time.Millisecond) }

// add schedules l's first renewal; lean as WithLeanRenewal.
func (r *renewals) add(l *Lock, lean bool) {
	r.schedule(&renewal{l: l, lean: lean})
}

// schedule queues rn for a third of its lock's remaining validity from now
// (two thirds if lean), or drops it when the lock ended, has been extended as often as asked, or
// has too little validity left to finish a renewal: it then expires.
func (r *renewals) schedule(rn *renewal) {
	l := rn.l
	now := r.c.clock.Now()
	remaining := l.Deadline().Sub(now)
	if l.Err() != nil || remaining < 2*l.nodeTimeout() ||
		(l.maxExtensions > 0 && rn.extensions >= l.maxExtensions) {
		return
	}
	due := now.Add(remaining / 3)
	if rn.lean {
		due = now.Add(remaining * 2 / 3)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.queue.push(due, rn)
	if r.wake == nil {
		r.wake = make(chan struct{}, 1)
	}
	if !r.loop {
		r.loop = true
		r.c.bg.add()
		go r.run()
	} else if r.queue[0].rn == rn {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// run sends the renewals as they fall due, until none is left or the
// client closes.
func (r *renewals) run() {
	defer r.c.bg.done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		if r.closed || len(r.queue) == 0 {
			r.loop = false
			r.mu.Unlock()
			return
		}
		now := r.c.clock.Now()
		if wait := r.queue[0].due.Sub(now); wait > 0 {
			wake := r.wake
			r.mu.Unlock()
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-wake:
				if !timer.Stop() {
					<-timer.C
				}
			}
			continue
		}
		var batch []*renewal
		for len(r.queue) > 0 && !r.queue[0].due.After(now.Add(renewalCoalesce(r.queue[0].rn.l.a.ttl))) {
			batch = append(batch, r.queue.pop())
		}
		r.mu.Unlock()
		r.c.bg.add()
		go func() {
			defer r.c.bg.done()
			r.renew(batch)
		}()
	}
}

// close stops the renewals: the locks still held expire with their TTL.
func (r *renewals) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	r.queue = nil
	if r.wake != nil {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// renew extends every lock of batch in one round: each node gets all of
// them in one batch, and each lock is decided by its own quorum.
func (r *renewals) renew(batch []*renewal) {
	c := r.c
	// One extend or release at a time per lock (Lock.extendMu): a lock
	// busy with its holder's own call is tried again soon. A lock that
	// ended, or whose validity passed while the client was paused (before
	// Done's timer got to it), gets no renewal: it is lost, whatever the
	// nodes would answer now.
	live := batch[:0]
	for _, rn := range batch {
		if !rn.l.extendMu.TryLock() {
			r.schedule(rn)
			continue
		}
		if rn.l.endIfExpired() != nil {
			rn.l.extendMu.Unlock()
			continue
		}
		rn.deadline = rn.l.Deadline()
		live = append(live, rn)
	}
	if len(live) == 0 {
		return
	}
	// Most urgent first: the nodes get the calls in this order. A round
	// that runs late carries every overdue renewal, and the heap gives
	// them by when they fell due, which is not when they expire (a lock
	// with a shorter TTL, or one whose last renewal failed, can fall due
	// later and expire sooner); where the round is cut short (its
	// timeout, below), the locks that could still wait are the ones left.
	slices.SortFunc(live, func(x, y *renewal) int { return x.deadline.Compare(y.deadline) })
	// A renewal has more time than an acquire: it runs with a third of the
	// validity left, and the validity it gets back is measured from its
	// start. Waiting longer than the node timeout for a busy node (or a
	// busy client) costs some of that validity; giving up costs the round.
	timeout := live[0].l.nodeTimeout()
	for _, rn := range live {
		timeout = max(timeout, rn.l.nodeTimeout())
	}
	timeout = max(timeout, live[0].deadline.Sub(c.clock.Now())/3)
	locks := make([]*Lock, len(live))
	cmds := make([][]any, len(live))
	for k, rn := range live {
		locks[k], cmds[k] = rn.l, rn.extendArgs()
	}
	start, decided, errs := c.extendBatch(context.Background(), locks, cmds, timeout)
	for k, rn := range live {
		l := rn.l
		if l.extended(context.Background(), start, decided[k], errs[k], nil) == nil {
			rn.extensions++
		}
		l.extendMu.Unlock()
		r.schedule(rn)
	}
}

// extendBatch sends the extend of every lock of batch to each node as one
// batch, and gives each lock's *QuorumError, nil where a quorum renewed it,
// with the time the round started, from which the new validities count,
// and the time each lock's round was decided: when the last answer of its
// quorum came in, or, short of a quorum, when the round ended. cmds are the
// locks' extend commands, nil to build them. The caller holds every lock's
// extendMu.
func (c *Client) extendBatch(parent context.Context, batch []*Lock, cmds [][]any, timeout time.Duration) (start time.Time, decided []time.Time, errs []error) {
	type answer struct {
		yes bool
		err error
		at  time.Time // when the answer came in
	}
	answers := make([][]answer, len(c.nodes)) // per node, per lock
	start = c.clock.Now()
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	// Each lock's command, and its first key (the guards' per-slot key),
	// is the same on every node.
	if cmds == nil {
		cmds = make([][]any, len(batch))
		for k, l := range batch {
			cmds[k] = l.extendArgs()
		}
	}
	keys := make([]string, len(batch))
	for k, a := range cmds {
		keys[k] = scriptKey(a)
	}
	// The batched commands of the nodes sent every lock, built once for
	// the standalone nodes and once for the Cluster ones.
	var plans [2]struct {
		once sync.Once
		cmds []batchCommand
	}
	// And their native forms (native.go), built once too.
	var sets struct {
		once sync.Once
		cmds [][]any
	}
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		answers[i] = make([]answer, len(batch))
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := answers[i]
			if err := c.renewalGuardsPass(ctx, n, ""); err != nil {
				for k := range got {
					got[k].err = err
				}
				return
			}
			sent := make([]int, 0, len(batch)) // indices of the locks sent to n
			args := make([][]any, 0, len(batch))
			kinds := make([]*script, 0, len(batch))
			specs := make([]*kindSpec, 0, len(batch))
			// The register is checked once per TTL in the round: the
			// locks of a batch mostly share one.
			var regTTL time.Duration
			var regErr error
			for k, l := range batch {
				if k == 0 || l.a.ttl != regTTL {
					regTTL, regErr = l.a.ttl, c.registered(ctx, n, l.a.ttl, timeout)
				}
				if regErr != nil {
					got[k].err = regErr
					continue
				}
				if !l.a.enter(n) {
					got[k].err = ErrNotHeld
					continue
				}
				sent = append(sent, k)
				args = append(args, cmds[k])
				kinds = append(kinds, l.a.spec.extend)
				specs = append(specs, l.a.spec)
			}
			var vals [][]int64
			var errs []error
			at := c.clock.Now()
			var nativeSets [][]any // the round's, when n sent every lock
			if len(sent) == len(batch) && nativeExtendOK(n) {
				sets.once.Do(func() { sets.cmds, _ = bareExtends(specs, args) })
				nativeSets = sets.cmds
			}
			if v, e, native := nativeExtend(ctx, n, specs, args, nativeSets); native {
				// The server's own compare-and-set (native.go).
				vals, errs = v, e
			} else if len(sent) == len(batch) && n.pipes != nil {
				// Sent every lock: the plan of every node sent every
				// lock (of its kind, standalone or Cluster) is the same.
				slotted := n.slotted()
				p := &plans[b2i(slotted)]
				p.once.Do(func() { p.cmds = planBatched(kinds, args, slotted, len(n.pipes.acquire)) })
				vals, errs = runPlan(ctx, n, p.cmds, len(args))
			} else {
				vals, errs = runBatched(ctx, n, kinds, args)
			}
			recv := c.clock.Now() // every answer of n came in by now
			for j, k := range sent {
				yes, err := batch[k].extendAnswer(ctx, n, keys[k], vals[j], errs[j], at, recv)
				if err != nil {
					c.failed(n, err, timeout)
				}
				got[k] = answer{yes: yes, err: err}
			}
			// Each lock's answer is dated once all of n's were judged
			// (a recheck may have probed n): no earlier than any of them.
			done := c.clock.Now()
			for _, k := range sent {
				got[k].at = done
			}
		}()
	}
	wg.Wait()
	end := c.clock.Now()

	decided = make([]time.Time, len(batch))
	errs = make([]error, len(batch))
	yes := make([]time.Time, 0, len(c.nodes))
	quorum := c.quorum()
	for k, l := range batch {
		yes = yes[:0]
		for i := range c.nodes {
			if a := answers[i][k]; a.yes {
				yes = append(yes, a.at)
			}
		}
		if len(yes) >= quorum {
			slices.SortFunc(yes, time.Time.Compare)
			decided[k] = yes[quorum-1]
			continue
		}
		// Short of a quorum: only then is the error built (a round of
		// renewed locks allocates none).
		decided[k] = end
		qe := &QuorumError{Op: "extend", Name: l.a.name, Needed: quorum, Won: len(yes)}
		for i, n := range c.nodes {
			if a := answers[i][k]; !a.yes && a.err != nil {
				qe.Errors = multierror.Append(qe.Errors, &NodeError{Node: n.name, Err: a.err})
			}
		}
		errs[k] = qe
	}
	return start, decided, errs
}

// runBatched runs the script calls args[i] of scripts[i] on n, all in one
// write where n has a pipe, and gives each call's reply and error. The calls
// of one script (and, on a Cluster node, of one hash slot) go as runs of its
// batched form, up to batchBound calls a run; a call alone in its group
// stays a plain call of its script. Each call's answer is its own, as if it
// had run alone: a lock whose script failed on the node gets that error,
// and a batch the node did not answer fails for each of its calls.
func runBatched(ctx context.Context, n *node, scripts []*script, args [][]any) ([][]int64, []error) {
	if n.pipes == nil { // a test fake
		vals := make([][]int64, len(args))
		errs := make([]error, len(args))
		for i, a := range args {
			vals[i], errs[i] = n.run.run(ctx, scripts[i], a)
		}
		return vals, errs
	}
	return runPlan(ctx, n, planBatched(scripts, args, n.slotted(), len(n.pipes.acquire)), len(args))
}

// batchCommand is one command of a batched send: a lone call, or a chunk of
// a group's calls as one run of its script's batched form.
type batchCommand struct {
	s     *script // the script the command runs (a batched form, or the plain one)
	of    *script // the script whose calls it answers
	args  []any
	calls []int
}

// planBatched groups the calls args[i] of scripts[i] into the commands
// runPlan sends (see runBatched); slotted groups them by hash slot too, and
// the calls of scripts that go on the lanes of the nodes' acquire streams by
// their lane of lanes. The plan depends only on the calls, so nodes sent the
// same calls share one (every node of a client has as many lanes): its
// commands are only read.
func planBatched(scripts []*script, args [][]any, slotted bool, lanes int) []batchCommand {
	type group struct {
		s    *script
		slot int // the calls' hash slot, where it decides; -1 for any
		lane int // the calls' lane (laneOf), for scripts not sent on the renewal pipe; -1 for any
	}
	var order []group
	members := make(map[group][]int)
	if same := !slotted && len(scripts) > 0 && (scripts[0].renewal || lanes <= 1) && !slices.ContainsFunc(scripts, func(s *script) bool { return s != scripts[0] }); same {
		// The common case: one script on one pipe, no slots.
		all := make([]int, len(scripts))
		for i := range all {
			all[i] = i
		}
		order = append(order, group{scripts[0], -1, -1})
		members[order[0]] = all
	} else {
		for i, s := range scripts {
			g := group{s, -1, -1}
			switch {
			case slotted:
				g.slot = keySlot(scriptKey(args[i])) // the slot decides the lane too
			case !s.renewal:
				// A batched run goes to one lane (nodePipes.of): its
				// calls must all belong there.
				g.lane = laneOf(scriptKey(args[i]), lanes)
			}
			if _, ok := members[g]; !ok {
				order = append(order, g)
			}
			members[g] = append(members[g], i)
		}
	}
	var cmds []batchCommand
	for _, g := range order {
		idx := members[g]
		for len(idx) > 0 {
			chunk := idx[:min(len(idx), batchBound)]
			idx = idx[len(chunk):]
			if len(chunk) == 1 {
				cmds = append(cmds, batchCommand{g.s, g.s, args[chunk[0]], chunk})
				continue
			}
			group := make([][]any, len(chunk))
			for j, i := range chunk {
				group[j] = args[i]
			}
			cmds = append(cmds, batchCommand{g.s.batched, g.s, g.s.batchArgs(group, false), chunk})
		}
	}
	return cmds
}

// runPlan sends the commands of plan, which answer calls calls in all, to
// n, each pipe's in one write, the pipes' writes at once, and gives each
// call's reply and error.
func runPlan(ctx context.Context, n *node, plan []batchCommand, calls int) ([][]int64, []error) {
	vals := make([][]int64, calls)
	errs := make([]error, calls)
	// Each command goes to its pipe: the renewal scripts all to the
	// renewal pipe, the others to their lanes (planBatched made each
	// batched run of one lane's calls).
	var pipes []*pipe
	var parts [][]batchCommand
	for _, c := range plan {
		p := n.pipes.of(c.s, c.args)
		i := slices.Index(pipes, p)
		if i < 0 {
			i = len(pipes)
			pipes, parts = append(pipes, p), append(parts, nil)
		}
		parts[i] = append(parts[i], c)
	}
	// A call is answered by one command, so the sends fill disjoint
	// entries of vals and errs.
	send := func(p *pipe, mine []batchCommand) {
		runs := make([]*script, len(mine))
		cargs := make([][]any, len(mine))
		rcmds := make([]redis.Cmder, len(mine))
		rerrs := make([]error, len(mine))
		for j, c := range mine {
			runs[j], cargs[j] = c.s, c.args
			rcmds[j] = redis.NewIntSliceCmd(ctx, c.args...)
		}
		p.runCmds(ctx, runs, cargs, rcmds, func(j int) int { return len(mine[j].calls) }, rerrs)
		for j, c := range mine {
			if len(c.calls) == 1 {
				i := c.calls[0]
				if errs[i] = rerrs[j]; errs[i] == nil {
					vals[i], errs[i] = rcmds[j].(*redis.IntSliceCmd).Val(), c.of.explain(rcmds[j].Err())
				}
				continue
			}
			splitBatch(c.of, rcmds[j].(*redis.IntSliceCmd), rerrs[j], c.calls, vals, errs)
		}
	}
	var wg sync.WaitGroup
	for i := 1; i < len(pipes); i++ {
		wg.Go(func() { send(pipes[i], parts[i]) })
	}
	if len(pipes) > 0 {
		send(pipes[0], parts[0])
	}
	wg.Wait()
	return vals, errs
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// renewalHeap orders renewals by due time. Its entries hold the due time
// itself, not only the renewal: the comparisons of a heap of 10,000 held
// locks then read one array, not 10,000 scattered renewals (a held-locks
// profile showed them at 4% of the client's CPU through pointers).
type renewalHeap []renewalEntry

type renewalEntry struct {
	due time.Time
	rn  *renewal
}

func (h *renewalHeap) push(due time.Time, rn *renewal) {
	*h = append(*h, renewalEntry{due, rn})
	q := *h
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q[i].due.Before(q[parent].due) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

// pop removes and gives the renewal due first.
func (h *renewalHeap) pop() *renewal {
	q := *h
	top := q[0].rn
	last := len(q) - 1
	q[0] = q[last]
	q[last] = renewalEntry{}
	q = q[:last]
	for i := 0; ; {
		first, l, r := i, 2*i+1, 2*i+2
		if l < len(q) && q[l].due.Before(q[first].due) {
			first = l
		}
		if r < len(q) && q[r].due.Before(q[first].due) {
			first = r
		}
		if first == i {
			break
		}
		q[i], q[first] = q[first], q[i]
		i = first
	}
	*h = q
	return top
}
