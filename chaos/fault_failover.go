package chaos

import (
	"context"
	"fmt"
)

// ReplicationCut breaks the link over which the replica follows its
// master: writes to the master from here on never reach the replica.
type ReplicationCut struct{}

func (ReplicationCut) Name() string { return "replication-cut" }

func (ReplicationCut) Apply(_ context.Context, env *Env) error {
	if env.ReplLink < 0 {
		return fmt.Errorf("chaos: replication-cut needs a scenario with a replica")
	}
	return env.Net.Partition(env.ReplLink)
}

// Heal reconnects the link (a no-op for a replica promoted meanwhile).
func (ReplicationCut) Heal(_ context.Context, env *Env) error { return env.Net.Reconnect(env.ReplLink) }

// Promote is the failover: the master dies, the replica is made a master
// and the clients' address for the master (its proxy) now leads to the
// replica, as a virtual IP or Sentinel would arrange. Whatever the replica
// had not received is gone. A failover is not undone: Heal does nothing.
type Promote struct{ Master, Replica int }

// Name says what the fault does and to which nodes.
func (f Promote) Name() string { return fmt.Sprintf("failover(n%d -> n%d)", f.Master, f.Replica) }

// Apply starts the fault.
func (f Promote) Apply(ctx context.Context, env *Env) error {
	master, err := env.node(f.Master)
	if err != nil {
		return err
	}
	replica, err := env.node(f.Replica)
	if err != nil {
		return err
	}
	if err := master.Kill(ctx); err != nil {
		return err
	}
	env.Note("master n%d killed", f.Master)
	rc := directClient(replica)
	defer rc.Close()
	if err := rc.SlaveOf(ctx, "NO", "ONE").Err(); err != nil {
		return fmt.Errorf("chaos: promote n%d: %w", f.Replica, err)
	}
	if err := env.Net.Retarget(f.Master, replica.Addr()); err != nil {
		return err
	}
	env.Note("replica n%d promoted; clients now reach it", f.Replica)
	return nil
}

func (Promote) Heal(context.Context, *Env) error { return nil }
