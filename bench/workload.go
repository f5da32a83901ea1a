package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/redis/go-redis/v9"
)

// Names of the workloads, as Config.Workloads and the tables spell them.
const (
	// WorkloadUncontended1: one worker, its own key, TryAcquire+Release in a loop.
	WorkloadUncontended1 = "uncontended-1"
	// WorkloadUncontended16: sixteen workers, a key each.
	WorkloadUncontended16 = "uncontended-16"
	// WorkloadUncontended64 and WorkloadUncontended256: the same with 64 and
	// 256 workers, where a library's per-node batching (or its lack) shows.
	WorkloadUncontended64  = "uncontended-64"
	WorkloadUncontended256 = "uncontended-256"
	// WorkloadContended16: sixteen workers on one key, each library's own
	// blocking wait. A holder keeps the lock for Config.Hold, releases, and
	// competes again only once another worker has it, so every acquisition
	// is a hand-off from a releaser to a waiter; reports the hand-off latency
	// from the start of the release to the next holder.
	WorkloadContended16 = "contended-16"
	// WorkloadContended16Clients: as WorkloadContended16, but each worker
	// has a lock client of its own, as sixteen processes would: a release
	// must reach the waiters through the nodes (pub/sub), not in process.
	// The go-redis connections are still shared.
	WorkloadContended16Clients = "contended-16-clients"
	// WorkloadSlowNode: WorkloadUncontended1 with node 0 behind a proxy that
	// delays its replies (Config.SlowLatency). Three nodes or more.
	WorkloadSlowNode = "slow-node"
	// WorkloadFencingFast: this library only, one worker, fencing tokens
	// issued in the acquire's own round trip.
	WorkloadFencingFast = "fencing-fast"
	// WorkloadFencingSlow: as WorkloadFencingFast, but every node's fence
	// register is seeded above the client's proposal before each acquire
	// (untimed), which forces the second round trip of the slow path.
	WorkloadFencingSlow = "fencing-slow"
	// WorkloadIdleSubscribers0, 10 and 100: this library only. One client's
	// four workers, a key each, TryAcquire+Release, beside 0, 10 or 100
	// other clients of this library with the same key prefix, each of which
	// waited once for a lock (held meanwhile, and given up on after a
	// short wait) and then sits idle. Shows what the busy client's release
	// announcements cost the idle clients and the servers: a release that
	// nobody waits for should cost nothing.
	WorkloadIdleSubscribers0   = "idle-subscribers-0"
	WorkloadIdleSubscribers10  = "idle-subscribers-10"
	WorkloadIdleSubscribers100 = "idle-subscribers-100"
	// WorkloadIdleSubscribers selects the three above (-workloads).
	WorkloadIdleSubscribers = "idle-subscribers"
)

// AllWorkloads lists every workload in the order tables show them.
var AllWorkloads = []string{
	WorkloadUncontended1, WorkloadUncontended16, WorkloadUncontended64, WorkloadUncontended256,
	WorkloadContended16, WorkloadContended16Clients,
	WorkloadSlowNode, WorkloadFencingFast, WorkloadFencingSlow, WorkloadHeldLocks,
	WorkloadIdleSubscribers0, WorkloadIdleSubscribers10, WorkloadIdleSubscribers100,
}

// workloadGroups are names that select several workloads at once.
var workloadGroups = map[string][]string{
	WorkloadIdleSubscribers: {WorkloadIdleSubscribers0, WorkloadIdleSubscribers10, WorkloadIdleSubscribers100},
}

// workload describes how one cell drives a contender.
type workload struct {
	name      string
	workers   int
	contended bool // one key, blocking acquire (Waiter contenders only)
	ownClient bool // contended: a lock client per worker (see PerWorker)
	slow      bool // the cluster's slow view
	fencing   bool // this library with fencing only, timed per operation
	forceSlow bool // seed the fence register before each acquire
	idleSubs  bool // an idle-subscribers workload (this library only)
	idle      int  // idle clients beside the measured one (see IdleMaker)
	held      bool // many auto-extended locks held at once (see held.go)
}

func workloadByName(name string) workload {
	switch name {
	case WorkloadUncontended16:
		return workload{name: name, workers: 16}
	case WorkloadUncontended64:
		return workload{name: name, workers: 64}
	case WorkloadUncontended256:
		return workload{name: name, workers: 256}
	case WorkloadHeldLocks:
		return workload{name: name, held: true}
	case WorkloadContended16:
		return workload{name: name, workers: 16, contended: true}
	case WorkloadContended16Clients:
		return workload{name: name, workers: 16, contended: true, ownClient: true}
	case WorkloadSlowNode:
		return workload{name: name, workers: 1, slow: true}
	case WorkloadFencingFast:
		return workload{name: name, workers: 1, fencing: true}
	case WorkloadFencingSlow:
		return workload{name: name, workers: 1, fencing: true, forceSlow: true}
	case WorkloadIdleSubscribers0:
		return workload{name: name, workers: 4, idleSubs: true}
	case WorkloadIdleSubscribers10:
		return workload{name: name, workers: 4, idleSubs: true, idle: 10}
	case WorkloadIdleSubscribers100:
		return workload{name: name, workers: 4, idleSubs: true, idle: 100}
	default:
		return workload{name: WorkloadUncontended1, workers: 1}
	}
}

// runsOn says whether the named contender takes part in this workload on n
// nodes.
func (w workload) runsOn(contender string, n int) bool {
	switch {
	case contender == ContenderRedislock && n != 1:
		return false // a single-instance lock
	case isRW(contender):
		return w.name == WorkloadUncontended1 || w.name == WorkloadUncontended16 // cycles beside the mutex's
	case w.slow && n < 3:
		return false // with one node slow out of one or two, every quorum waits for it
	case w.held:
		return contender == ContenderRedlock // WithAutoExtend is this library's
	case contender == ContenderRueidislock && w.slow:
		return false // its keys all live on node 0, the slow one: not the same fault
	case w.fencing, w.idleSubs:
		return contender == ContenderRedlock
	case w.contended:
		// The floor has no wait of its own; a semaphore admits several holders.
		return contender != ContenderFloor && contender != ContenderRedlockSemaphore
	}
	return true
}

// budget bounds a run by operation count and by time, whichever ends first.
type budget struct {
	ops   int64
	until time.Time
	hold  time.Duration // how long a contended worker keeps the lock
	// pause and resume, when set, take untimed work (seeding fence
	// registers) out of a go test benchmark's timer.
	pause, resume func()
}

// workerStats is one worker's tally; workers never share one, so recording
// needs no lock and no allocation.
type workerStats struct {
	ops, failures, violations int64
	firstErr                  error
	acquire, release, handoff histogram
	busy                      time.Duration // time inside timed operations
}

// fail counts a failed operation; only the first error is kept, and only it
// is wrapped, so a run full of failures does not allocate for each.
func (s *workerStats) fail(what string, err error) {
	s.failures++
	if s.firstErr == nil {
		if what != "" {
			err = fmt.Errorf("%s: %w", what, err)
		}
		s.firstErr = err
	}
}

// runStats is the merged tally of every worker of one run.
type runStats struct {
	workerStats
	elapsed time.Duration
}

func merge(workers []workerStats, elapsed time.Duration) runStats {
	out := runStats{elapsed: elapsed}
	for i := range workers {
		w := &workers[i]
		out.ops += w.ops
		out.failures += w.failures
		out.violations += w.violations
		out.busy += w.busy
		if out.firstErr == nil {
			out.firstErr = w.firstErr
		}
		out.acquire.merge(&w.acquire)
		out.release.merge(&w.release)
		out.handoff.merge(&w.handoff)
	}
	return out
}

// keyNames gives each worker its own lock name (all the same name when the
// workload is contended), built before the run so the loop allocates nothing.
func keyNames(w workload, prefix string) []string {
	names := make([]string, w.workers)
	for i := range names {
		if w.contended {
			names[i] = prefix
		} else {
			names[i] = fmt.Sprintf("%s:w%d", prefix, i)
		}
	}
	return names
}

// execute runs workload w once for contender c and returns the merged tally.
// view is the node set the contender was built on (the fencing workload
// seeds fence registers through it).
func execute(ctx context.Context, w workload, c Contender, view []redis.UniversalClient, prefix string, b budget) (runStats, error) {
	names := keyNames(w, prefix)
	stats := make([]workerStats, w.workers)
	var tickets atomic.Int64
	runCtx, cancel := context.WithDeadline(ctx, b.until)
	defer cancel()

	var worker func(i int)
	switch {
	case w.fencing:
		r, ok := c.(*redlockContender)
		if !ok {
			return runStats{}, fmt.Errorf("workload %s runs only this library, not %s", w.name, c.Name())
		}
		worker = func(i int) { fencingWorker(runCtx, r, view, names[i], w.forceSlow, b, &tickets, &stats[i]) }
	case w.contended:
		waiter, ok := c.(Waiter)
		if !ok {
			return runStats{}, fmt.Errorf("workload %s needs a blocking acquire, %s has none", w.name, c.Name())
		}
		waiters := make([]Waiter, w.workers)
		for i := range waiters {
			waiters[i] = waiter
			if perWorker, ok := c.(PerWorker); ok && w.ownClient {
				var err error
				if waiters[i], err = perWorker.ForWorker(i); err != nil {
					return runStats{}, err
				}
			}
		}
		handoff := newHandoffState(runCtx, b.hold)
		worker = func(i int) { contendedWorker(runCtx, waiters[i], names[i], b, &tickets, handoff, &stats[i]) }
	default:
		worker = func(i int) { uncontendedWorker(runCtx, c, names[i], b, &tickets, &stats[i], opHooks{}) }
	}

	start := time.Now()
	var wg sync.WaitGroup
	for i := range w.workers {
		wg.Go(func() { worker(i) })
	}
	wg.Wait()
	return merge(stats, time.Since(start)), nil
}

// warmUp runs a few operations of the workload on keys of their own before
// a measured run: every worker's connections get dialled (and probed, for
// this library), the scripts loaded, and a waiting library subscribed to its
// release channel, none of which a steady-state figure should contain.
func warmUp(ctx context.Context, w workload, c Contender, view []redis.UniversalClient, prefix string, hold time.Duration) error {
	ops := int64(4 * w.workers)
	if w.contended {
		ops = 4 // a few hand-offs: redsync's take 50-250ms each
	}
	stats, err := execute(ctx, w, c, view, prefix+":warmup", budget{ops: ops, until: time.Now().Add(time.Minute), hold: hold})
	if err != nil {
		return err
	}
	if stats.violations != 0 {
		return fmt.Errorf("%s/%s warm-up: %d violations; first error: %v", w.name, c.Name(), stats.violations, stats.firstErr)
	}
	return nil
}

// over tells whether a run's time is up. An operation that fails right at
// the deadline failed because of it (with ContextTimeoutEnabled, go-redis's
// socket deadline can fire a moment before ctx reports it), so it ends the
// worker instead of counting as a failure.
func (b budget) over(ctx context.Context) bool {
	return ctx.Err() != nil || !time.Now().Before(b.until)
}

// opHooks let a workload do untimed work before each operation and check
// each lock it took; the zero value does neither.
type opHooks struct {
	before  func() error // untimed; an error ends the worker
	checkIn func(Held)   // right after a successful acquire
}

// uncontendedWorker loops TryAcquire+Release on its own key.
func uncontendedWorker(ctx context.Context, c Contender, name string, b budget, tickets *atomic.Int64, s *workerStats, hooks opHooks) {
	// Releases outlive the run's deadline; made once, since a context per
	// operation would add an allocation the libraries do not make.
	releaseCtx := context.WithoutCancel(ctx)
	for tickets.Add(1) <= b.ops {
		if hooks.before != nil {
			if err := b.untimed(hooks.before); err != nil {
				s.fail("", err)
				return
			}
		}
		start := time.Now()
		if !start.Before(b.until) {
			return
		}
		held, err := c.TryAcquire(ctx, name)
		acquired := time.Now()
		if err != nil {
			if b.over(ctx) {
				return
			}
			s.fail("acquire", err)
			continue
		}
		s.acquire.record(acquired.Sub(start))
		if hooks.checkIn != nil {
			hooks.checkIn(held)
		}
		err = held.Release(releaseCtx)
		done := time.Now()
		if err != nil {
			s.fail("release", err)
			continue
		}
		s.release.record(done.Sub(acquired))
		s.busy += done.Sub(start)
		s.ops++
	}
}

// untimed runs step outside a go test benchmark's timer.
func (b budget) untimed(step func() error) error {
	if b.pause != nil {
		b.pause()
		defer b.resume()
	}
	return step()
}

// handoffState is shared by the workers of one contended run.
type handoffState struct {
	epoch time.Time
	// holders counts workers that believe they hold the lock; more than one
	// at a time is a mutual-exclusion violation.
	holders atomic.Int32
	// releasedAt is when the last holder started releasing, as nanoseconds
	// since epoch (monotonic); 0 before the first release.
	releasedAt atomic.Int64

	// A worker that just released waits until another worker has taken the
	// lock before it competes again, and a holder keeps the lock for hold
	// before releasing, long enough for the workers that stepped aside to be
	// waiting in the library's wait when it is released. Without these, a
	// library whose waiters sleep (redsync: 50-250ms) hands the lock straight
	// back to the releaser or to a fresh arrival, and the run measures an
	// uncontended loop; with them, every acquisition is a real hand-off from
	// a releaser to a waiter.
	hold        time.Duration
	mu          sync.Mutex
	taken       sync.Cond
	generation  int64 // acquisitions so far
	stopWaiting bool  // the run is over
}

func newHandoffState(ctx context.Context, hold time.Duration) *handoffState {
	h := &handoffState{epoch: time.Now(), hold: hold}
	h.taken.L = &h.mu
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		h.stopWaiting = true
		h.mu.Unlock()
		h.taken.Broadcast()
	})
	return h
}

// acquired counts one acquisition and returns its number.
func (h *handoffState) acquired() int64 {
	h.mu.Lock()
	h.generation++
	g := h.generation
	h.mu.Unlock()
	h.taken.Broadcast()
	return g
}

// waitTaken blocks until an acquisition after number g happened, the run is
// over, or no tickets are left for anyone to acquire with.
func (h *handoffState) waitTaken(g int64, tickets *atomic.Int64, limit int64) {
	h.mu.Lock()
	for h.generation == g && !h.stopWaiting && tickets.Load() < limit {
		h.taken.Wait()
	}
	h.mu.Unlock()
}

// leave wakes the waiters when a worker stops: it may have taken the last
// ticket without acquiring, and a waiter must then see the tickets are gone.
func (h *handoffState) leave() {
	h.mu.Lock()
	h.taken.Broadcast()
	h.mu.Unlock()
}

// contendedWorker loops the library's blocking Acquire on the shared key,
// releases at once, and steps aside until another worker has the lock, so
// the run measures hand-offs from a releaser to a waiter and nothing else.
func contendedWorker(ctx context.Context, w Waiter, name string, b budget, tickets *atomic.Int64, h *handoffState, s *workerStats) {
	defer h.leave()
	releaseCtx := context.WithoutCancel(ctx)
	for tickets.Add(1) <= b.ops {
		start := time.Now()
		held, err := w.Acquire(ctx, name)
		acquired := time.Now()
		if err != nil {
			if b.over(ctx) {
				return
			}
			s.fail("acquire", err)
			continue
		}
		if h.holders.Add(1) != 1 {
			s.violations++
		}
		if prev := h.releasedAt.Load(); prev != 0 {
			s.handoff.record(acquired.Sub(h.epoch) - time.Duration(prev))
		}
		generation := h.acquired()
		s.acquire.record(acquired.Sub(start))
		time.Sleep(h.hold)
		h.holders.Add(-1)
		releasing := time.Now()
		h.releasedAt.Store(int64(releasing.Sub(h.epoch)))
		err = held.Release(releaseCtx)
		done := time.Now()
		if err != nil {
			s.fail("release", err)
			continue
		}
		s.release.record(done.Sub(releasing))
		s.ops++
		h.waitTaken(generation, tickets, b.ops)
	}
}

// fenceSeedStart is above any proposal a client makes from its clock (unix
// microseconds are about 1.8e15 today), so a register seeded with it forces
// the slow path.
const fenceSeedStart = 9_000_000_000_000_000

// fencingWorker loops TryAcquire+Release with this library and checks every
// token: strictly increasing, and on the forced slow path exactly one above
// the seeded register (anything else means the slow path was not taken).
//
// The client proposes max(highest token it has seen + 1, its clock in µs),
// and the highest token seen is client-wide, not per name: after one slow
// run it is above fenceSeedStart. So the worker first takes the lock once,
// untimed, to learn where the client's proposals are, and seeds every
// register 1000 above the last token before each acquire (untimed too).
func fencingWorker(ctx context.Context, r *redlockContender, nodes []redis.UniversalClient, name string, forceSlow bool, b budget, tickets *atomic.Int64, s *workerStats) {
	untimedCtx := context.WithoutCancel(ctx)
	var last, seed int64
	if err := b.untimed(func() error {
		lock, err := r.client.TryAcquire(untimedCtx, name)
		if err != nil {
			return fmt.Errorf("first, untimed acquire: %w", err)
		}
		last = lock.Token()
		return lock.Release(untimedCtx)
	}); err != nil {
		s.fail("", err)
		return
	}
	var hooks opHooks
	hooks.checkIn = func(held Held) {
		token := held.(*redlock.Lock).Token()
		switch {
		case token <= last:
			s.violations++
			s.fail("", fmt.Errorf("token %d after %d: not increasing", token, last))
		case forceSlow && token != seed+1:
			s.fail("", fmt.Errorf("token %d with every fence register at %d: the slow path would give %d", token, seed, seed+1))
		}
		last = token
	}
	if forceSlow {
		fenceKey := r.client.Keys(name).Fence
		hooks.before = func() error {
			seed = max(last+1000, fenceSeedStart)
			return seedFence(untimedCtx, nodes, fenceKey, seed)
		}
	}
	uncontendedWorker(ctx, r, name, b, tickets, s, hooks)
}

// seedFence sets the fence register on every node. Every node, not only a
// quorum: then any quorum the acquire wins holds the seed, and the expected
// token is exactly seed+1.
func seedFence(ctx context.Context, nodes []redis.UniversalClient, fenceKey string, value int64) error {
	var errs []error
	for _, node := range nodes {
		if err := node.Set(ctx, fenceKey, value, 0).Err(); err != nil {
			errs = append(errs, fmt.Errorf("seed fence register %s: %w", fenceKey, err))
		}
	}
	return errors.Join(errs...)
}
