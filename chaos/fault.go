package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Fault is one named, parameterised failure that can be applied and
// healed. Faults are plain values: a scenario lists them, the report
// prints their names, and the nemesis applies and heals them on schedule.
type Fault interface {
	// Name says what the fault does and to what, e.g.
	// "latency(n0,n1 40ms±30ms)".
	Name() string
	Apply(ctx context.Context, env *Env) error
	Heal(ctx context.Context, env *Env) error
}

// Env is what faults act on during one run.
type Env struct {
	Cluster *Cluster
	Net     *Net
	Rec     *Recorder
	Log     *slog.Logger
	// replicas maps a master's node index to its replica and link (none
	// unless the scenario has replicas).
	replicas map[int]replication
	// spares is the number of lock nodes when each has a spare server
	// beside it (Scenario.SpareReplicas: n<spares+i> for n<i>), else 0.
	spares int
	// ScanKeys are every key no node may keep once no client holds the
	// lock (the lock key first; see scannedKeys), Clients the number of
	// workload clients (for Quiesce).
	ScanKeys []string
	Clients  int
	// OrphanAfter is how long a lock key may stay on a node once every
	// client is parked before Quiesce counts it as left behind (see
	// orphanAfter).
	OrphanAfter time.Duration

	clients clientControl
	// fresh gives client i a new locker, as a new process (StepFresh).
	fresh func(i int) error

	mu         sync.Mutex
	background map[string]*background // running faults, by name

	clocks clockOffsets[int] // each node's, by index
}

// background is a fault that keeps acting until healed (flapping, a fast
// clock). Its state lives in the Env, so fault values stay plain data
// that concurrent runs can share.
type background struct {
	cancel context.CancelFunc
	done   chan error
}

// startBackground runs fn until stopBackground(name); fn returns when its
// ctx ends.
func (e *Env) startBackground(name string, fn func(ctx context.Context) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.background == nil {
		e.background = map[string]*background{}
	}
	if _, running := e.background[name]; running {
		return fmt.Errorf("chaos: fault %s is already applied", name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{cancel: cancel, done: make(chan error, 1)}
	e.background[name] = b
	go func() { b.done <- fn(ctx) }()
	return nil
}

// stopBackground stops what startBackground(name) started and returns
// its error; nothing running is not an error.
func (e *Env) stopBackground(name string) error {
	e.mu.Lock()
	b := e.background[name]
	delete(e.background, name)
	e.mu.Unlock()
	if b == nil {
		return nil
	}
	b.cancel()
	return <-b.done
}

// Note records a nemesis step on the timeline.
func (e *Env) Note(format string, args ...any) {
	d := fmt.Sprintf(format, args...)
	e.Rec.Record(Event{Kind: NemesisNote, Client: NoClient, Detail: d})
	e.Log.Info("nemesis: " + d)
}

// node returns node i or an error naming the bad index.
func (e *Env) node(i int) (Node, error) {
	if i < 0 || i >= len(e.Cluster.Nodes) {
		return nil, fmt.Errorf("chaos: fault names node %d; the cluster has %d", i, len(e.Cluster.Nodes))
	}
	return e.Cluster.Nodes[i], nil
}

// onNode runs op on node i.
func (e *Env) onNode(i int, op func(Node) error) error {
	n, err := e.node(i)
	if err != nil {
		return err
	}
	return op(n)
}

// moveClock adds d to node i's clock offset.
func (e *Env) moveClock(ctx context.Context, i int, d time.Duration) error {
	n, err := e.node(i)
	if err != nil {
		return err
	}
	return e.clocks.move(i, d, func(offset time.Duration) error { return n.SetClockOffset(ctx, offset) })
}

// clockOffsets keeps each server's clock offset so far, so that a clock
// fault moves a clock from where the ones before left it. The zero value
// is ready.
type clockOffsets[S comparable] struct {
	mu sync.Mutex
	by map[S]time.Duration
}

// move adds d to server s's offset: set puts the new offset in place, and
// the offset is kept only if it succeeds.
func (c *clockOffsets[S]) move(s S, d time.Duration, set func(offset time.Duration) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[S]time.Duration{}
	}
	if err := set(c.by[s] + d); err != nil {
		return err
	}
	c.by[s] += d
	return nil
}

// Nodes are the nodes a fault acts on, by index (n0 is the first). The
// faults on a set of lock nodes embed it; those on masters and their
// replicas hold it as Masters.
type Nodes []int

// list names the nodes as a fault's name does: "n0,n2".
func (ns Nodes) list() string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = fmt.Sprintf("n%d", n)
	}
	return strings.Join(parts, ",")
}

// atOnce runs step on every node at once, as one incident strikes them
// together; then it notes on the timeline, in the nodes' order, what step
// did on each node where it did not fail (if it said), and returns the
// errors joined.
func (ns Nodes) atOnce(env *Env, step func(n int) (did string, err error)) error {
	did := make([]string, len(ns))
	errs := make([]error, len(ns))
	var wg sync.WaitGroup
	for i, n := range ns {
		wg.Go(func() { did[i], errs[i] = step(n) })
	}
	wg.Wait()
	for i, n := range ns {
		if errs[i] == nil && did[i] != "" {
			env.Note("n%d: %s", n, did[i])
		}
	}
	return errors.Join(errs...)
}

// each runs step on the nodes in order and stops at the first error.
func (ns Nodes) each(step func(n int) error) error {
	for _, n := range ns {
		if err := step(n); err != nil {
			return err
		}
	}
	return nil
}
