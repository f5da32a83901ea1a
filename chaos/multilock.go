package chaos

// The multi-lock workload: clients take random overlapping sets of names
// all or nothing (redlock's AcquireMulti), and each hold writes, per name,
// the name's fenced resource with that name's token and the name's
// unfenced register. Every name gets a history of its own, in the format of
// the single-lock workload, so the one checker judges each name: per name
// mutual exclusion, strictly increasing tokens, a fence that never goes
// back, no key left behind, and acquisitions resuming after the faults.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/fence"
)

// MultiNames are the names the multi-lock clients draw their sets from.
var MultiNames = []string{"multi-a", "multi-b", "multi-c", "multi-d"}

// MultiScenarios is the multi-lock's scenario table: the faults of the
// mutex table that bear on a set of locks taken one by one (a minority cut
// off, a frozen node, a node restarting with its data).
func MultiScenarios() []Scenario {
	safe := Expect{Verdict: VerdictSafe}
	multi := func(name, about string, sc Scenario) Scenario {
		sc.Name, sc.About, sc.Scheme, sc.Expect = "multi-"+name, about, RedlockScheme{}, safe
		return sc
	}
	return []Scenario{
		multi("no-faults", "three clients take random sets of 2-3 of 4 names, all or nothing: contention alone",
			Scenario{Schedule: []Step{Wait(3 * time.Second)}}),
		multi("partition-minority", "two of five nodes cut off while the sets are taken",
			Scenario{Schedule: window(Partition{[]int{0, 1}}, 3*time.Second)}),
		multi("node-pause", "a node frozen (SIGSTOP / docker pause) for 1.5 TTL while the sets are taken",
			Scenario{Schedule: []Step{Wait(500 * time.Millisecond), Apply(NodePause{0}), Wait(1500 * time.Millisecond), Heal(NodePause{0})}}),
		multi("extend-flapping", "holds of 1.5 TTL through DoMulti (every name auto-extended) while two nodes flap",
			Scenario{UseDo: true, Hold: 1500 * time.Millisecond, Schedule: window(Flapping{[]int{0, 1}, 200 * time.Millisecond}, 5*time.Second)}),
		multi("restart-aof", "a node crashes and restarts with its data (AOF, fsync always), voting at once",
			Scenario{Persistence: true, RestartGrace: redlock.NoRestartGrace,
				Schedule: []Step{Wait(500 * time.Millisecond), Apply(Crash{0}), Wait(time.Second), Heal(Crash{0}), Wait(time.Second)}}),
	}
}

// MultiRun is the outcome of one multi-lock scenario: a run per name.
type MultiRun struct {
	Scenario Scenario
	Backend  string
	Elapsed  time.Duration
	// Names holds each name's history and judgement, by name.
	Names map[string]*Run
	// Holds counts the multi-lock acquisitions of the run.
	Holds int
	// Mismatch is non-nil when some name's verdict differs from the
	// scenario's expectation.
	Mismatch error
}

// RunMultiScenario is RunScenario for the multi-lock workload.
func RunMultiScenario(ctx context.Context, b Backend, sc Scenario, cfg RunConfig) (run *MultiRun, err error) {
	log := runLog(cfg, sc, b)
	started := time.Now()
	cluster, nw, stop, err := startNodes(ctx, b, sc)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, stop()) }()

	// One recorder for the nemesis and the multi-lock acquisitions (the
	// nemesis awaits them), one per name on the same clock for the names'
	// histories.
	main := NewRecorder()
	names := map[string]*Recorder{}
	for _, n := range MultiNames {
		names[n] = &Recorder{start: main.start, changed: make(chan struct{})}
	}
	env := &Env{Cluster: cluster, Net: nw, Rec: main, Log: log, Clients: sc.clients(),
		OrphanAfter: orphanAfter(nodeTimeout(sc.maxTTL(), sc.FsyncedVotes, cluster.TLS != nil))}

	resource := directClient(cluster.Resource)
	defer resource.Close()
	for _, n := range MultiNames {
		if err := resource.Del(ctx, resourceKey+":"+n, registerKey+":"+n).Err(); err != nil {
			return nil, fmt.Errorf("chaos: reset the resource: %w", err)
		}
	}

	w := &multiWorkload{main: main, names: names, lastTaken: map[string]time.Duration{}, resource: resource, ttl: sc.ttl(), hold: sc.hold(), margin: sc.margin(), useDo: sc.UseDo}
	for i := range sc.clients() {
		clients := make([]redis.UniversalClient, sc.nodes())
		for j, a := range nw.Addrs()[:sc.nodes()] {
			clients[j] = nodeClient(a, cluster.TLS)
		}
		c, err := redlock.New(clients, redlock.Options{TTL: sc.ttl(), RestartGrace: sc.RestartGrace, Logger: log.With("client", i), AllowNoFaultTolerance: len(clients) < 3})
		if err != nil {
			closeClients(clients)
			return nil, err
		}
		w.clients = append(w.clients, c)
		defer closeClients(clients)
	}
	closeAll := func() {
		for _, c := range w.clients {
			if cerr := c.Close(); cerr != nil {
				log.Warn("closing a client", "err", cerr)
			}
		}
	}
	defer closeAll()

	log.Info("scenario start", "about", sc.About, "expect", sc.Expect.Verdict)
	wctx, stopWorkload := context.WithCancel(ctx)
	workDone := make(chan struct{})
	go func() { defer close(workDone); w.run(wctx) }()
	nemErr := runNemesis(ctx, env, sc, cfg.Duration)
	if nemErr == nil {
		// The nemesis' recovery waits for one set; the checker wants each
		// name acquired after the last heal.
		awaitEveryName(ctx, main, names, multiNameBound(sc))
	}
	stopWorkload()
	<-workDone
	closeAll() // waits for the background cleanups: the key scan sees the final state

	run = &MultiRun{Scenario: sc, Backend: b.Name(), Elapsed: time.Since(started), Names: map[string]*Run{}, Holds: w.holds()}
	nemesis := slices.DeleteFunc(main.History(), func(e Event) bool { return e.Client != NoClient })
	var mismatches []error
	for _, n := range MultiNames {
		rec := names[n]
		finalStateOf(ctx, rec, resource, registerKey+":"+n, proxiedScanNodes(nw.Addrs()[:sc.nodes()], cluster.TLS), []string{redlock.DefaultKeyPrefix + "{" + n + "}"})
		h := nameHistory(rec.History(), nemesis)
		r := &Run{Scenario: sc, Backend: b.Name(), Elapsed: run.Elapsed, History: h}
		r.Scenario.Name = sc.Name + "/" + n
		r.Result = CheckHistory(h, CheckOptions{RecoveryBound: multiNameBound(sc)})
		if nemErr == nil {
			if r.Mismatch = sc.Expect.Judge(r.Result); r.Mismatch != nil {
				mismatches = append(mismatches, fmt.Errorf("%s: %w", n, r.Mismatch))
			}
		}
		run.Names[n] = r
	}
	if nemErr != nil {
		return run, fmt.Errorf("chaos: scenario %s on %s: %w", sc.Name, b.Name(), nemErr)
	}
	run.Mismatch = errors.Join(mismatches...)
	log.Info("scenario done", "holds", run.Holds, "elapsed", run.Elapsed.Round(time.Millisecond), "mismatch", run.Mismatch)
	return run, nil
}

// multiNameBound is how soon after the last fault heals each name must be
// acquired again: the scenario's recovery bound, plus two of the
// workload's holds. A name is one of the 2 or 3 of a set, and the sets in
// progress at the heal (holds of over a TTL) keep it from the next
// attempt that wants it; on a loaded machine, multi-extend-flapping's
// multi-d was first taken 58ms past the bare bound (6s), a figure of the
// workload's queueing, not of the lock.
func multiNameBound(sc Scenario) time.Duration { return sc.RecoveryBound() + 2*sc.hold() }

// awaitEveryName waits, up to within, until every name was acquired after
// the last fault healed. It does not judge: a name still waiting when the
// bound passes is the checker's liveness violation.
func awaitEveryName(ctx context.Context, main *Recorder, names map[string]*Recorder, within time.Duration) {
	var healed time.Duration
	for _, e := range main.History() {
		if e.Kind == FaultHeal {
			healed = e.At
		}
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for _, rec := range names {
		if _, err := rec.WaitFor(ctx, healed, func(e Event) bool { return e.Kind == AcquireOK }); err != nil {
			return
		}
	}
}

// nameHistory is one name's history for the checker: the name's own
// events and the nemesis' (fault windows, notes), in time order.
func nameHistory(own, nemesis History) History {
	h := append(slices.Clone(own), nemesis...)
	slices.SortStableFunc(h, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	return h
}

// multiWorkload makes its clients take random sets of names.
type multiWorkload struct {
	main     *Recorder
	names    map[string]*Recorder
	clients  []*redlock.Client
	resource *redis.Client
	ttl      time.Duration
	hold     time.Duration
	margin   time.Duration
	useDo    bool // hold through DoMulti (every name auto-extended)

	mu        sync.Mutex
	count     int
	lastTaken map[string]time.Duration // per name, when it was last acquired (main's clock)
}

func (w *multiWorkload) holds() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count
}

func (w *multiWorkload) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range w.clients {
		wg.Go(func() { w.client(ctx, i) })
	}
	wg.Wait()
}

// pick draws 2 or 3 distinct names, in random order (the library sorts),
// always with the name taken least lately: with holds of more than a TTL,
// a name left out of a few random sets in a row would go untaken past the
// liveness bound after a fault heals, which says nothing about the lock.
func (w *multiWorkload) pick() []string {
	set := slices.Clone(MultiNames)
	rand.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
	w.mu.Lock()
	oldest := 0
	for i, n := range set {
		if w.lastTaken[n] < w.lastTaken[set[oldest]] {
			oldest = i
		}
	}
	w.mu.Unlock()
	set[0], set[oldest] = set[oldest], set[0]
	return set[:2+rand.IntN(2)]
}

func (w *multiWorkload) client(ctx context.Context, c int) {
	for ctx.Err() == nil {
		set := w.pick()
		// Each name's history gets a hold of its own for this attempt.
		holds := map[string]int{}
		for _, n := range set {
			holds[n] = w.names[n].NewHold()
		}
		ev := func(n string, k EventKind) Event { return Event{Kind: k, Client: c, Hold: holds[n]} }
		multiHold := w.main.NewHold()
		invoked := w.main.Now()
		for _, n := range set {
			e := ev(n, AcquireInvoke)
			e.At = invoked
			w.names[n].Record(e)
		}
		failed := func(err error) {
			for _, n := range set {
				e := ev(n, AcquireFail)
				e.Err = errString(err)
				w.names[n].Record(e)
			}
		}
		acquired := func(m *redlock.MultiLock) {
			now := w.main.Now()
			w.mu.Lock()
			w.count++
			for _, n := range lockNames(m) {
				w.lastTaken[n] = now
			}
			w.mu.Unlock()
			for _, l := range m.Locks() {
				e := ev(l.Name(), AcquireOK)
				e.Token, e.Deadline = l.Token(), w.main.Since(l.Deadline())
				w.names[l.Name()].Record(e)
			}
			w.main.Record(Event{Kind: AcquireOK, Client: c, Hold: multiHold, Detail: fmt.Sprint(lockNames(m))})
		}
		stopping := func() {
			for _, n := range set {
				w.names[n].Record(ev(n, ReleaseInvoke))
			}
		}
		released := func(m *redlock.MultiLock, relErr error) {
			for _, l := range m.Locks() {
				e := ev(l.Name(), ReleaseOK)
				if lerr := l.Err(); errors.Is(lerr, redlock.ErrLockLost) {
					e.Kind, e.Err = ReleaseFail, lerr.Error()
				} else if relErr != nil {
					e.Detail = "the multi-lock's release: " + relErr.Error()
				}
				w.names[l.Name()].Record(e)
			}
		}
		if w.useDo {
			var held *redlock.MultiLock
			err := w.clients[c].DoMulti(ctx, set, func(fnCtx context.Context, m *redlock.MultiLock) error {
				held = m
				acquired(m)
				w.body(fnCtx, m, ev)
				stopping() // DoMulti releases after fn returns
				return nil
			}, redlock.WithMaxWait(5*w.ttl))
			if held == nil {
				failed(err)
			} else {
				released(held, err)
			}
		} else {
			attemptCtx, cancel := context.WithTimeout(ctx, 5*w.ttl)
			m, err := w.clients[c].AcquireMulti(attemptCtx, set)
			cancel()
			if err != nil {
				failed(err)
				continue
			}
			acquired(m)
			w.body(ctx, m, ev)
			stopping()
			released(m, m.Release(context.WithoutCancel(ctx)))
		}
		select { // think: let the others in
		case <-time.After(rand.N(w.hold)):
		case <-ctx.Done():
		}
	}
}

// body is one hold: with enough validity left on every name, write each
// name's fenced resource with its token and do a read-modify-write of its
// register.
func (w *multiWorkload) body(ctx context.Context, m *redlock.MultiLock, ev func(string, EventKind) Event) {
	need := w.margin
	if !w.useDo {
		need += w.hold // without extension the validity must cover the work
	}
	if left := time.Until(m.Deadline()); left < need {
		for _, l := range m.Locks() {
			e := ev(l.Name(), Abandoned)
			e.Detail = fmt.Sprintf("%s of validity left, need %s", left.Round(time.Millisecond), need)
			w.names[l.Name()].Record(e)
		}
		return
	}
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.ttl)
	defer cancel()
	values := map[string]int64{}
	for _, l := range m.Locks() {
		n, rec := l.Name(), w.names[l.Name()]
		e := ev(n, FencedWriteInvoke)
		e.Token = l.Token()
		rec.Record(e)
		err := fence.Set(opCtx, w.resource, resourceKey+":"+n, l.Token(), "c"+strconv.Itoa(e.Client))
		e = ev(n, FencedWriteOK)
		e.Token = l.Token()
		switch {
		case errors.Is(err, fence.ErrStaleToken):
			e.Kind, e.Err = FencedWriteStale, err.Error()
		case err != nil:
			e.Kind, e.Err = FencedWriteFail, err.Error()
		}
		rec.Record(e)
		rec.Record(ev(n, RegisterInvoke))
		v, err := w.resource.Get(opCtx, registerKey+":"+n).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			e := ev(n, RegisterFail)
			e.Err = err.Error()
			rec.Record(e)
			continue
		}
		values[n] = v
	}
	w.work(ctx, m, ev)
	if ctx.Err() != nil && w.useDo {
		// DoMulti cancels the body's ctx when a name is lost: stop there.
		for n := range values {
			e := ev(n, RegisterFail)
			e.Err = fmt.Sprintf("abandoned: %v", context.Cause(ctx))
			w.names[n].Record(e)
		}
		return
	}
	for _, l := range m.Locks() {
		n, rec := l.Name(), w.names[l.Name()]
		v, ok := values[n]
		if !ok {
			continue
		}
		e := ev(n, RegisterOK)
		if err := w.resource.Set(opCtx, registerKey+":"+n, v+1, 0).Err(); err != nil {
			e.Kind, e.Err = RegisterFail, err.Error()
		}
		e.Value = v + 1
		rec.Record(e)
	}
}

// work spends the hold time holding every name, recording each name's
// validity deadline whenever it moves (auto-extension moves it).
func (w *multiWorkload) work(ctx context.Context, m *redlock.MultiLock, ev func(string, EventKind) Event) {
	seen := map[string]time.Time{}
	observe := func() {
		for _, l := range m.Locks() {
			if d := l.Deadline(); !d.Equal(seen[l.Name()]) {
				seen[l.Name()] = d
				e := ev(l.Name(), ValidityObserved)
				e.Deadline = w.main.Since(d)
				w.names[l.Name()].Record(e)
			}
		}
	}
	end := time.Now().Add(w.hold)
	for left := w.hold; left > 0; left = time.Until(end) {
		select {
		case <-time.After(min(left, w.ttl/10)):
			observe()
		case <-ctx.Done():
			return
		}
	}
}

// lockNames lists the names a MultiLock holds, sorted.
func lockNames(m *redlock.MultiLock) []string {
	var names []string
	for _, l := range m.Locks() {
		names = append(names, l.Name())
	}
	return names
}
