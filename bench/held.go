package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
)

// WorkloadHeldLocks: one client of this library takes Config.HeldCounts
// locks with WithAutoExtend and a TTL of HeldTTL, heldBatch at a time, holds
// them for Config.HeldFor and measures what holding costs the client and the
// servers in CPU per second, and how many locks were lost meanwhile. It is
// not a throughput workload: its figures go to Results.Held and a table of
// their own.
const WorkloadHeldLocks = "held-locks"

// HeldTTL is the TTL of the held locks: short, so that extensions are
// frequent (the extender renews a third of the remaining validity before it
// ends, about once a second at 3s) and their cost shows within a run.
const HeldTTL = 3 * time.Second

// heldBatch is how many acquires are in flight at once while the locks are
// taken, and releases while they are given back.
const heldBatch = 64

// heldSettle is how long the locks are held, unmeasured, before the
// measurement starts, so the first round of extensions of the last locks
// taken has begun and no acquire is still in flight.
const heldSettle = time.Second

// Held-locks defaults.
var DefaultHeldCounts = []int{1_000, 10_000, 50_000}

const DefaultHeldFor = 10 * time.Second

// HeldRun is one held-locks run: Locks locks held by one client on Nodes
// nodes for HeldFor.
type HeldRun struct {
	Nodes   int           `json:"nodes"`
	Locks   int           `json:"locks"`
	Repeat  int           `json:"repeat"`
	HeldFor time.Duration `json:"held_for_ns"`
	// AcquireAll is the wall time taking every lock took, heldBatch at a time.
	AcquireAll time.Duration `json:"acquire_all_ns"`
	// ClientCPU and ServerCPU are CPU seconds per second of holding (1 is
	// one core busy), of this process and of all nodes together.
	ClientCPU float64 `json:"client_cpu_per_sec"`
	ServerCPU float64 `json:"server_cpu_per_sec"`
	// ExtendsPerSec counts the extensions that succeeded while measured.
	ExtendsPerSec float64 `json:"extends_per_sec"`
	// ExtendFailures counts extensions that failed while measured (a
	// retried failure is not a loss; Lost says whether one became one).
	ExtendFailures int64 `json:"extend_failures"`
	// Lost counts locks whose Done was closed before they were released,
	// and releases that reported the lock lost. It must be 0.
	Lost int64 `json:"lost"`
	// Failures counts acquires that failed three times in a row (the lock is
	// then not held at all) and releases that failed otherwise.
	Failures   int64  `json:"failures"`
	FirstError string `json:"first_error,omitempty"`
	// Goroutines and HeapInUse are taken in the middle of the hold.
	Goroutines int    `json:"goroutines"`
	HeapInUse  uint64 `json:"heap_in_use_bytes"`
	// FirstLoss is when the first lock was lost, counted from the start of
	// the acquires (0: none was); FirstExtendError is the first failed
	// extension's error. Together they tell an overload (extensions time
	// out while the locks are still being taken) from a bug.
	FirstLoss        time.Duration `json:"first_loss_ns,omitempty"`
	FirstExtendError string        `json:"first_extend_error,omitempty"`
}

// heldCounter counts the client's lock events for a held-locks run.
type heldCounter struct {
	start                  time.Time
	extended, extendFailed atomic.Int64
	firstLoss              atomic.Int64 // nanoseconds since start
	mu                     sync.Mutex
	firstExtendErr         error
}

func (h *heldCounter) Observe(e observe.Event) {
	switch e.Kind {
	case observe.Extended:
		h.extended.Add(1)
	case observe.ExtendFailed:
		if h.extendFailed.Add(1) == 1 {
			h.mu.Lock()
			h.firstExtendErr = e.Err
			h.mu.Unlock()
		}
	case observe.Lost:
		h.firstLoss.CompareAndSwap(0, int64(time.Since(h.start)))
	}
}

// runHeld does one held-locks run with a client of its own, so nothing of
// the throughput workloads' clients (their subscriptions, their pipes' state)
// is measured, and closes it after.
func runHeld(ctx context.Context, nodes []redis.UniversalClient, n, locks, rep int, holdFor time.Duration, lean bool) (run HeldRun, err error) {
	renew := redlock.WithAutoExtend()
	if lean {
		renew = redlock.WithLeanRenewal()
	}
	run = HeldRun{Nodes: n, Locks: locks, Repeat: rep, HeldFor: holdFor}
	counter := &heldCounter{}
	client, err := redlock.New(nodes, redlock.Options{
		// As newRedlockContender, for the same reason: fresh nodes.
		RestartGrace:          redlock.NoRestartGrace,
		AllowNoFaultTolerance: len(nodes) < 3, // the matrix measures 1 node too
		KeyPrefix:             fmt.Sprintf("held:n%d:%d:r%d:", n, locks, rep),
		Observer:              counter,
	})
	if err != nil {
		return run, err
	}
	defer func() { err = errors.Join(err, client.Close()) }()
	if err := checkVoting(ctx, client); err != nil {
		return run, err
	}

	var firstErr error
	var errMu sync.Mutex
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		run.Failures++
		if firstErr == nil {
			firstErr = err
		}
	}

	held := make([]*redlock.Lock, locks)
	start := time.Now()
	counter.start = start
	inBatches(locks, func(i int) {
		name := fmt.Sprintf("lock%d", i)
		var err error
		// A busy machine can fail an attempt now and then; a lock not
		// taken at all would make the run hold fewer than it says.
		for range 3 {
			if held[i], err = client.TryAcquire(ctx, name, redlock.WithTTL(HeldTTL), renew); err == nil {
				// Watched as a holder would: Done is how a holder learns
				// of a loss, and arming it costs each lock a timer.
				held[i].Done()
				return
			}
		}
		fail(fmt.Errorf("acquire %s: %w", name, err))
	})
	run.AcquireAll = time.Since(start)

	select {
	case <-ctx.Done():
	case <-time.After(heldSettle):
	}
	extendedBefore, failedBefore := counter.extended.Load(), counter.extendFailed.Load()
	cpuBefore, err := sampleCPU(ctx, nodes)
	if err != nil {
		return run, err
	}
	measureStart := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(holdFor / 2):
	}
	run.Goroutines = runtime.NumGoroutine()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	run.HeapInUse = mem.HeapInuse
	select {
	case <-ctx.Done():
	case <-time.After(holdFor - holdFor/2):
	}
	cpuAfter, err := sampleCPU(ctx, nodes)
	if err != nil {
		return run, err
	}
	elapsed := time.Since(measureStart).Seconds()
	run.ClientCPU = (cpuAfter.client - cpuBefore.client).Seconds() / elapsed
	run.ServerCPU = (cpuAfter.servers - cpuBefore.servers).Seconds() / elapsed
	run.ExtendsPerSec = float64(counter.extended.Load()-extendedBefore) / elapsed
	run.ExtendFailures = counter.extendFailed.Load() - failedBefore

	var lost atomic.Int64
	for _, l := range held {
		if l == nil {
			continue
		}
		select {
		case <-l.Done():
			lost.Add(1)
		default:
		}
	}
	releaseCtx := context.WithoutCancel(ctx)
	inBatches(locks, func(i int) {
		l := held[i]
		if l == nil {
			return
		}
		select {
		case <-l.Done():
			return // counted above; its release would only say so again
		default:
		}
		switch err := l.Release(releaseCtx); {
		case errors.Is(err, redlock.ErrLockLost):
			lost.Add(1)
		case err != nil:
			fail(fmt.Errorf("release %s: %w", l.Name(), err))
		}
	})
	run.Lost = lost.Load()
	run.FirstLoss = time.Duration(counter.firstLoss.Load())
	counter.mu.Lock()
	if counter.firstExtendErr != nil {
		run.FirstExtendError = counter.firstExtendErr.Error()
	}
	counter.mu.Unlock()
	if firstErr != nil {
		run.FirstError = firstErr.Error()
	}
	return run, ctx.Err()
}

// inBatches calls do(i) for every i below count from heldBatch goroutines.
func inBatches(count int, do func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(heldBatch, count) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < count; i = int(next.Add(1) - 1) {
				do(i)
			}
		})
	}
	wg.Wait()
}

// HeldCell is the median over the repeats of one held-locks size.
type HeldCell struct {
	Nodes          int           `json:"nodes"`
	Locks          int           `json:"locks"`
	Repeats        int           `json:"repeats"`
	HeldFor        time.Duration `json:"held_for_ns"`
	AcquireAll     time.Duration `json:"acquire_all_ns"`
	ClientCPU      float64       `json:"client_cpu_per_sec"`
	ServerCPU      float64       `json:"server_cpu_per_sec"`
	ExtendsPerSec  float64       `json:"extends_per_sec"`
	ExtendFailures int64         `json:"extend_failures"` // summed over repeats
	Lost           int64         `json:"lost"`            // summed over repeats
	Failures       int64         `json:"failures"`        // summed over repeats
	Goroutines     int           `json:"goroutines"`
	HeapInUse      uint64        `json:"heap_in_use_bytes"`
}

// summarizeHeld takes the medians per (nodes, locks), in that order.
func summarizeHeld(runs []HeldRun) []HeldCell {
	type key struct{ nodes, locks int }
	groups := map[key][]HeldRun{}
	var order []key
	for _, r := range runs {
		k := key{r.Nodes, r.Locks}
		if _, seen := groups[k]; !seen {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	slices.SortStableFunc(order, func(a, b key) int {
		if a.nodes != b.nodes {
			return a.nodes - b.nodes
		}
		return a.locks - b.locks
	})
	cells := make([]HeldCell, 0, len(order))
	for _, k := range order {
		g := groups[k]
		c := HeldCell{
			Nodes: k.nodes, Locks: k.locks, Repeats: len(g), HeldFor: g[0].HeldFor,
			AcquireAll:    time.Duration(median(g, func(r HeldRun) float64 { return float64(r.AcquireAll) })),
			ClientCPU:     median(g, func(r HeldRun) float64 { return r.ClientCPU }),
			ServerCPU:     median(g, func(r HeldRun) float64 { return r.ServerCPU }),
			ExtendsPerSec: median(g, func(r HeldRun) float64 { return r.ExtendsPerSec }),
			Goroutines:    int(median(g, func(r HeldRun) float64 { return float64(r.Goroutines) })),
			HeapInUse:     uint64(median(g, func(r HeldRun) float64 { return float64(r.HeapInUse) })),
		}
		for _, r := range g {
			c.ExtendFailures += r.ExtendFailures
			c.Lost += r.Lost
			c.Failures += r.Failures
		}
		cells = append(cells, c)
	}
	return cells
}
