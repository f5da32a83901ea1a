package chaos

import (
	"context"
	"fmt"
	"time"
)

// ClientPause stalls a workload client while it holds the lock, for Stall,
// between checking its validity and writing: what a long GC pause does.
// Armed until healed; each hold of the client in that time stalls once.
type ClientPause struct {
	Client int
	Stall  time.Duration
}

// Name says what the fault does and to which nodes.
func (f ClientPause) Name() string { return fmt.Sprintf("client-pause(c%d %s)", f.Client, f.Stall) }

// Apply starts the fault.
func (f ClientPause) Apply(_ context.Context, env *Env) error {
	env.clients.armStall(f.Client, f.Stall)
	return nil
}

// Heal ends the fault.
func (f ClientPause) Heal(_ context.Context, env *Env) error {
	env.clients.disarmStall(f.Client)
	return nil
}
