package chaos

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
)

// The semaphore workload: the same clients, holds and faults as the
// lock's, against a semaphore of Permits permits (the library's, or a
// naive one as the baseline); the checker allows Permits holders at once
// and judges tokens and fenced writes per slot.

// SemaphorePermits is the K of the semaphore scenarios: the smallest K for
// which per-node admission with a majority quorum is unsafe (DESIGN §5).
const SemaphorePermits = 2

// slotted is a held permit that knows its slot.
type slotted interface{ Slot() int }

// slotOf is h's slot, 0 for a lock.
func slotOf(h Held) int {
	if s, ok := h.(slotted); ok {
		return s.Slot()
	}
	return 0
}

// fencedKey is the resource h writes with its token: one per slot for a
// semaphore's permit, whose tokens are ordered only within the slot.
func fencedKey(h Held) string {
	if s, ok := h.(slotted); ok {
		return resourceKey + ":slot:" + strconv.Itoa(s.Slot())
	}
	return resourceKey
}

// RedlockSemaphoreScheme is the library's Semaphore, through its public API.
type RedlockSemaphoreScheme struct{ Permits int }

// Name is "redlock-semaphore".
func (RedlockSemaphoreScheme) Name() string { return "redlock-semaphore" }

// LockKey is the key of slot 0.
func (s RedlockSemaphoreScheme) LockKey() string { return s.LockKeys()[0] }

// ExtraKeys are the other slots and the record of the number of permits
// (Client.Keys(name).Permits): no node may keep any once no client holds a
// permit.
func (s RedlockSemaphoreScheme) ExtraKeys() []string {
	return append(s.LockKeys()[1:], redlock.DefaultKeyPrefix+"{"+LockName+"}:permits")
}

// LockKeys are the slot keys (Keys.Permit, default prefix).
func (s RedlockSemaphoreScheme) LockKeys() []string {
	keys := make([]string, s.Permits)
	for i := range keys {
		keys[i] = redlock.DefaultKeyPrefix + "{" + LockName + "}:permit:" + strconv.Itoa(i)
	}
	return keys
}

// NewLocker builds a client and its semaphore over the node proxies.
func (s RedlockSemaphoreScheme) NewLocker(env SchemeEnv) (Locker, error) {
	c, clients, err := newRedlockClient(env)
	if err != nil {
		return nil, err
	}
	sem, err := c.Semaphore(LockName, s.Permits)
	if err != nil {
		_ = c.Close()
		closeClients(clients)
		return nil, err
	}
	return &semaphoreLocker{redlockLocker{c: c, clients: clients, ttl: env.TTL}, sem}, nil
}

type semaphoreLocker struct {
	redlockLocker
	sem *redlock.Semaphore
}

func (l *semaphoreLocker) Acquire(ctx context.Context) (Held, error) {
	p, err := l.sem.Acquire(ctx, redlock.WithTTL(l.ttl))
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (l *semaphoreLocker) Do(ctx context.Context, fn func(ctx context.Context, h Held) error) error {
	return l.sem.Do(ctx, func(ctx context.Context, p *redlock.Permit) error {
		return fn(ctx, p)
	}, redlock.WithTTL(l.ttl))
}

// NaiveSemaphoreScheme is the semaphore DESIGN §5 warns against: each node
// admits at most Permits live holders, and a holder needs a majority of
// nodes to admit it. Different clients admitted by different majorities
// are more than Permits holders at once: with 5 nodes and 2 permits, A on
// n0-n2, B on n2-n4 and C on n0, n1, n3 leave no node with more than two
// and hold three permits. It has no fencing (token 0: not judged).
type NaiveSemaphoreScheme struct{ Permits int }

// Name is "naive-semaphore".
func (NaiveSemaphoreScheme) Name() string { return "naive-semaphore" }

// LockKey is the key of its slot 0.
func (s NaiveSemaphoreScheme) LockKey() string { return s.LockKeys()[0] }

// ExtraKeys are the other admission slots, scanned like the first.
func (s NaiveSemaphoreScheme) ExtraKeys() []string { return s.LockKeys()[1:] }

// LockKeys are its per-node admission slots.
func (s NaiveSemaphoreScheme) LockKeys() []string {
	keys := make([]string, s.Permits)
	for i := range keys {
		keys[i] = "naive:{" + LockName + "}:permit:" + strconv.Itoa(i)
	}
	return keys
}

// naiveAdmit admits the owner ARGV[1] for ARGV[2] ms in the first free of
// the KEYS, if any: at most #KEYS live holders per node.
var naiveAdmit = redis.NewScript(`
for i = 1, #KEYS do
  if redis.call('SET', KEYS[i], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return 1
  end
end
return 0`)

// naiveRelease deletes the owner's admissions.
var naiveRelease = redis.NewScript(`
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
  end
end
return 0`)

// NewLocker connects to every node.
func (s NaiveSemaphoreScheme) NewLocker(env SchemeEnv) (Locker, error) {
	l := &naiveSemaphoreLocker{keys: s.LockKeys(), ttl: env.TTL}
	for _, a := range env.Addrs {
		l.nodes = append(l.nodes, nodeClient(a, env.TLSConfig))
	}
	return l, nil
}

type naiveSemaphoreLocker struct {
	nodes []*redis.Client
	keys  []string
	ttl   time.Duration
}

// Acquire asks every node in parallel and holds with a majority, for the
// TTL less the time the round took; short of it, it releases everywhere
// and tries again after a short jittered delay.
func (l *naiveSemaphoreLocker) Acquire(ctx context.Context) (Held, error) {
	for {
		owner := crand.Text()
		start := time.Now()
		admitted := l.each(ctx, true, func(ctx context.Context, rdb *redis.Client) bool {
			n, err := naiveAdmit.Run(ctx, rdb, l.keys, owner, l.ttl.Milliseconds()).Int()
			return err == nil && n == 1
		})
		h := &baselineHeld{deadline: start.Add(l.ttl - time.Since(start) - l.ttl/100)}
		h.release = func(ctx context.Context) error {
			l.each(ctx, false, func(ctx context.Context, rdb *redis.Client) bool {
				return naiveRelease.Run(ctx, rdb, l.keys, owner).Err() == nil
			})
			return nil
		}
		if admitted >= len(l.nodes)/2+1 {
			return h, nil
		}
		_ = h.release(context.WithoutCancel(ctx))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("chaos: naive-semaphore: gave up: %w (last attempt: %d of %d nodes admitted)", ctx.Err(), admitted, len(l.nodes))
		case <-time.After(5*time.Millisecond + rand.N(20*time.Millisecond)):
		}
	}
}

// naiveNodeTimeout bounds each call to a node, as the library's default
// node timeout does: a node whose connection broke in a partition costs an
// attempt that long, not a tenth of the TTL.
const naiveNodeTimeout = 200 * time.Millisecond

// each runs op on every node in parallel, each call bounded by
// naiveNodeTimeout, and counts the yeses; early, it returns as soon as a majority
// said yes or can no longer say it, as any Redlock-style client does (the
// calls still running go on: an admission they make expires with the TTL).
func (l *naiveSemaphoreLocker) each(ctx context.Context, early bool, op func(ctx context.Context, rdb *redis.Client) bool) int {
	yes := make(chan bool, len(l.nodes))
	for _, rdb := range l.nodes {
		go func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), naiveNodeTimeout)
			defer cancel()
			yes <- op(cctx, rdb)
		}()
	}
	quorum := len(l.nodes)/2 + 1
	n := 0
	for answered := 1; answered <= len(l.nodes); answered++ {
		if <-yes {
			n++
		}
		if early && (n >= quorum || n+len(l.nodes)-answered < quorum) {
			break
		}
	}
	return n
}

func (l *naiveSemaphoreLocker) Do(context.Context, func(context.Context, Held) error) error {
	return errNoDo("naive-semaphore")
}

func (l *naiveSemaphoreLocker) Close() error {
	for _, rdb := range l.nodes {
		_ = rdb.Close()
	}
	return nil
}

// semaphoreFailover runs a failover scenario of the mutex on the semaphore,
// with one client more than permits.
func semaphoreFailover(sc Scenario) Scenario {
	sc.Scheme = RedlockSemaphoreScheme{Permits: SemaphorePermits}
	sc.Permits, sc.Clients = SemaphorePermits, SemaphorePermits+1
	return sc
}

// rotatingPartitions plays DESIGN §5's counterexample with partitions that
// move: a first holder is admitted by n0-n2 and pinned; then, with n0 and
// n1 cut off, the next holder is admitted by n2-n4 and works 2s; then,
// for 1.5s, with n2 and n4 cut off, a third client reaches n0, n1 and n3, each of
// which has admitted only one holder. A naive semaphore of 2 permits
// admits it: three holders at once. The library's semaphore finds each
// node's free slot differs and the attempt splits.
func rotatingPartitions() []Step {
	first, second, third := Partition{[]int{3, 4}}, Partition{[]int{0, 1}}, Partition{[]int{2, 4}}
	return []Step{Quiesce(), Apply(first), Resume(), AwaitHold(AnyClient), HoldBack(),
		Heal(first), Apply(second), Resume(), Wait(400 * time.Millisecond),
		Heal(second), Apply(third), Wait(1500 * time.Millisecond), Unpin(), Heal(third)}
}

// semaphoreScenarios are the lock's faults against the semaphore of
// SemaphorePermits permits, with one client more than permits wherever a
// node forgets a holder (so that an unsafe state shows as K+1 holders),
// and the naive baseline under rotating partitions.
func semaphoreScenarios() []Scenario {
	const long = 10 * time.Second
	sem := RedlockSemaphoreScheme{Permits: SemaphorePermits}
	safe := Expect{Verdict: VerdictSafe}
	k := SemaphorePermits
	quorumOfThree := Partition{[]int{3, 4}}
	cutTwo := []Step{Quiesce(), Apply(quorumOfThree), Resume()}
	// As the lock's forget: the pinned holder's slot is known to n0-n2
	// only, n0 forgets it, and the challengers meet n0, n3, n4. They hold
	// 200ms each, so that two of them overlap while the pinned one holds.
	forget := func(f Fault) []Step {
		return append(slices.Clone(cutTwo), AwaitHold(AnyClient), HoldBack(), Apply(f), Heal(f), Wait(500*time.Millisecond),
			Heal(quorumOfThree), Resume(), Contend(1500*time.Millisecond), Unpin())
	}
	const challengerHold = 200 * time.Millisecond
	return []Scenario{
		{Name: "semaphore-no-faults", About: "control: four clients contend for two permits", Scheme: sem, Expect: safe,
			Permits: k, Clients: 4, Schedule: []Step{Wait(3 * time.Second)}},
		{Name: "semaphore-partition-minority", About: "two of five nodes cut off; four clients, two permits", Scheme: sem, Expect: safe,
			Permits: k, Clients: 4, Schedule: window(Partition{[]int{0, 1}}, 3*time.Second)},
		{Name: "semaphore-partition-flapping", About: "a majority cut off and back every 300ms; four clients, two permits", Scheme: sem, Expect: safe,
			Permits: k, Clients: 4, Schedule: window(Flapping{[]int{0, 1, 2}, 300 * time.Millisecond}, 4*time.Second)},
		{Name: "semaphore-rotating-partitions", About: "the partitions that make the naive semaphore admit three holders of two permits; slots keep the bound",
			Scheme: sem, Expect: safe, Permits: k, Clients: 3, TTL: long, Hold: 2 * time.Second, Schedule: rotatingPartitions()},
		{Name: "semaphore-node-pause", About: "a node of the holder's three-node quorum frozen for 1.5 TTL", Scheme: sem, Expect: safe,
			Permits: k, Clients: 4,
			Schedule: append(slices.Clone(cutTwo), AwaitHold(AnyClient), Apply(NodePause{0}), Heal(quorumOfThree),
				Wait(1500*time.Millisecond), Heal(NodePause{0}))},
		{Name: "semaphore-restart-aof", About: "a quorum node of the pinned holder's slot crashes and restarts with its data (AOF, fsync always); no grace",
			Scheme: sem, Expect: safe, Permits: k, Clients: k + 1, TTL: long, Hold: challengerHold, Persistence: true, RestartGrace: redlock.NoRestartGrace,
			Schedule: forget(Crash{0})},
		{Name: "semaphore-restart-empty-grace", About: "a quorum node of the pinned holder's slot restarts empty; it sits out the grace",
			Scheme: sem, Expect: safe, Permits: k, Clients: k + 1, TTL: long, Hold: challengerHold,
			Schedule: forget(Crash{0})},
		{Name: "semaphore-restart-empty-no-grace", About: "a quorum node restarts empty and votes at once: its slot is taken twice, three holders of two permits",
			Scheme: sem, Expect: Expect{Verdict: VerdictUnsafeByDesign}, Permits: k, Clients: k + 1, TTL: long, Hold: challengerHold,
			RestartGrace: redlock.NoRestartGrace, Schedule: forget(Crash{0})},
		{Name: "semaphore-clock-jump-guard", About: "a quorum node's clock jumps 2 TTL ahead; the guard sees it",
			Scheme: sem, Expect: safe, Permits: k, Clients: k + 1, TTL: long, Hold: challengerHold,
			Schedule: forget(ClockJump{0, 2 * long})},
		semaphoreFailover(failoverScenario("semaphore-failover-majority-durable", "three of five masters fail over during a hold to replicas that missed its extensions; durable votes, no grace: the extensions after the cut do not count, and no slot is taken twice",
			[]int{0, 1, 2}, nil, true, Expect{Verdict: VerdictSafe})),
		{Name: "baseline-naive-semaphore", About: "per-node admission of two holders with a majority quorum, under the rotating partitions: three holders",
			Scheme: NaiveSemaphoreScheme{Permits: k}, Expect: Expect{Verdict: VerdictBaseline}, Permits: k, Clients: 3,
			TTL: long, Hold: 2 * time.Second, Schedule: rotatingPartitions()},
	}
}
