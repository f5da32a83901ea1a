package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlabs/redlock"
)

// Faults on the TTL register of Cluster lock nodes (issue 25, schedule 4).
// The register of the largest TTL in use (the library's ttlregister.go)
// is one key on every node; on a Cluster node it lives on the master of
// its own slot, which may be another master than the lock's. A vote that
// relies on a raise of it is only as durable as that raise.

// ttlRegisterKey is the library's register of the largest TTL in use on
// every node, under the default key prefix ("<prefix>ttl-in-use",
// redlock's ttlregister.go; the prefix is the one the workload's clients
// use).
const ttlRegisterKey = redlock.DefaultKeyPrefix + "ttl-in-use"

// RegisterReplicationCut cuts, in each of the Cluster nodes Nodes, the
// link of the replica of the master that serves the TTL register's slot:
// raises of the register from then on never reach that replica. Heal
// mends the links (after a failover to the replica, its old master
// resyncs from it).
type RegisterReplicationCut struct{ Nodes }

// Name says what the fault does and to which nodes.
func (f RegisterReplicationCut) Name() string {
	return fmt.Sprintf("register-replication-cut(%s: the TTL register's master and its replica)", f.Nodes.list())
}

// Apply cuts the links.
func (f RegisterReplicationCut) Apply(ctx context.Context, env *Env) error {
	return env.onClusterNodes(f.Nodes, func(n ClusterNode) (string, error) {
		addr, err := n.CutReplicaOf(ctx, ttlRegisterKey)
		return "the link of " + addr + ", replica of the TTL register's master, cut", err
	})
}

// Heal mends the links.
func (f RegisterReplicationCut) Heal(ctx context.Context, env *Env) error {
	return env.onClusterNodes(f.Nodes, func(n ClusterNode) (string, error) {
		return "replication links mended", n.RestoreReplicas(ctx)
	})
}

// RegisterFailover promotes, in each of the Cluster nodes Nodes, the
// replica of the master that serves the TTL register's slot (CLUSTER
// FAILOVER TAKEOVER): the register is then what the replica had. The
// lock's own slot keeps its master. Heal does nothing: the promoted
// replica stays master.
type RegisterFailover struct{ Nodes }

// Name says what the fault does and to which nodes.
func (f RegisterFailover) Name() string {
	return fmt.Sprintf("register-failover(%s: the TTL register's master, TAKEOVER)", f.Nodes.list())
}

// Apply fails the masters over.
func (f RegisterFailover) Apply(ctx context.Context, env *Env) error {
	return env.onClusterNodes(f.Nodes, func(n ClusterNode) (string, error) {
		from, to, err := n.FailoverMasterOf(ctx, ttlRegisterKey)
		return fmt.Sprintf("the TTL register's slot failed over from %s to its replica %s", from, to), err
	})
}

// Heal does nothing: the promoted replica stays master.
func (RegisterFailover) Heal(context.Context, *Env) error { return nil }

// ClusterDown takes each of the Cluster nodes Nodes down as a whole: every
// server hangs (SIGSTOP, docker pause; the clients' calls time out), and
// Heal kills them all and starts them again, empty (no persistence) but
// with their nodes.conf, waiting until their cluster serves every slot. A
// node taken down and healed at once is a node that restarted empty, its
// register of the largest TTL in use included. Hung rather than killed,
// the servers keep their ports while down: killed, they would free them
// for seconds, and a backend running beside (the long split runs both side
// by side; Docker's Cluster nodes are on the host's network) could take
// one, refusing the restart.
type ClusterDown struct{ Nodes }

// Name says what the fault does and to which nodes.
func (f ClusterDown) Name() string {
	return fmt.Sprintf("cluster-down(%s: every server hangs; heal restarts them empty)", f.Nodes.list())
}

// Apply freezes the servers.
func (f ClusterDown) Apply(ctx context.Context, env *Env) error {
	return env.onClusterNodes(f.Nodes, func(n ClusterNode) (string, error) {
		return "every server frozen", n.Freeze(ctx)
	})
}

// Heal kills them and starts them again.
func (f ClusterDown) Heal(ctx context.Context, env *Env) error {
	return env.onClusterNodes(f.Nodes, func(n ClusterNode) (string, error) {
		return "every server killed and started again, empty, keeping nodes.conf", n.Revive(ctx)
	})
}

// registerFailoverScenarios play issue 25's schedule 4 on three Cluster
// nodes of three masters with a replica each (the lock's slot and the TTL
// register's are on different masters):
//
//   - n0 ("C"): the link of the replica of the register's master is cut;
//   - n2 ("P3") is down (every server hangs);
//   - the holder, c0 (12s locks), starts now, as a new process, and takes
//     the lock on n0 and n1: on n0 its first raise of the register to 12s
//     never reaches the cut replica (its own grace is off, as in the root
//     test: the servers were just started, and the grace that matters is
//     the challenger's);
//   - the other client (c1, 1s locks) is parked while n0's register
//     master fails over to that replica (which holds the 1s of c1's
//     earlier raises), n1 ("P2") restarts empty, and n2 comes back empty;
//   - c1 starts again as a new process, reads the registers (1s
//     everywhere), lets n1 and n2 vote 1s after their start, and has 2s
//     while c0 still holds.
//
// With durable votes the raise waits for the register master's replica
// too, so c0's vote on n0 does not count while the link is cut: it takes
// no lock before the failover, and c1 takes nothing from it. Without them
// (AllowFailoverNodes), c0's vote rests on the lost raise: two holders.
func registerFailoverScenarios() []Scenario {
	const holderTTL = 12 * time.Second
	cut, away, restart := RegisterReplicationCut{[]int{0}}, ClusterDown{[]int{2}}, ClusterDown{[]int{1}}
	scenario := func(name, about string, durable bool, x Expect) Scenario {
		return Scenario{Name: name, About: about, Scheme: RedlockScheme{}, Expect: x,
			Nodes: 3, Clients: 2, TTL: time.Second, ClientTTL: map[int]time.Duration{0: holderTTL}, Late: []int{0},
			ClientGrace:    map[int]time.Duration{0: redlock.NoRestartGrace},
			ClusterMasters: 3, ClusterReplicas: 1, DurableVotes: durable, AllowFailoverNodes: !durable, Once: true,
			Schedule: []Step{Apply(cut), Apply(away), Fresh(0), TryAwaitHold(0, 4*time.Second), HoldBack(),
				Apply(RegisterFailover{[]int{0}}), Apply(restart), Heal(restart), Heal(away),
				Fresh(1), Resume(), Wait(2 * time.Second), Unpin(), Heal(RegisterFailover{[]int{0}}), Heal(cut)}}
	}
	return []Scenario{
		scenario("cluster-register-failover-durable",
			"three Cluster nodes of three masters with a replica each, durable votes: n0's TTL-register master loses its replica's link and n2 is down when a new holder (12s locks) goes for n0 and n1; then n0's register master fails over, n1 restarts empty, n2 comes back empty, and a new client with 1s locks goes for n1 and n2; the holder's register raise waits for the cut replica, so its vote on n0 does not count",
			true, Expect{Verdict: VerdictSafe}),
		scenario("cluster-register-failover-not-durable",
			"as cluster-register-failover-durable, votes not durable (AllowFailoverNodes): the holder's vote on n0 rests on a register raise the promoted replica lacks; the new client reads 1s everywhere and takes n1 and n2 while the holder holds",
			false, Expect{Verdict: VerdictUnsafeByDesign}),
	}
}
