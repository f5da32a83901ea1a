package chaos

import (
	"context"
	"fmt"
	"time"
)

// Partition cuts the nodes off from the clients (their proxies stop).
type Partition struct{ Nodes }

// Name says what the fault does and to which nodes.
func (f Partition) Name() string { return fmt.Sprintf("partition(%s)", f.Nodes.list()) }

// Apply starts the fault.
func (f Partition) Apply(_ context.Context, env *Env) error { return f.each(env.Net.Partition) }

// Heal ends the fault.
func (f Partition) Heal(_ context.Context, env *Env) error { return f.each(env.Net.Reconnect) }

// Flapping partitions the nodes and reconnects them every Period until
// healed.
type Flapping struct {
	Nodes
	Period time.Duration
}

// Name says what the fault does and to which nodes.
func (f Flapping) Name() string {
	return fmt.Sprintf("flapping(%s every %s)", f.Nodes.list(), f.Period)
}

// Apply starts the fault.
func (f Flapping) Apply(_ context.Context, env *Env) error {
	if f.Period <= 0 {
		return fmt.Errorf("chaos: flapping period %s: must be positive", f.Period)
	}
	p := Partition{f.Nodes}
	return env.startBackground(f.Name(), func(ctx context.Context) error {
		tick := time.NewTicker(f.Period)
		defer tick.Stop()
		for down := false; ; down = !down {
			var err error
			if down {
				err = p.Heal(ctx, env)
			} else {
				err = p.Apply(ctx, env)
			}
			if err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return p.Heal(context.Background(), env)
			case <-tick.C:
			}
		}
	})
}

// Heal ends the fault.
func (f Flapping) Heal(_ context.Context, env *Env) error { return env.stopBackground(f.Name()) }
