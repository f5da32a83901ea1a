package chaos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/observe"
)

// RunConfig says how to run a scenario.
type RunConfig struct {
	// Duration 0 runs the schedule once (the short form). A positive
	// Duration repeats schedule and recovery until that much time has
	// passed (the soak), unless the scenario runs Once.
	Duration time.Duration
	// Log receives the nemesis' steps and the run's outcome; nil discards.
	Log *slog.Logger
}

// Run is the outcome of one scenario on one backend.
type Run struct {
	Scenario Scenario
	Backend  string
	Elapsed  time.Duration
	History  History
	Result   Result
	// Mismatch is non-nil when the verdict differs from the scenario's
	// expectation.
	Mismatch error
}

// runLog is a run's logger, every line tagged with the scenario and backend.
func runLog(cfg RunConfig, sc Scenario, b Backend) *slog.Logger {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return log.With("scenario", sc.Name, "backend", b.Name())
}

// startNodes starts the scenario's nodes on b, each reached through a proxy
// of its own; stop closes the proxies, then stops the nodes.
func startNodes(ctx context.Context, b Backend, sc Scenario) (cluster *Cluster, nw *Net, stop func() error, err error) {
	servers := sc.nodes()
	if sc.Replicas || sc.SpareReplicas {
		servers *= 2 // n<N+i> is n<i>'s replica, or its spare
	}
	cluster, err = b.Start(ctx, ClusterSpec{Nodes: servers, Persistence: sc.Persistence, AppendFsync: sc.AppendFsync, FakeTime: sc.needsFakeTime(), TLS: sc.TLS, ClusterMasters: sc.ClusterMasters, ClusterReplicas: sc.ClusterReplicas})
	if err != nil {
		return nil, nil, nil, err
	}
	addrs := make([]string, len(cluster.Nodes))
	for i, n := range cluster.Nodes {
		addrs[i] = n.Addr()
	}
	if nw, err = NewNet(addrs); err != nil {
		return nil, nil, nil, errors.Join(err, cluster.Stop())
	}
	if sc.NeedsWaitAOF {
		// A server without a WAITAOF that FsyncedVotes trusts (none, or
		// Valkey's and Redis 7.x's, which may confirm before the fsync)
		// would run the scenario as one without persistence, safe for
		// another reason: refuse to pretend.
		rdb := redis.NewClient(&redis.Options{Addr: addrs[0], TLSConfig: cluster.TLS})
		info, err := rdb.Info(ctx, "server").Result()
		_ = rdb.Close()
		if err != nil || !strings.Contains(info, "redis_version:") || strings.Contains(info, "valkey_version:") || strings.Contains(info, "redis_version:7.") || strings.Contains(info, "redis_version:6.") {
			nw.Close()
			return nil, nil, nil, errors.Join(fmt.Errorf("chaos: scenario %s needs a WAITAOF that FsyncedVotes trusts (Redis 8.0+), which the nodes lack (INFO server: %v): run it with REDLOCK_TEST_SERVER=redis-8.6", sc.Name, err), cluster.Stop())
		}
	}
	return cluster, nw, func() error { nw.Close(); return cluster.Stop() }, nil
}

// RunScenario starts a fresh cluster on b, runs the workload under the
// scenario's schedule, stops everything it started, and judges the
// history. An error means the run itself could not be carried out (a
// server did not start, a fault could not be applied; if the workload ran,
// the Run is returned too, with the history up to then); a verdict that
// differs from the expectation is reported in Run.Mismatch instead.
func RunScenario(ctx context.Context, b Backend, sc Scenario, cfg RunConfig) (run *Run, err error) {
	log := runLog(cfg, sc, b)
	started := time.Now()
	cluster, nw, stop, err := startNodes(ctx, b, sc)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, stop()) }()

	rec := NewRecorder()
	env := &Env{Cluster: cluster, Net: nw, Rec: rec, Log: log, ScanKeys: scannedKeys(sc.Scheme), Clients: sc.clients(),
		OrphanAfter: orphanAfter(nodeTimeout(sc.maxTTL(), sc.FsyncedVotes, cluster.TLS != nil))}
	if env.replicas, err = replicateAll(ctx, cluster, nw, sc); err != nil {
		return nil, err
	}
	if sc.SpareReplicas {
		env.spares = sc.nodes()
	}

	resource := directClient(cluster.Resource)
	defer resource.Close()
	if err := resource.Del(ctx, resourceKey, registerKey).Err(); err != nil {
		return nil, fmt.Errorf("chaos: reset the resource: %w", err)
	}

	w := &workload{rec: rec, resource: resource, control: &env.clients, ttl: sc.maxTTL(), hold: sc.hold(), margin: sc.margin(), useDo: sc.UseDo}
	defer func() {
		for _, l := range w.lockers {
			if l != nil {
				err = errors.Join(err, l.Close())
			}
		}
	}()
	newLocker := func(i int) (Locker, error) {
		return sc.Scheme.NewLocker(SchemeEnv{
			Addrs:              lockNodeAddrs(cluster, nw, sc.nodes()),
			ClusterSeeds:       cluster.clusterSeeds(),
			TTL:                sc.clientTTL(i),
			ClockSkew:          sc.ClientSkew[i],
			RestartGrace:       cmpOr(sc.ClientGrace[i], sc.RestartGrace),
			ClockGuard:         !sc.NoClockGuard,
			AllowFailoverNodes: sc.AllowFailoverNodes,
			DurableVotes:       sc.DurableVotes,
			FsyncedVotes:       sc.FsyncedVotes,
			AllowEvictingNodes: sc.AllowEvictingNodes,
			Note: func(d string) {
				rec.Record(Event{Kind: NemesisNote, Client: NoClient, Detail: fmt.Sprintf("c%d %s", i, d)})
			},
			Log:       log.With("client", i),
			TLSConfig: cluster.TLS,
		})
	}
	for i := range sc.clients() {
		arrived := make(chan struct{})
		w.arrived = append(w.arrived, arrived)
		if slices.Contains(sc.Late, i) {
			w.lockers = append(w.lockers, nil)
			continue
		}
		close(arrived)
		l, err := newLocker(i)
		if err != nil {
			return nil, err
		}
		w.lockers = append(w.lockers, l)
	}
	assignRWRoles(w.lockers)
	env.fresh = func(i int) error {
		if i < 0 || i >= len(w.lockers) {
			return fmt.Errorf("chaos: no client %d to start afresh (the scenario has %d)", i, len(w.lockers))
		}
		l, err := newLocker(i)
		if err != nil {
			return err
		}
		// The new locker takes client i's role (a read-write lock's):
		// roles go by index, and the others keep theirs.
		alone := make([]Locker, len(w.lockers))
		alone[i] = l
		assignRWRoles(alone)
		if old := w.setLocker(i, l); old != nil {
			// Closing waits for its background cleanups.
			return old.Close()
		}
		return nil
	}

	log.Info("scenario start", "about", sc.About, "expect", sc.Expect.Verdict)
	wctx, stopWorkload := context.WithCancel(ctx)
	workDone := make(chan struct{})
	go func() { defer close(workDone); w.run(wctx) }()

	nemErr := runNemesis(ctx, env, sc, cfg.Duration)
	stopWorkload()
	<-workDone
	// Closing the lockers waits for the library's background cleanups, so
	// that the key scan sees the final state.
	for _, l := range w.lockers {
		if l == nil {
			continue
		}
		if cerr := l.Close(); cerr != nil {
			log.Warn("closing a locker", "err", cerr)
		}
	}
	w.lockers = nil
	if cluster.ClusterNodes != nil {
		finalStateOf(ctx, rec, resource, registerKey, clusterScanNodes(cluster.ClusterNodes), env.ScanKeys)
	} else {
		finalState(ctx, rec, resource, nw.Addrs()[:sc.nodes()], cluster.TLS, env.ScanKeys)
	}

	run = &Run{Scenario: sc, Backend: b.Name(), Elapsed: time.Since(started), History: rec.History()}
	opts := CheckOptions{RecoveryBound: sc.RecoveryBound(), Permits: sc.Permits}
	if _, fair := sc.Scheme.(FairScheme); fair {
		opts.FairOrder = fairOrderMargin(sc.ttl())
	}
	run.Result = CheckHistory(run.History, opts)
	if nemErr != nil {
		// The history so far is returned too: it shows why the schedule
		// could not go on.
		return run, fmt.Errorf("chaos: scenario %s on %s: %w", sc.Name, b.Name(), nemErr)
	}
	run.Mismatch = sc.Expect.Judge(run.Result)
	log.Info("scenario done", "verdict", Summarize(run.Result), "expected", sc.Expect.Verdict,
		"acquisitions", run.Result.Acquisitions, "elapsed", run.Elapsed.Round(time.Millisecond), "mismatch", run.Mismatch)
	return run, nil
}

// runNemesis lets the workload warm up, then plays the schedule (once, or
// repeatedly until the soak's duration), each time followed by a
// recovery phase; whatever is still applied at the end is healed.
func runNemesis(ctx context.Context, env *Env, sc Scenario, soak time.Duration) (err error) {
	applied := map[string]Fault{}
	defer func() {
		for name, f := range applied {
			err = errors.Join(err, heal(context.WithoutCancel(ctx), env, f))
			delete(applied, name)
		}
	}()
	if err := awaitAcquisition(ctx, env, sc.RecoveryBound()); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	deadline := time.Now().Add(soak)
	for first := true; first || (soak > 0 && !sc.Once && time.Now().Before(deadline)); first = false {
		for _, st := range sc.Schedule {
			if err := step(ctx, env, sc, st, applied); err != nil {
				return fmt.Errorf("step %q: %w", st, err)
			}
		}
		env.clients.unpin()
		env.clients.openGate()
		for name, f := range applied {
			if err := heal(ctx, env, f); err != nil {
				return err
			}
			delete(applied, name)
		}
		// Recovery: the first acquisition after the heal (the checker
		// measures it), then one TTL so locks taken during the fault,
		// and keys stranded by it, run out before the next round.
		_ = awaitAcquisition(ctx, env, sc.RecoveryBound())
		if err := sleep(ctx, sc.maxTTL()+500*time.Millisecond); err != nil {
			return err
		}
	}
	if soak > 0 {
		// A soak that ran the schedule once runs on without faults.
		if err := sleep(ctx, time.Until(deadline)); err != nil {
			return err
		}
	}
	return nil
}

// step plays one step of the schedule.
func step(ctx context.Context, env *Env, sc Scenario, st Step, applied map[string]Fault) error {
	switch st.Kind {
	case StepApply:
		env.Log.Info("nemesis: apply " + st.Fault.Name())
		env.Rec.Record(Event{Kind: FaultApply, Client: NoClient, Fault: st.Fault.Name()})
		if err := st.Fault.Apply(ctx, env); err != nil {
			return err
		}
		applied[st.Fault.Name()] = st.Fault
	case StepHeal:
		if _, ok := applied[st.Fault.Name()]; !ok {
			return fmt.Errorf("heal of %s, which is not applied", st.Fault.Name())
		}
		delete(applied, st.Fault.Name())
		return heal(ctx, env, st.Fault)
	case StepWait:
		return sleep(ctx, st.Wait)
	case StepContend:
		return contend(ctx, env, sc, st.Wait)
	case StepAwaitHold:
		if st.Wait > 0 {
			return tryPinHold(ctx, env, st.Client, st.Wait)
		}
		return pinHold(ctx, env, st.Client, 10*sc.maxTTL()+5*time.Second)
	case StepFresh:
		if env.fresh == nil {
			return fmt.Errorf("this runner cannot start %s afresh (RunScenario's workload can)", clientName(st.Client))
		}
		env.Note("%s starts as a new process, which has met no node", clientName(st.Client))
		return env.fresh(st.Client)
	case StepUnpin:
		env.clients.unpin()
	case StepQuiesce:
		return quiesce(ctx, env, sc.maxTTL()+5*time.Second)
	case StepResume:
		env.clients.openGate()
	case StepHoldBack:
		return holdBack(ctx, env, sc.maxTTL()+5*time.Second)
	case StepAwaitExtension:
		// A pinned hold that ended (its extensions failed) extends no more.
		pinned, now := env.clients.pinnedHold(), env.Rec.Now()
		ended := func(e Event) bool {
			return (e.At >= now && isExtensionNote(e)) || (pinned != 0 && e.Hold == pinned && e.Kind == ReleaseInvoke)
		}
		wctx, cancel := context.WithTimeout(ctx, sc.maxTTL())
		defer cancel()
		if _, err := env.Rec.WaitFor(wctx, 0, ended); err != nil {
			return fmt.Errorf("no extension ended within %s, and the pinned hold goes on: %w", sc.maxTTL(), err)
		}
	case StepAlign:
		now := time.Now()
		next := now.Truncate(time.Second).Add(st.Wait)
		if !next.After(now) {
			next = next.Add(time.Second)
		}
		return sleep(ctx, next.Sub(now))
	default:
		return fmt.Errorf("unknown step kind %d", st.Kind)
	}
	return nil
}

// contend lets the other clients try for d (see Contend), and up to 3d
// more for the first acquisition besides the pinned hold when sc expects
// two holders.
func contend(ctx context.Context, env *Env, sc Scenario, d time.Duration) error {
	from, pinned := env.Rec.Now(), env.clients.pinnedHold()
	if err := sleep(ctx, d); err != nil {
		return err
	}
	if v := sc.Expect.Verdict; v != VerdictUnsafeByDesign && v != VerdictBaseline {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 3*d)
	defer cancel()
	_, err := env.Rec.WaitFor(wctx, from, func(e Event) bool { return e.Kind == AcquireOK && e.Hold != pinned })
	if err != nil && ctx.Err() == nil {
		env.Note("no other client acquired within %s of the pinned hold", 4*d)
		return nil // the checker's verdict says what this run showed
	}
	return ctx.Err()
}

func heal(ctx context.Context, env *Env, f Fault) error {
	env.Log.Info("nemesis: heal " + f.Name())
	err := f.Heal(ctx, env)
	env.Rec.Record(Event{Kind: FaultHeal, Client: NoClient, Fault: f.Name(), Err: errString(err)})
	return err
}

// isExtensionNote tells whether e is the library's report that an
// extension ended (newRedlockClient notes them).
func isExtensionNote(e Event) bool {
	return e.Kind == NemesisNote && (strings.Contains(e.Detail, "library: "+observe.Extended.String()) ||
		strings.Contains(e.Detail, "library: "+observe.ExtendFailed.String()))
}

// errNoHoldPinned: nobody acquired within the time given.
var errNoHoldPinned = errors.New("no hold pinned")

// pinHold waits until client (or any) acquires the lock in an attempt
// started from now on, and pins that hold.
func pinHold(ctx context.Context, env *Env, client int, within time.Duration) error {
	claimed := env.clients.requestPin(client, env.Rec.Now())
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-claimed:
		return nil
	case <-ctx.Done():
		env.clients.unpin()
		return ctx.Err()
	case <-t.C:
		env.clients.unpin()
		return fmt.Errorf("no acquisition by %s within %s: %w", clientName(client), within, errNoHoldPinned)
	}
}

// tryPinHold is pinHold that gives up after within without failing the
// schedule: whether client acquires at all is what the scenario shows.
func tryPinHold(ctx context.Context, env *Env, client int, within time.Duration) error {
	err := pinHold(ctx, env, client, within)
	if errors.Is(err, errNoHoldPinned) {
		env.Note("%v", err)
		return nil
	}
	return err
}

// orphanAfter is how long a lock key may stay on a node once every client
// is parked before it counts as left behind: the library's bound for its
// background cleanups, with nodes that answer within max(node timeout, 1s)
// (README, "No key left behind"). A call of a failed attempt that went
// unanswered leaves as unsure at its node timeout; its node is then
// released, and swept once more a second later (the library's
// lateCallWait) in case the call arrives after that release; the sweep
// answers within the same bound. With FsyncedVotes' 2s node timeout, a
// vote that reached its node late had its key there 1.45s after every
// client parked in one run, then swept (restart-fsynced on Docker, Redis
// 8.6), which a fixed 1s counted as left behind.
func orphanAfter(nodeTimeout time.Duration) time.Duration {
	answer := max(nodeTimeout, time.Second)
	return 2*answer + time.Second
}

// quiesce holds every client back before its next attempt and waits until
// all are parked and no node has the lock key any more, so that the next
// fault starts from a clean slate. A key still there env.OrphanAfter after
// the clients parked belongs to no one: it is recorded as a key-scan
// finding (check e), then waited out.
func quiesce(ctx context.Context, env *Env, within time.Duration) error {
	env.clients.closeGate()
	deadline := time.Now().Add(within)
	for env.clients.parkedClients() < env.Clients {
		if time.Now().After(deadline) {
			return fmt.Errorf("quiesce: only %d of %d clients parked within %s", env.clients.parkedClients(), env.Clients, within)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	parked := time.Now()
	deadline = parked.Add(within)
	for _, n := range scanNodes(env.Cluster) {
		c := n.open()
		err := func() error {
			defer c.Close()
			for reported := false; ; {
				found, err := keysOn(ctx, c, env.ScanKeys)
				if err == nil && found == "" {
					return nil
				}
				if err == nil && !reported && time.Since(parked) > env.OrphanAfter {
					reported = true
					env.Rec.Record(Event{Kind: KeyScan, Client: NoClient, Node: n.name,
						Detail: fmt.Sprintf("%s, %s after every client parked", found, env.OrphanAfter)})
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("quiesce: lock key still on %s after %s (err %v)", n.name, within, err)
				}
				if err := sleep(ctx, 10*time.Millisecond); err != nil {
					return err
				}
			}
		}()
		if err != nil {
			return err
		}
	}
	env.Note("workload quiesced: no lock key on any node")
	return nil
}

// holdBack parks every client but the pinned holder, whose hold goes on.
func holdBack(ctx context.Context, env *Env, within time.Duration) error {
	env.clients.closeGate()
	deadline := time.Now().Add(within)
	for env.clients.parkedClients() < env.Clients-1 {
		if time.Now().After(deadline) {
			return fmt.Errorf("hold back: only %d of %d clients parked within %s", env.clients.parkedClients(), env.Clients-1, within)
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func clientName(client int) string {
	if client == AnyClient {
		return "any client"
	}
	return fmt.Sprintf("client %d", client)
}

// awaitAcquisition waits until some client acquires the lock from now on.
func awaitAcquisition(ctx context.Context, env *Env, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if _, err := env.Rec.WaitFor(ctx, env.Rec.Now(), func(e Event) bool { return e.Kind == AcquireOK }); err != nil {
		return fmt.Errorf("no acquisition within %s: %w", within, err)
	}
	return nil
}

// sleep lets d pass on the scenario's timeline (not a synchronisation:
// the schedule says how long a fault lasts).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// replicateAll sets up the scenario's replicas: n1 follows n0 (Replica),
// or every lock node n<i> has its own replica n<N+i> (Replicas). It returns
// each master's replication, by master index.
func replicateAll(ctx context.Context, c *Cluster, nw *Net, sc Scenario) (map[int]replication, error) {
	pairs := map[int]int{} // master -> replica
	switch {
	case sc.Replicas:
		for m := range sc.nodes() {
			pairs[m] = sc.nodes() + m
		}
	case sc.Replica:
		pairs[0] = 1
	}
	out := make(map[int]replication, len(pairs))
	for m, r := range pairs {
		link, err := replicate(ctx, c, nw, r, m)
		if err != nil {
			return nil, err
		}
		out[m] = replication{replica: r, link: link}
	}
	return out, nil
}

// replicate makes node r an asynchronous replica of node m, through a
// proxy of the net that the Failover fault can cut. It returns the proxy's
// index once the replica reports its link up.
func replicate(ctx context.Context, c *Cluster, nw *Net, r, m int) (int, error) {
	link, addr, err := nw.AddLink(c.HostIP, c.Nodes[m].Addr())
	if err != nil {
		return 0, err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	// A replica's first sync is a full one, which the master delays 5s
	// (repl-diskless-sync-delay) to serve more replicas with one transfer:
	// here each master has one replica, and the setup would wait for nothing.
	mc := directClient(c.Nodes[m])
	defer mc.Close()
	if err := mc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		return 0, fmt.Errorf("chaos: n%d: CONFIG SET repl-diskless-sync-delay: %w", m, err)
	}
	rc := directClient(c.Nodes[r])
	defer rc.Close()
	if err := rc.SlaveOf(ctx, host, port).Err(); err != nil {
		return 0, fmt.Errorf("chaos: REPLICAOF %s on n%d: %w", addr, r, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		info, err := rc.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return link, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("chaos: n%d did not connect to its master through %s within 15s (last INFO error: %v)", r, addr, err)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// keysOn describes the keys of keys that node c holds ("" if none): each
// one's value (or type, for a set) and PTTL.
func keysOn(ctx context.Context, c redis.Cmdable, keys []string) (string, error) {
	var found []string
	for _, key := range keys {
		typ, err := c.Type(ctx, key).Result()
		if err != nil {
			return "", err
		}
		if typ == "none" {
			continue
		}
		desc := typ
		if typ == "string" {
			val, _ := c.Get(ctx, key).Result()
			desc = fmt.Sprintf("value=%q", val)
		}
		pttl, _ := c.PTTL(ctx, key).Result()
		found = append(found, fmt.Sprintf("%s %s pttl=%s", key, desc, pttl))
	}
	return strings.Join(found, "; "), nil
}

// finalState records the register's value and, on every node, which keys
// of keys (the lock key and the others of the lock, see scannedKeys) are
// still there. tlsConfig reaches nodes that serve TLS only.
func finalState(ctx context.Context, rec *Recorder, resource *redis.Client, addrs []string, tlsConfig *tls.Config, keys []string) {
	finalStateOf(ctx, rec, resource, registerKey, proxiedScanNodes(addrs, tlsConfig), keys)
}

// proxiedScanNodes are the lock nodes at addrs (their proxies, or the
// servers), named n0, n1, ... in that order, for the final scan.
func proxiedScanNodes(addrs []string, tlsConfig *tls.Config) []scanNode {
	out := make([]scanNode, len(addrs))
	for i, a := range addrs {
		out[i] = scanNode{"n" + strconv.Itoa(i), func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: a, TLSConfig: tlsConfig, MaxRetries: 2, ContextTimeoutEnabled: true, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
		}}
	}
	return out
}

// finalStateOf is finalState for the register and lock nodes given.
func finalStateOf(ctx context.Context, rec *Recorder, resource *redis.Client, register string, nodes []scanNode, keys []string) {
	e := Event{Kind: RegisterFinal, Client: NoClient}
	v, err := resource.Get(ctx, register).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		e.Err = err.Error()
	}
	e.Value = v
	rec.Record(e)
	for _, n := range nodes {
		c := n.open()
		e := Event{Kind: KeyScan, Client: NoClient, Node: n.name}
		found, err := keysOn(ctx, c, keys)
		if err != nil {
			e.Err = err.Error()
		}
		e.Detail = found
		c.Close()
		rec.Record(e)
	}
}
