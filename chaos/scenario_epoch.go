package chaos

import (
	"time"

	"github.com/quorumlabs/redlock"
)

// epochScenarios are the events that may make a node forget a lock it
// granted without a restart of its own (DESIGN §7, issue 25): a promotion
// on persistent servers, a fail-back to the old master under the same
// run_id, an eviction, and a replica that joins a master during a durable
// hold. Each safe scenario has an unsafe-by-design twin, the same schedule
// with the guard's sit-out (or durable votes) taken away, which the checker
// must catch: it shows that the fault really makes the nodes forget.
func epochScenarios() []Scenario {
	rl := RedlockScheme{}
	safe := Expect{Verdict: VerdictSafe}
	byDesign := Expect{Verdict: VerdictUnsafeByDesign}
	majority := []int{0, 1, 2}
	noGrace := redlock.NoRestartGrace

	// A majority fails over during a hold through Do on persistent
	// servers (the schedule of failover-majority-not-durable). The
	// promoted replicas are new epochs: persistence covers a server's
	// own restart, not the writes a replica never received.
	persistent := func(name, about string, grace time.Duration, x Expect) Scenario {
		return Scenario{Name: name, About: about, Scheme: rl, Expect: x, TTL: failoverTTL, UseDo: true,
			Replicas: true, Persistence: true, AllowFailoverNodes: true, RestartGrace: grace, Once: true,
			Schedule: failoverDuring(majority, nil)}
	}

	// The fail-back: the replicas never get the lock (their links are
	// cut before the hold); while the holder holds, the clients are cut
	// off from a majority, whose masters fail over and back, resynced
	// from the replicas and so without the lock. The clients met those
	// masters before, and meet them again at the same address and under
	// the same run_id, having never seen the replicas as masters.
	const failBackTTL = 6 * time.Second
	failBack := func(name, about string, grace time.Duration, x Expect) Scenario {
		cut, away, fb := ReplicationCut{majority}, Partition{majority}, FailBack{majority}
		return Scenario{Name: name, About: about, Scheme: rl, Expect: x, TTL: failBackTTL, Clients: 2,
			Replicas: true, AllowFailoverNodes: true, RestartGrace: grace, Once: true,
			Schedule: []Step{Quiesce(), Apply(cut), Resume(), AwaitHold(AnyClient), HoldBack(), Apply(away), Apply(fb), Heal(fb),
				Heal(away), Resume(), Contend(1500 * time.Millisecond), Unpin(), Heal(cut)}}
	}

	// A durable hold through Do is taken on masters without replicas (the
	// clients learn that no acknowledgement is needed); then a replica
	// joins a majority of them and syncs, its link is cut, and once the
	// replicas' copy of the key has expired those masters fail over to
	// them (the schedule of failover-majority-durable from there on).
	//
	// The holder's next extension is awaited while the replicas are
	// connected, before the cut: its durable write then meets them listed
	// (PROTOCOL §13's rule counts the replicas a write meets, the most
	// seen). A replica that joins and is cut off before any write of the
	// client meets it listed is outside the rule's proof (PROTOCOL §13,
	// "where it is not certain" (h)): with no restart grace its promotion
	// can lose the extensions counted meanwhile. Without this step the
	// cut landed in the same millisecond as the join, and the run was
	// safe or not by the order of the two (2 of 4 runs unsafe).
	joins := func(name, about string, durable bool, x Expect) Scenario {
		steps := append([]Step{AwaitHold(AnyClient), Apply(ReplicaJoin{majority}), AwaitExtension()}, failoverDuring(majority, nil)[1:]...)
		return Scenario{Name: name, About: about, Scheme: rl, Expect: x, TTL: failoverTTL, UseDo: true,
			SpareReplicas: true, AllowFailoverNodes: !durable, DurableVotes: durable, RestartGrace: noGrace, Once: true,
			Schedule: append(steps, Heal(ReplicaJoin{majority}))}
	}

	return []Scenario{
		persistent("failover-persistent",
			"every node a master with an async replica, all persistent (AOF, fsync always); during a hold through Do three masters' replication is cut and they fail over to replicas that missed the holder's extensions; votes not durable, grace on: the promoted masters sit out",
			0, safe),
		persistent("failover-persistent-no-grace",
			"as failover-persistent, restart grace off: the promoted masters vote at once, a challenger takes the lock while the holder's extension still runs",
			noGrace, byDesign),
		failBack("failback",
			"every node a master with an async replica, replication cut; during a hold, three masters fail over and back (resynced from their replicas, so without the lock) while the clients are cut off from them; they come back at the same address and run_id and sit out the grace",
			0, safe),
		failBack("failback-no-grace",
			"as failback, restart grace off: the masters that failed back vote at once, two holders",
			noGrace, byDesign),
		joins("durable-replica-joins",
			"durable votes; a hold through Do taken on masters without replicas; a replica joins three of them, its link is cut and they fail over to it; votes count only once every replica the master lists now acknowledged them, so the holder's extensions after the cut fail",
			true, safe),
		joins("replica-joins-not-durable",
			"as durable-replica-joins, votes not durable, no grace: the promoted replicas lack the holder's extensions and let a challenger in",
			false, byDesign),
	}
}

// evictScenarios: a majority of nodes becomes a cache that evicts, during
// a hold taken on exactly those nodes (n3 and n4 cut off), and the lock's
// key is evicted on each; then the challenger, parked meanwhile, goes for
// all five. It comes back more than a second after the eviction: a guard
// older than that is probed again before its next vote, the window in
// which an eviction can go unseen.
func evictScenarios() []Scenario {
	rl := RedlockScheme{}
	const ttl = 5 * time.Second
	quorumOfThree := Partition{[]int{3, 4}}
	f := Evict{[]int{0, 1, 2}, "allkeys-lru", ttl}
	evict := func(name, about string, allow bool, grace time.Duration, x Expect) Scenario {
		return Scenario{Name: name, About: about, Scheme: rl, Expect: x, TTL: ttl, Clients: 2,
			AllowEvictingNodes: allow, RestartGrace: grace,
			Schedule: []Step{Quiesce(), Apply(quorumOfThree), Resume(), AwaitHold(AnyClient), HoldBack(), Apply(f),
				Wait(1200 * time.Millisecond), Heal(quorumOfThree), Resume(), Contend(1500 * time.Millisecond), Unpin(), Heal(f)}}
	}
	return []Scenario{
		evict("evict-refused",
			"during a hold, three nodes are set to maxmemory 8mb, allkeys-lru at run time and a cache fills them until the lock's key is evicted; by default the clients refuse nodes that may evict",
			false, 0, Expect{Verdict: VerdictSafe}),
		evict("evict-allowed",
			"as evict-refused, with AllowEvictingNodes: a node whose evicted_keys rose sits out the grace",
			true, ttl, Expect{Verdict: VerdictSafe}), // AllowEvictingNodes needs the grace declared
		evict("evict-allowed-no-grace",
			"as evict-allowed, restart grace off: the nodes that evicted the lock vote at once, two holders",
			true, redlock.NoRestartGrace, Expect{Verdict: VerdictUnsafeByDesign}),
	}
}
