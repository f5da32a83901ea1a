package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// Verdict is what a scenario is expected to show.
type Verdict string

// The verdicts.
const (
	// VerdictSafe: no violation of (a) mutual exclusion, (b) token order,
	// (c) fence order, (e) leftover keys, and (f) acquisitions resume after
	// the faults heal.
	VerdictSafe Verdict = "safe"
	// VerdictUnsafeByDesign: the fault breaks an assumption Redlock states
	// (a restarted node votes at once, a node's clock jumps unguarded, a
	// holder stalls past its validity), so (a) is violated; the fenced
	// resource still never goes back (c), and no key is left behind (e).
	VerdictUnsafeByDesign Verdict = "unsafe-by-design"
	// VerdictBaseline: a naive scheme, whose safety violations the checker
	// must catch.
	VerdictBaseline Verdict = "baseline"
)

// Expect is a scenario's expected verdict.
type Expect struct {
	Verdict Verdict
	// AlsoViolated lists checks besides (a) that an unsafe-by-design
	// scenario must violate (token order, when the second line of defence
	// of the fencing tokens is taken away too). Others must hold.
	AlsoViolated []Check
}

// Judge compares a result with the expectation; nil means they agree.
func (x Expect) Judge(r Result) error {
	c := r.Counts
	switch x.Verdict {
	case VerdictSafe:
		if r.Total() != 0 {
			return fmt.Errorf("expected safe, got %s", Summarize(r))
		}
	case VerdictUnsafeByDesign:
		var wrong []string
		if c[CheckMutualExclusion] == 0 {
			wrong = append(wrong, "no mutual-exclusion violation was provoked")
		}
		for _, ch := range AllChecks {
			if ch == CheckMutualExclusion {
				continue
			}
			want := contains(x.AlsoViolated, ch)
			if want && c[ch] == 0 {
				wrong = append(wrong, fmt.Sprintf("%s was expected to fail and held", ch))
			}
			if !want && c[ch] > 0 {
				wrong = append(wrong, fmt.Sprintf("%s failed %d times", ch, c[ch]))
			}
		}
		if len(wrong) > 0 {
			return fmt.Errorf("expected unsafe-by-design: %s (%s)", strings.Join(wrong, "; "), Summarize(r))
		}
	case VerdictBaseline:
		if c[CheckMutualExclusion]+c[CheckTokenOrder]+c[CheckFenceOrder] == 0 {
			return fmt.Errorf("expected the baseline to be caught violating safety, got %s", Summarize(r))
		}
	default:
		return fmt.Errorf("unknown verdict %q", x.Verdict)
	}
	return nil
}

func contains(cs []Check, c Check) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// Summarize is a one-line account of a result's violations.
func Summarize(r Result) string {
	if r.Total() == 0 {
		return "no violations"
	}
	var parts []string
	for _, ch := range AllChecks {
		if n := r.Counts[ch]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", ch, n))
		}
	}
	return strings.Join(parts, " ")
}

// StepKind says what a schedule step does.
type StepKind int

// The step kinds.
const (
	StepApply          StepKind = iota + 1 // apply Fault
	StepHeal                               // heal Fault
	StepWait                               // let Wait pass
	StepAwaitHold                          // wait until Client (or any, AnyClient) acquires the lock, and pin that hold
	StepUnpin                              // let the pinned holder release
	StepQuiesce                            // hold clients back until no node has the lock key
	StepResume                             // let the clients go on
	StepHoldBack                           // park every client but the pinned holder
	StepAlign                              // wait until the wall clock is Wait into a second
	StepAwaitExtension                     // wait until the library reports an extension's outcome, unless the pinned hold ended
	StepFresh                              // Client starts as a new process: a new locker that has met no node
	StepContend                            // let the other clients try for the lock for Wait while the pinned hold goes on
)

// AnyClient in a StepAwaitHold step accepts an acquisition by any client.
const AnyClient = -1

// Step is one entry of a scenario's schedule.
type Step struct {
	Kind   StepKind
	Fault  Fault
	Wait   time.Duration
	Client int
}

// Apply is the step that applies f.
func Apply(f Fault) Step { return Step{Kind: StepApply, Fault: f} }

// Heal is the step that heals f.
func Heal(f Fault) Step { return Step{Kind: StepHeal, Fault: f} }

// Wait is the step that lets d pass.
func Wait(d time.Duration) Step { return Step{Kind: StepWait, Wait: d} }

// AwaitHold is the step that waits for client (or AnyClient) to acquire the
// lock in an attempt started from then on, and pins that hold.
func AwaitHold(client int) Step { return Step{Kind: StepAwaitHold, Client: client} }

// TryAwaitHold is AwaitHold that goes on, pinning nothing, when client
// has not acquired within d: a schedule whose holder the library may
// rightly refuse (its vote would rest on a write a failover loses).
func TryAwaitHold(client int, d time.Duration) Step {
	return Step{Kind: StepAwaitHold, Client: client, Wait: d}
}

// Fresh is the step that makes client start over as a new process (a
// late client's first start): its old locker is closed, and the new one
// has met no node and learned nothing of them.
func Fresh(client int) Step { return Step{Kind: StepFresh, Client: client} }

// Unpin is the step that lets the pinned holder release.
func Unpin() Step { return Step{Kind: StepUnpin} }

// Quiesce is the step that parks every client until no node has the lock
// key, reporting keys nobody holds.
func Quiesce() Step { return Step{Kind: StepQuiesce} }

// Resume is the step that lets parked clients go on.
func Resume() Step { return Step{Kind: StepResume} }

// HoldBack is the step that parks every client but the pinned holder.
func HoldBack() Step { return Step{Kind: StepHoldBack} }

// AlignTo is the step that waits until the wall clock is at into a second
// (the next time it is): Redis reports its uptime in whole wall-clock
// seconds, so a fault timed against them is one a guard must round right.
func AlignTo(at time.Duration) Step { return Step{Kind: StepAlign, Wait: at} }

// AwaitExtension is the step that waits until the library reports that an
// extension ended, extended or not, unless the pinned hold has ended: a
// fault applied right after it has the most time before the next one.
func AwaitExtension() Step { return Step{Kind: StepAwaitExtension} }

// Contend is the step that lets the other clients try for the lock for d
// while the pinned holder holds on. In a schedule that expects two holders
// (unsafe by design, or a baseline), a challenger that has not acquired
// within d gets up to 3d more, and the step ends at its first acquisition:
// on a loaded machine the challenger's retries can take longer than d to
// reach the nodes that forgot, and an unsafe schedule that never gets to
// show its violation fails the test. A safe schedule's window stays d.
func Contend(d time.Duration) Step { return Step{Kind: StepContend, Wait: d} }

func window(f Fault, d time.Duration) []Step { return []Step{Apply(f), Wait(d), Heal(f)} }

// String is how the report lists a step.
func (s Step) String() string {
	switch s.Kind {
	case StepApply:
		return "apply " + s.Fault.Name()
	case StepHeal:
		return "heal " + s.Fault.Name()
	case StepWait:
		return "wait " + s.Wait.String()
	case StepAwaitHold:
		if s.Wait > 0 {
			return fmt.Sprintf("await and pin an acquisition by %s for up to %s", clientName(s.Client), s.Wait)
		}
		return "await and pin an acquisition by " + clientName(s.Client)
	case StepFresh:
		return clientName(s.Client) + " starts as a new process"
	case StepUnpin:
		return "unpin the held lock"
	case StepQuiesce:
		return "quiesce the clients"
	case StepResume:
		return "resume the clients"
	case StepHoldBack:
		return "park the other clients"
	case StepAlign:
		return fmt.Sprintf("wait until %v into a wall-clock second", s.Wait)
	case StepAwaitExtension:
		return "await the outcome of an extension, unless the pinned hold ended"
	case StepContend:
		return fmt.Sprintf("let the other clients try for %s while the pinned hold goes on", s.Wait)
	}
	return "?"
}

// Scenario is faults + schedule + expected verdict, for one lock scheme.
type Scenario struct {
	Name   string
	About  string // one sentence for the report
	Scheme Scheme
	Expect Expect

	Nodes   int           // default 5
	Clients int           // default 3
	TTL     time.Duration // default 1s
	Hold    time.Duration // work per hold; default 20ms
	Permits int           // a semaphore's K: how many may hold at once (0: a lock)
	UseDo   bool          // hold through Do (auto-extended) instead of Acquire/Release

	Persistence bool // AOF with fsync always on every node
	// AppendFsync, with Persistence, is the nodes' appendfsync instead of
	// always ("everysec").
	AppendFsync string
	// FsyncedVotes is redlock.Options.FsyncedVotes: a vote on a node with
	// WAITAOF counts once the master confirmed its fsync, and an everysec
	// node counts as persistent.
	FsyncedVotes bool
	// NeedsWaitAOF: the scenario is about a WAITAOF that FsyncedVotes
	// trusts (Redis 8.0+); a run on a server without one is refused rather
	// than run as if it tested it (waitAOFSkip says why it does not run on
	// Redis 7.0 or Valkey).
	NeedsWaitAOF bool
	RestartGrace time.Duration // redlock.Options.RestartGrace (0: library default)
	NoClockGuard bool          // turn the clock-jump guard off
	ClientSkew   map[int]time.Duration
	ClientTTL    map[int]time.Duration // a client's own TTL instead of TTL (clients of one lock with different TTLs)
	// ClientGrace is a client's own RestartGrace instead of RestartGrace
	// (a holder that starts beside servers just started, whose grace
	// does not matter to the schedule: the challenger's does).
	ClientGrace map[int]time.Duration
	Replica     bool // node 1 replicates node 0 (the failover baseline)
	// Replicas makes every lock node a master with an asynchronous replica
	// of its own (started beside the N nodes; the clients never see it).
	Replicas bool
	// SpareReplicas starts a spare server beside each lock node (n<N+i>
	// for n<i>), replicating nothing until a ReplicaJoin fault makes it
	// the node's replica.
	SpareReplicas bool
	// AllowFailoverNodes is redlock.Options.AllowFailoverNodes: the
	// clients accept nodes whose masters have replicas.
	AllowFailoverNodes bool
	// DurableVotes is redlock.Options.DurableVotes: a vote counts once the
	// master's replicas acknowledged it.
	DurableVotes bool
	// AllowEvictingNodes is redlock.Options.AllowEvictingNodes: the
	// clients accept nodes that may evict keys (maxmemory with a policy
	// other than noeviction).
	AllowEvictingNodes bool
	TLS                bool // clients reach the lock nodes over TLS with client certificates
	// Once runs the schedule a single time even in a soak (a failover
	// cannot be repeated on the same cluster).
	Once bool
	// ClusterMasters > 0: each node is a Redis Cluster of that many
	// masters, reached through a ClusterClient (see cluster.go).
	ClusterMasters int
	// ClusterReplicas is how many asynchronous replicas each master of a
	// Cluster node has.
	ClusterReplicas int
	// Late are clients that do not exist when the run starts: each is
	// made, as a new process that has met no node, by its first
	// Fresh step (counted as parked until then).
	Late []int

	Schedule []Step
}

func (s Scenario) nodes() int            { return cmpOr(s.Nodes, 5) }
func (s Scenario) clients() int          { return cmpOr(s.Clients, 3) }
func (s Scenario) ttl() time.Duration    { return cmpOr(s.TTL, time.Second) }
func (s Scenario) hold() time.Duration   { return cmpOr(s.Hold, 20*time.Millisecond) }
func (s Scenario) margin() time.Duration { return s.ttl() / 4 }
func (s Scenario) grace() time.Duration  { return max(s.RestartGrace, s.maxTTL()) }

// clientTTL is client i's TTL.
func (s Scenario) clientTTL(i int) time.Duration { return cmpOr(s.ClientTTL[i], s.ttl()) }

// maxTTL is the largest TTL any client uses: the restart grace of every
// client, whatever its own TTL.
func (s Scenario) maxTTL() time.Duration {
	ttl := s.ttl()
	for _, t := range s.ClientTTL {
		ttl = max(ttl, t)
	}
	return ttl
}

// RecoveryBound is how soon after the faults heal acquisitions must
// resume (f): a restarted node may sit out one grace, and a lock taken
// during the fault may run out its TTL first.
func (s Scenario) RecoveryBound() time.Duration { return s.grace() + 2*s.maxTTL() + 3*time.Second }

// needsFakeTime reports whether a fault of the schedule moves a clock.
func (s Scenario) needsFakeTime() bool {
	for _, st := range s.Schedule {
		switch st.Fault.(type) {
		case ClockJump, ClockFast, ShardClockJump:
			return true
		}
	}
	return false
}

// waitAOFSkip tells why a scenario about WAITAOF does not run on the
// server build REDLOCK_TEST_SERVER selects, or "" when it runs: Redis 7.0
// has no WAITAOF, and Valkey 9.1's WAITAOF may confirm before it fsyncs,
// so FsyncedVotes does not count their everysec nodes as persistent and
// the run would be safe for another reason (the grace) while reporting the
// scenario as tested. make test-matrix-chaos runs it on Redis 8.6.
func waitAOFSkip(sc Scenario) string {
	if !sc.NeedsWaitAOF || redistest.SelectedServer() == redistest.Redis86 {
		return ""
	}
	return "NOT TESTED ON " + strings.ToUpper(redistest.SelectedServer()) + ": " + sc.Name + " needs a WAITAOF that FsyncedVotes trusts (Redis 8.0+; Valkey 9.1.2 confirms before it fsyncs); make test-matrix-chaos runs it on redis-8.6 (REDLOCK_TEST_SERVER)"
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Scenarios is the table the short suite and the soak run. Node indices
// are 0..4 of a 5-node cluster; clients 0..2.
func Scenarios() []Scenario {
	// TTL of the scenarios where one pinned hold must outlast several
	// nemesis steps (a container kill and start take seconds on a loaded
	// machine).
	const long = 10 * time.Second
	rl := RedlockScheme{}
	safe := Expect{Verdict: VerdictSafe}
	byDesign := Expect{Verdict: VerdictUnsafeByDesign}
	baseline := Expect{Verdict: VerdictBaseline}

	// The holder gets its lock from exactly a quorum (n0-n2; n3 and n4 cut
	// off while no node had the key) and is pinned; the other clients are
	// parked while n0 forgets the lock somehow and n3, n4 come back; then
	// they go: n0, n3, n4 form a quorum that does not know the lock, and
	// they have 1.5s to use it while the holder still holds. Parked, the
	// challenger's first attempt after the heal starts clean, with none of
	// its own keys still being cleaned up on the nodes it needs. Two
	// clients: the holder and one challenger.
	quorumOfThree := Partition{[]int{3, 4}}
	cutTwo := []Step{Quiesce(), Apply(quorumOfThree), Resume()}
	// The partition heals only once the holder's calls to n3 and n4 are
	// past their node timeout: a call queued in its pipe while the
	// partition was on would otherwise reach them after the heal and give
	// the holder all five nodes.
	forget := func(by int, f Fault) []Step {
		return append(slices.Clone(cutTwo), AwaitHold(by), HoldBack(), Apply(f), Heal(f), Wait(500*time.Millisecond),
			Heal(quorumOfThree), Resume(), Contend(1500*time.Millisecond), Unpin())
	}

	table := []Scenario{
		{Name: "no-faults", About: "control: contention alone", Scheme: rl, Expect: safe,
			Schedule: []Step{Wait(3 * time.Second)}},
		{Name: "latency", About: "every request and reply delayed 40ms±30ms (round trips near the 100ms node timeout)", Scheme: rl, Expect: safe,
			Schedule: window(Latency{[]int{0, 1, 2, 3, 4}, 40 * time.Millisecond, 30 * time.Millisecond}, 3*time.Second)},
		{Name: "late-requests", About: "requests to two nodes arrive 200ms±150ms late, around the 100ms node timeout; then the clients park and the nodes are scanned for keys nobody holds",
			Scheme: rl, Expect: safe,
			Schedule: []Step{Apply(LateRequests{[]int{0, 1}, 200 * time.Millisecond, 150 * time.Millisecond}), Wait(3 * time.Second), Quiesce(),
				Heal(LateRequests{[]int{0, 1}, 200 * time.Millisecond, 150 * time.Millisecond}), Resume()}},
		{Name: "bandwidth", About: "two nodes answer through a 1KB/s link", Scheme: rl, Expect: safe,
			Schedule: window(Bandwidth{[]int{0, 1}, 1}, 3*time.Second)},
		{Name: "slow-close", About: "three nodes close connections 500ms late", Scheme: rl, Expect: safe,
			Schedule: window(SlowClose{[]int{0, 1, 2}, 500 * time.Millisecond}, 3*time.Second)},
		{Name: "reset-peer", About: "two nodes reset every connection 50ms after it opens", Scheme: rl, Expect: safe,
			Schedule: window(ResetPeer{[]int{0, 1}, 50 * time.Millisecond}, 3*time.Second)},
		{Name: "timeout", About: "two nodes swallow every request (blackhole)", Scheme: rl, Expect: safe,
			Schedule: window(Blackhole{[]int{0, 1}}, 3*time.Second)},
		{Name: "limit-data", About: "two nodes cut each connection after 2000 bytes", Scheme: rl, Expect: safe,
			Schedule: window(LimitData{[]int{0, 1}, 2000}, 3*time.Second)},
		{Name: "partition-minority", About: "two of five nodes cut off", Scheme: rl, Expect: safe,
			Schedule: window(Partition{[]int{0, 1}}, 3*time.Second)},
		{Name: "partition-majority", About: "three of five nodes cut off: no quorum until healed", Scheme: rl, Expect: safe,
			Schedule: window(Partition{[]int{0, 1, 2}}, 3*time.Second)},
		{Name: "partition-flapping", About: "a majority cut off and back every 300ms", Scheme: rl, Expect: safe,
			Schedule: window(Flapping{[]int{0, 1, 2}, 300 * time.Millisecond}, 4*time.Second)},
		{Name: "node-pause", About: "a node of a three-node quorum frozen (SIGSTOP / docker pause) for 1.5 TTL",
			Scheme: rl, Expect: safe,
			Schedule: append(slices.Clone(cutTwo), AwaitHold(AnyClient), Apply(NodePause{0}), Heal(quorumOfThree),
				Wait(1500*time.Millisecond), Heal(NodePause{0}))},
		{Name: "client-pause", About: "the holder stalls 2 TTL after checking its validity (a GC pause)",
			Scheme: rl, Expect: byDesign,
			Schedule: []Step{Apply(ClientPause{0, 2 * time.Second}), AwaitHold(0), Wait(3 * time.Second), Heal(ClientPause{0, 2 * time.Second})}},
		{Name: "client-clock-skew", About: "one client's wall clock 5 TTL ahead (Redlock's validity uses the monotonic clock)",
			Scheme: rl, Expect: safe, ClientSkew: map[int]time.Duration{1: 5 * time.Second},
			Schedule: []Step{Wait(3 * time.Second)}},
		{Name: "restart-aof", About: "a quorum node crashes and restarts at once, keeping its data (AOF, fsync always); no restart grace",
			Scheme: rl, Expect: safe, TTL: long, Clients: 2, Persistence: true, RestartGrace: redlock.NoRestartGrace,
			Schedule: forget(AnyClient, Crash{0})},
		{Name: "restart-fsynced", About: "a quorum node is killed (SIGKILL) and restarted on its data, appendfsync everysec: its votes counted only once WAITAOF confirmed their fsync, so it keeps them and votes again at once, grace on (Redis 8.6)",
			Scheme: rl, Expect: safe, TTL: long, Clients: 2, Persistence: true, AppendFsync: "everysec", FsyncedVotes: true, NeedsWaitAOF: true,
			Schedule: forget(AnyClient, Crash{0})},
		{Name: "restart-empty-grace", About: "a quorum node restarts empty at once; it sits out the restart grace",
			Scheme: rl, Expect: safe, TTL: long, Clients: 2,
			Schedule: forget(AnyClient, Crash{0})},
		{Name: "restart-empty-mixed-ttl", About: "as restart-empty-grace, but the holder uses 10s locks and the challenger 1s locks: the challenger keeps the restarted node out for 10s, learned from the other nodes",
			Scheme: rl, Expect: safe, TTL: time.Second, ClientTTL: map[int]time.Duration{0: long}, Clients: 2,
			Schedule: forget(0, Crash{0})},
		{Name: "restart-rapid-subsecond", About: "900ms locks, four clients; a node of the holder's quorum restarts empty just before a wall-clock second turns, or its clock jumps 2 TTL, four times a round; grace and clock guard on",
			Scheme: rl, Expect: safe, TTL: 900 * time.Millisecond, Clients: 4,
			Schedule: rapidRestarts(900 * time.Millisecond)},
		{Name: "restart-empty-no-grace", About: "a quorum node restarts empty and votes at once: two holders; time-based tokens still increase",
			Scheme: rl, Expect: byDesign, TTL: long, Clients: 2, RestartGrace: redlock.NoRestartGrace,
			Schedule: forget(AnyClient, Crash{0})},
		{Name: "restart-empty-no-grace-skew", About: "as restart-empty-no-grace, and the holder's clock runs 1h ahead: tokens go back, the fenced resource refuses them",
			Scheme: rl, Expect: Expect{Verdict: VerdictUnsafeByDesign, AlsoViolated: []Check{CheckTokenOrder}},
			TTL: long, RestartGrace: redlock.NoRestartGrace, Clients: 2,
			ClientSkew: map[int]time.Duration{0: time.Hour},
			Schedule:   forget(0, Crash{0})},
		{Name: "clock-jump-guard", About: "a quorum node's clock jumps 2 TTL ahead; the guard sees it in the next reply",
			Scheme: rl, Expect: safe, TTL: long, Clients: 2,
			Schedule: forget(AnyClient, ClockJump{0, 2 * long})},
		{Name: "clock-jump-no-guard", About: "a quorum node's clock jumps 2 TTL ahead, guard off: two holders",
			Scheme: rl, Expect: byDesign, TTL: long, Clients: 2, NoClockGuard: true,
			Schedule: forget(AnyClient, ClockJump{0, 2 * long})},
		{Name: "clock-fast", About: "a quorum node's clock runs 4x fast; the guard sees it drift",
			Scheme: rl, Expect: safe, TTL: long, Clients: 2,
			Schedule: append(slices.Clone(cutTwo), AwaitHold(AnyClient), Apply(ClockFast{0, 4}), Heal(quorumOfThree),
				Wait(4*time.Second), Unpin(), Heal(ClockFast{0, 4}))},
		{Name: "extend-flapping", About: "holds of 2.5 TTL through Do (auto-extend) while two nodes flap",
			Scheme: rl, Expect: safe, UseDo: true, Hold: 2500 * time.Millisecond,
			Schedule: window(Flapping{[]int{0, 1}, 200 * time.Millisecond}, 5*time.Second)},
		{Name: "extend-late-requests", About: "holds of 2.5 TTL through Do while requests to two nodes arrive around the node timeout; then the nodes are scanned",
			Scheme: rl, Expect: safe, UseDo: true, Hold: 2500 * time.Millisecond,
			Schedule: []Step{Apply(LateRequests{[]int{0, 1}, 200 * time.Millisecond, 150 * time.Millisecond}), Wait(5 * time.Second), Quiesce(),
				Heal(LateRequests{[]int{0, 1}, 200 * time.Millisecond, 150 * time.Millisecond}), Resume()}},

		{Name: "baseline-setnx-getset", About: "SETNX+GETSET timestamp lock; one client's clock 5 TTL ahead takes locks over",
			Scheme: GetSetScheme{}, Expect: baseline, ClientSkew: map[int]time.Duration{1: 5 * time.Second},
			Schedule: []Step{Wait(3 * time.Second)}},
		{Name: "baseline-setnx-del", About: "SET NX + unconditional DEL; the holder stalls past its TTL and deletes the next holder's lock",
			Scheme: SetNXDelScheme{}, Expect: baseline, Hold: 300 * time.Millisecond,
			Schedule: []Step{Apply(ClientPause{0, 2 * time.Second}), AwaitHold(0), Wait(3 * time.Second), Heal(ClientPause{0, 2 * time.Second})}},
		{Name: "baseline-failover", About: "single master, async replica promoted after the master dies with the lock unreplicated",
			Scheme: FailoverScheme{}, Expect: baseline, TTL: long, Replica: true, Once: true,
			Schedule: []Step{Quiesce(), Apply(ReplicationCut{[]int{0}}), Resume(), AwaitHold(AnyClient), Apply(Failover{[]int{0}}),
				Contend(1500 * time.Millisecond), Unpin(), Heal(Failover{[]int{0}}), Heal(ReplicationCut{[]int{0}})}},
	}
	table = append(table, failoverScenarios()...)
	table = append(table, clusterScenarios()...)
	table = append(table, epochScenarios()...)
	table = append(table, evictScenarios()...)
	table = append(table, tlsScenarios(table)...)
	table = append(table, fairScenarios(table)...)
	return append(table, semaphoreScenarios()...)
}

// failoverTTL is the TTL of the failover scenarios: the failover comes
// right after one of the holder's extensions, and the challengers must
// take the lock before its next one (a third of the TTL later) finds the
// keys gone; a Docker kill alone takes half a second.
const failoverTTL = 4500 * time.Millisecond

// failoverDuring is the schedule of the failover scenarios. Every node is a
// master with an async replica; a hold through Do (auto-extended) is
// pinned, taken while the nodes of away (if any) are cut off from the
// clients, so that the holder's quorum has no spare vote; the replication
// links of masters are cut, so that what the holder's extensions write on
// them from then on never reaches their replicas; once the original TTL
// has run out (the replicas' copy of the key has expired) and right after
// the holder's next extension, the nodes of away come back, those masters
// fail over at once, and the challengers, never held back, go for the
// promoted replicas. The extensions made after the cut are the writes a
// failover really loses. The challengers have until the holder's next
// extension, which re-creates its key where it is missing.
func failoverDuring(masters, away []int) []Step {
	var steps []Step
	if len(away) > 0 {
		steps = []Step{Quiesce(), Apply(Partition{away}), Resume()}
	}
	steps = append(steps, AwaitHold(AnyClient), Apply(ReplicationCut{masters}), Wait(failoverTTL+200*time.Millisecond),
		AwaitExtension())
	if len(away) > 0 {
		steps = append(steps, Heal(Partition{away}))
	}
	return append(steps, Apply(Failover{masters}), Wait(failoverTTL/2), Unpin(), Heal(Failover{masters}), Heal(ReplicationCut{masters}))
}

// failoverScenarios fail over a minority and a majority of the nodes
// during a hold, with votes that are not durable and no restart grace:
// unsafe by design both. A majority of promoted replicas lacks the
// holder's last extension and lets a challenger in. A minority does too
// when the holder's quorum has no spare vote (here n4 was cut off when it
// took the lock; a node that missed one extension does as much): two
// promoted replicas and n4 are a quorum that never saw the extension. (Run
// with all five votes, the minority failover is safe: on Docker, where an
// extension now and then misses a node's timeout, it was not.)
// The same schedules with durable votes are safe: an extension counts only
// where the replicas acknowledged it, so after the cut the holder's
// extensions fail and its lock runs out before the failover.
func failoverScenarios() []Scenario {
	return []Scenario{
		failoverScenario("failover-minority-not-durable", "every node a master with an async replica; a hold through Do taken with n4 cut off; two masters' replication cut, then they fail over to replicas that missed the holder's extensions; votes not durable, no grace: they and n4 are a quorum",
			[]int{0, 1}, []int{4}, false, Expect{Verdict: VerdictUnsafeByDesign}),
		failoverScenario("failover-majority-not-durable", "every node a master with an async replica; during a hold through Do three masters' replication is cut, then they fail over to replicas that missed the holder's extensions; votes not durable, no grace: a challenger takes the lock while the holder's extension still runs",
			[]int{0, 1, 2}, nil, false, Expect{Verdict: VerdictUnsafeByDesign}),
		failoverScenario("failover-minority-durable", "as failover-minority-not-durable, with durable votes (no grace either): the extensions after the cut are not acknowledged by the cut replicas and do not count",
			[]int{0, 1}, []int{4}, true, Expect{Verdict: VerdictSafe}),
		failoverScenario("failover-majority-durable", "as failover-majority-not-durable, with durable votes (no grace either): the extensions after the cut do not count, and the holder's lock runs out before the failover",
			[]int{0, 1, 2}, nil, true, Expect{Verdict: VerdictSafe}),
	}
}

// failoverScenario is a failover of masters during a hold of the mutex
// (see failoverDuring), without restart grace, with durable votes or with
// votes that are not durable (AllowFailoverNodes).
func failoverScenario(name, about string, masters, away []int, durable bool, x Expect) Scenario {
	return Scenario{Name: name, About: about, Scheme: RedlockScheme{}, Expect: x,
		TTL: failoverTTL, UseDo: true, Replicas: true, AllowFailoverNodes: !durable, DurableVotes: durable,
		RestartGrace: redlock.NoRestartGrace, Once: true, Schedule: failoverDuring(masters, away)}
}

// rapidRestarts is a round of four forgotten locks under a sub-second TTL:
// each time the holder gets its lock from exactly a quorum (n0-n2) and a
// node of it forgets the lock, and the challenger goes for n3, n4 and that
// node. Twice the node restarts empty at 930ms into a wall-clock second and
// the challenger meets it right after the second turned, when INFO already
// reports an uptime of 1s; twice the node's clock jumps 2 TTL instead.
func rapidRestarts(ttl time.Duration) []Step {
	quorumOfThree := Partition{[]int{3, 4}}
	forget := func(node int, restart bool) []Step {
		steps := []Step{Quiesce(), Apply(quorumOfThree), Resume(), AlignTo(800 * time.Millisecond), AwaitHold(AnyClient), HoldBack()}
		if restart {
			steps = append(steps, Apply(Crash{node}), AlignTo(930*time.Millisecond), Heal(Crash{node}),
				Heal(quorumOfThree), AlignTo(20*time.Millisecond))
		} else {
			jump := ClockJump{node, 2 * ttl}
			steps = append(steps, Apply(jump), Heal(jump), Wait(ttl/2), Heal(quorumOfThree))
		}
		return append(steps, Resume(), Wait(ttl), Unpin())
	}
	var steps []Step
	for i, node := range []int{0, 1, 2, 0} {
		steps = append(steps, forget(node, i%2 == 0)...)
	}
	return steps
}

// ScenarioByName finds a scenario of the table.
func ScenarioByName(name string) (Scenario, error) {
	var names []string
	for _, s := range append(Scenarios(), RWScenarios()...) {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Scenario{}, fmt.Errorf("chaos: no scenario %q (have: %s)", name, strings.Join(names, ", "))
}
