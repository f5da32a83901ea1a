package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/quorumlabs/redlock"
)

// FairScheme is the library's fair lock (redlock.WithFairness): the
// mutex's client, keys and guards, with waiters queued by ticket on every
// node and the lock handed to the queue's head on release.
type FairScheme struct{}

// Name is "redlock-fair".
func (FairScheme) Name() string { return "redlock-fair" }

// LockKey is the mutex's key: the fair lock takes the same one.
func (FairScheme) LockKey() string { return RedlockScheme{}.LockKey() }

// ExtraKeys are the queue and the grant record each node keeps beside the
// key: none may stay once no client holds or waits for the lock.
func (FairScheme) ExtraKeys() []string {
	k := RedlockScheme{}.LockKey()
	return []string{k + ":queue", k + ":queue:expiry", k + ":queue:settings", k + ":grant"}
}

// NewLocker builds the mutex's locker and makes it ask for fairness.
func (FairScheme) NewLocker(env SchemeEnv) (Locker, error) {
	l, err := RedlockScheme{}.NewLocker(env)
	if err != nil {
		return nil, err
	}
	return fairLocker{l.(*redlockLocker)}, nil
}

type fairLocker struct{ *redlockLocker }

func (l fairLocker) Acquire(ctx context.Context) (Held, error) {
	lk, err := l.c.Acquire(ctx, LockName, redlock.WithTTL(l.ttl), redlock.WithFairness())
	if err != nil {
		return nil, err
	}
	return lk, nil
}

func (l fairLocker) Do(ctx context.Context, fn func(ctx context.Context, h Held) error) error {
	return l.c.Do(ctx, LockName, func(ctx context.Context, lk *redlock.Lock) error {
		return fn(ctx, lk)
	}, redlock.WithTTL(l.ttl), redlock.WithFairness())
}

// fairFaults are the mutex scenarios whose faults the fair lock runs too.
var fairFaults = []string{"no-faults", "partition-minority", "partition-flapping", "node-pause",
	"restart-aof", "restart-empty-grace", "clock-jump-guard", "failover-majority-durable"}

// fairScenarios copies the mutex scenarios named in fairFaults onto the
// fair lock, named "fair-<scenario>", expecting the same verdict; the
// checker also judges the order of the grants (CheckFairOrder).
func fairScenarios(mutex []Scenario) []Scenario {
	var out []Scenario
	for _, sc := range mutex {
		if !slices.Contains(fairFaults, sc.Name) {
			continue
		}
		sc.Name = "fair-" + sc.Name
		sc.About = "fair lock: " + sc.About
		sc.Scheme = FairScheme{}
		out = append(out, sc)
	}
	return out
}

// fairOrderMargin is how much earlier a waiter must have begun its Acquire
// than another for the checker to expect it served first: enough for its
// registration round to reach every node (a round is bounded by the node
// timeout, a tenth of the scenarios' TTL).
func fairOrderMargin(ttl time.Duration) time.Duration { return ttl / 4 }

// checkFairOrder judges (g): among waiters that stayed registered (their
// Acquire succeeded) and were not disturbed by a fault, one whose Acquire
// began at least margin before another's is served before it. A fault
// between a waiter's start and its grant may cost a node its queue, or the
// waiter its registration there, which only weakens fairness: such pairs
// are not judged.
func checkFairOrder(h History, spans []HoldSpan, faults []FaultWindow, margin time.Duration, add func(Violation)) {
	invoked := map[int]time.Duration{}
	for _, e := range h {
		if e.Kind == AcquireInvoke {
			invoked[e.Hold] = e.At
		}
	}
	disturbed := func(from, to time.Duration) bool {
		for _, f := range faults {
			if f.Apply <= to && f.Heal >= from {
				return true
			}
		}
		return false
	}
	for i := range spans {
		a := &spans[i]
		ia, ok := invoked[a.Hold]
		if !ok || disturbed(ia, a.Start) {
			continue
		}
		for j := range spans {
			b := &spans[j]
			ib, ok := invoked[b.Hold]
			if !ok || b.Client == a.Client || ib < ia+margin || b.Start >= a.Start {
				continue
			}
			add(Violation{Check: CheckFairOrder, At: b.Start,
				Detail: fmt.Sprintf("c%d h%d began %v after c%d h%d but was served %v before it",
					b.Client, b.Hold, ib-ia, a.Client, a.Hold, a.Start-b.Start),
				Excerpt: append(slices.Clone(a.events), b.events...)})
		}
	}
}
