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

// ReplicationCut breaks the links over which the masters' replicas follow
// them: writes to those masters from here on never reach their replicas.
// The link stays cut until healed; a failover meanwhile promotes a replica
// that has really missed them (DESIGN §6: the master's kernel would
// retransmit what a paused replica had not read).
type ReplicationCut struct{ Masters []int }

// Name says what the fault does and to which masters.
func (f ReplicationCut) Name() string { return "replication-cut(" + nodeList(f.Masters) + ")" }

// Apply cuts every link.
func (f ReplicationCut) Apply(_ context.Context, env *Env) error {
	for _, m := range f.Masters {
		r, err := env.replicationOf(m)
		if err != nil {
			return err
		}
		if err := env.Net.Partition(r.link); err != nil {
			return err
		}
	}
	return nil
}

// Heal reconnects the links (a no-op for a replica promoted meanwhile:
// it no longer replicates).
func (f ReplicationCut) Heal(_ context.Context, env *Env) error {
	for _, m := range f.Masters {
		r, err := env.replicationOf(m)
		if err != nil {
			return err
		}
		if err := env.Net.Reconnect(r.link); err != nil {
			return err
		}
	}
	return nil
}

// Failover fails the masters over at once: each one's replica is made a
// master, the clients' address for the master (its proxy) now leads to the
// replica, as a virtual IP, a managed service or Sentinel would arrange,
// and the master dies. Whatever a replica had not received is gone. A
// failover is not undone: Heal brings each dead master back, empty, as a
// replica of the one that replaced it, as Sentinel does when it returns
// (with durable votes, a node whose master once had a replica votes only
// once its master has one again).
type Failover struct{ Masters []int }

// Name says what the fault does and to which masters.
func (f Failover) Name() string { return "failover(" + nodeList(f.Masters) + ")" }

// Apply fails every master over, in parallel: they fail over together, as
// when one incident takes a zone's masters.
func (f Failover) Apply(ctx context.Context, env *Env) error {
	errs := make([]error, len(f.Masters))
	var wg sync.WaitGroup
	for i, m := range f.Masters {
		wg.Go(func() { errs[i] = failOver(ctx, env, m) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// failOver promotes master m's replica, points m's proxy at it, then kills
// m. The clients reach m only through its proxy, and its replication link
// is cut: once the proxy moved, m is gone for everyone, and the failover
// takes milliseconds even where a kill takes a second (Docker under load),
// so that the challengers meet the promoted replicas well before the
// holder's next extension.
func failOver(ctx context.Context, env *Env, m int) error {
	r, err := env.replicationOf(m)
	if err != nil {
		return err
	}
	master, err := env.node(m)
	if err != nil {
		return err
	}
	replica, err := env.node(r.replica)
	if err != nil {
		return err
	}
	rc := directClient(replica)
	defer rc.Close()
	if err := rc.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		return fmt.Errorf("chaos: promote n%d: %w", r.replica, err)
	}
	if err := env.Net.Retarget(m, replica.Addr()); err != nil {
		return err
	}
	env.Note("replica n%d promoted in n%d's place; clients now reach it", r.replica, m)
	if err := master.Kill(ctx); err != nil {
		return err
	}
	env.Note("master n%d killed", m)
	return nil
}

// Heal restarts each dead master and makes it a replica of its promoted
// replica, in parallel, and waits until each follows. A scenario with a
// failover runs Once: the cluster has no replica left to promote.
func (f Failover) Heal(ctx context.Context, env *Env) error {
	errs := make([]error, len(f.Masters))
	var wg sync.WaitGroup
	for i, m := range f.Masters {
		wg.Go(func() { errs[i] = rejoin(ctx, env, m) })
	}
	wg.Wait()
	return errors.Join(errs...)
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
