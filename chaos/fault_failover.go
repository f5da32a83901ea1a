package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// replication is how a master's replica follows it in a run: the
// replica's node index and the index in Net of the proxy the replica
// replicates through.
type replication struct{ replica, link int }

// replicationOf returns the replication of master m, or an error naming
// the master when the scenario gave it no replica.
func (e *Env) replicationOf(m int) (replication, error) {
	r, ok := e.replicas[m]
	if !ok {
		return replication{}, fmt.Errorf("chaos: n%d has no replica in this scenario", m)
	}
	return r, nil
}

// onLink runs op on the proxy index of the link master m's replica follows
// it through.
func (e *Env) onLink(m int, op func(link int) error) error {
	r, err := e.replicationOf(m)
	if err != nil {
		return err
	}
	return op(r.link)
}

// ReplicationCut breaks the links over which the masters' replicas follow
// them: writes to those masters from here on never reach their replicas.
// The link stays cut until healed; a failover meanwhile promotes a replica
// that has really missed them (DESIGN §6: the master's kernel would
// retransmit what a paused replica had not read).
type ReplicationCut struct{ Masters Nodes }

// Name says what the fault does and to which masters.
func (f ReplicationCut) Name() string { return "replication-cut(" + f.Masters.list() + ")" }

// Apply cuts every link.
func (f ReplicationCut) Apply(_ context.Context, env *Env) error {
	return f.Masters.each(func(m int) error { return env.onLink(m, env.Net.Partition) })
}

// Heal reconnects the links (a no-op for a replica promoted meanwhile:
// it no longer replicates).
func (f ReplicationCut) Heal(_ context.Context, env *Env) error {
	return f.Masters.each(func(m int) error { return env.onLink(m, env.Net.Reconnect) })
}

// Failover fails the masters over at once: each one's replica is made a
// master, the clients' address for the master (its proxy) now leads to the
// replica, as a virtual IP, a managed service or Sentinel would arrange,
// and the master dies. Whatever a replica had not received is gone. A
// failover is not undone: Heal brings each dead master back, empty, as a
// replica of the one that replaced it, as Sentinel does when it returns
// (with durable votes, a node whose master once had a replica votes only
// once its master has one again).
type Failover struct{ Masters Nodes }

// Name says what the fault does and to which masters.
func (f Failover) Name() string { return "failover(" + f.Masters.list() + ")" }

// Apply fails every master over, in parallel: they fail over together, as
// when one incident takes a zone's masters.
func (f Failover) Apply(ctx context.Context, env *Env) error {
	return f.Masters.atOnce(env, func(m int) (string, error) { return "", failOver(ctx, env, m) })
}

// failOver promotes master m's replica, points m's proxy at it, then kills
// m. The clients reach m only through its proxy, and its replication link
// is cut: once the proxy moved, m is gone for everyone, and the failover
// takes milliseconds even where a kill takes a second (Docker under load),
// so that the challengers meet the promoted replicas well before the
// holder's next extension.
func failOver(ctx context.Context, env *Env, m int) error {
	r, master, err := promoteReplica(ctx, env, m)
	if err != nil {
		return err
	}
	if err := env.Net.Retarget(m, r.addr); err != nil {
		return err
	}
	env.Note("replica n%d promoted in n%d's place; clients now reach it", r.replica, m)
	if err := master.Kill(ctx); err != nil {
		return err
	}
	env.Note("master n%d killed", m)
	return nil
}

// promotedReplica is master m's replica once promoted: its index and
// address.
type promotedReplica struct {
	replica int
	addr    string
}

// promoteReplica promotes master m's replica (REPLICAOF NO ONE), the first
// step of a failover and of a fail-back alike, and returns it and m's own
// node.
func promoteReplica(ctx context.Context, env *Env, m int) (promotedReplica, Node, error) {
	r, err := env.replicationOf(m)
	if err != nil {
		return promotedReplica{}, nil, err
	}
	master, err := env.node(m)
	if err != nil {
		return promotedReplica{}, nil, err
	}
	replica, err := env.node(r.replica)
	if err != nil {
		return promotedReplica{}, nil, err
	}
	rc := directClient(replica)
	defer rc.Close()
	if err := rc.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		return promotedReplica{}, nil, fmt.Errorf("chaos: promote n%d: %w", r.replica, err)
	}
	return promotedReplica{r.replica, replica.Addr()}, master, nil
}

// Heal restarts each dead master and makes it a replica of its promoted
// replica, in parallel, and waits until each follows. A scenario with a
// failover runs Once: the cluster has no replica left to promote.
func (f Failover) Heal(ctx context.Context, env *Env) error {
	return f.Masters.atOnce(env, func(m int) (string, error) { return "", rejoin(ctx, env, m) })
}

// rejoin restarts the dead master m as a replica of the replica promoted
// in its place.
func rejoin(ctx context.Context, env *Env, m int) error {
	r, err := env.replicationOf(m)
	if err != nil {
		return err
	}
	old, err := env.node(m)
	if err != nil {
		return err
	}
	if err := old.Restart(ctx); err != nil {
		return err
	}
	if _, err := replicate(ctx, env.Cluster, env.Net, m, r.replica); err != nil {
		return err
	}
	env.Note("n%d back, empty, as a replica of n%d", m, r.replica)
	return nil
}

// FailBack fails each master over to its replica and back, without a
// restart: the replica is promoted, the old master becomes its replica
// and resyncs in full from it (losing every write the replica had not
// received, since it holds writes beyond the offset the replica was
// promoted at), and is then promoted back, the replica following it
// again. The master ends where it began, at the same address and under
// the same run_id, without the writes the replica missed: the fail-back
// of CLUSTER FAILOVER or a Sentinel that prefers the old master. The
// clients' proxy is never moved: whoever reaches the node meanwhile meets
// a replica. Heal does nothing.
type FailBack struct{ Masters Nodes }

// Name says what the fault does and to which masters.
func (f FailBack) Name() string {
	return "fail-back(" + f.Masters.list() + ": replica promoted, old master resynced from it and promoted back)"
}

// Apply fails every master over and back, in parallel.
func (f FailBack) Apply(ctx context.Context, env *Env) error {
	return f.Masters.atOnce(env, func(m int) (string, error) { return "", failBack(ctx, env, m) })
}

// failBack promotes master m's replica, makes m its replica (a full
// resync: m's writes the replica lacked are gone), promotes m again and
// lets the replica follow m over a fresh link. The replica's old link
// (the one ReplicationCut cuts) is left as it is.
func failBack(ctx context.Context, env *Env, m int) error {
	r, master, err := promoteReplica(ctx, env, m)
	if err != nil {
		return err
	}
	mc := directClient(master)
	defer mc.Close()
	if _, err := replicate(ctx, env.Cluster, env.Net, m, r.replica); err != nil {
		return err
	}
	env.Note("replica n%d promoted; n%d resynced from it as its replica", r.replica, m)
	if err := mc.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		return fmt.Errorf("chaos: promote n%d back: %w", m, err)
	}
	if _, err := replicate(ctx, env.Cluster, env.Net, r.replica, m); err != nil {
		return err
	}
	env.Note("n%d promoted back (same address, same run_id); n%d follows it again", m, r.replica)
	return nil
}

// Heal does nothing: the masters are back in their role when Apply returns.
func (FailBack) Heal(context.Context, *Env) error { return nil }

// ReplicaJoin gives each master a replica while the run goes on: the
// spare server beside it (Scenario.SpareReplicas) starts replicating it,
// through a link of its own that ReplicationCut can cut, and Apply
// returns once the replica is in sync. A client that probed the master
// before saw no replica. Heal does nothing: the replica stays.
type ReplicaJoin struct{ Masters Nodes }

// Name says what the fault does and to which masters.
func (f ReplicaJoin) Name() string { return "replica-join(" + f.Masters.list() + ")" }

// Apply starts the replications, in parallel.
func (f ReplicaJoin) Apply(ctx context.Context, env *Env) error {
	if env.spares == 0 {
		return errors.New("chaos: replica-join needs spare servers (Scenario.SpareReplicas)")
	}
	for _, m := range f.Masters {
		if _, joined := env.replicas[m]; joined || m < 0 || m >= env.spares {
			return fmt.Errorf("chaos: replica-join: n%d is not a lock node without a replica", m)
		}
	}
	links := make([]int, len(f.Masters))
	errs := make([]error, len(f.Masters))
	var wg sync.WaitGroup
	for i, m := range f.Masters {
		wg.Go(func() { links[i], errs[i] = replicate(ctx, env.Cluster, env.Net, env.spares+m, m) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if env.replicas == nil {
		env.replicas = map[int]replication{}
	}
	for i, m := range f.Masters {
		env.replicas[m] = replication{replica: env.spares + m, link: links[i]}
		env.Note("n%d joined n%d as its replica, in sync", env.spares+m, m)
	}
	return nil
}

// Heal does nothing: a replica that joined stays.
func (ReplicaJoin) Heal(context.Context, *Env) error { return nil }
