package chaos

import (
	"context"
	"fmt"
	"time"
)

// Crash kills a node (SIGKILL: nothing flushed); Heal starts it again. It
// comes back with its data only if the cluster persists (AOF, fsync
// always); otherwise empty.
type Crash struct{ Node int }

// Name says what the fault does and to which nodes.
func (f Crash) Name() string { return fmt.Sprintf("crash(n%d)", f.Node) }

// Apply starts the fault.
func (f Crash) Apply(ctx context.Context, env *Env) error {
	return env.onNode(f.Node, func(n Node) error { return n.Kill(ctx) })
}

// Heal ends the fault.
func (f Crash) Heal(ctx context.Context, env *Env) error {
	return env.onNode(f.Node, func(n Node) error { return n.Restart(ctx) })
}

// NodePause freezes a node (SIGSTOP, docker pause) until healed; held
// connections stay open and hang, as with a long GC or VM pause.
type NodePause struct{ Node int }

// Name says what the fault does and to which nodes.
func (f NodePause) Name() string { return fmt.Sprintf("pause(n%d)", f.Node) }

// Apply starts the fault.
func (f NodePause) Apply(ctx context.Context, env *Env) error {
	return env.onNode(f.Node, func(n Node) error { return n.Pause(ctx) })
}

// Heal ends the fault.
func (f NodePause) Heal(ctx context.Context, env *Env) error {
	return env.onNode(f.Node, func(n Node) error { return n.Resume(ctx) })
}

// ClockJump moves a node's wall clock forward By at once: keys on it
// expire early. Heal does not move it back (a clock that jumped stays
// where it is; moving back would be another fault).
type ClockJump struct {
	Node int
	By   time.Duration
}

// Name says what the fault does and to which nodes.
func (f ClockJump) Name() string { return fmt.Sprintf("clock-jump(n%d +%s)", f.Node, f.By) }

// Apply starts the fault.
func (f ClockJump) Apply(ctx context.Context, env *Env) error {
	return env.moveClock(ctx, f.Node, f.By)
}

// Heal ends the fault.
func (f ClockJump) Heal(context.Context, *Env) error { return nil }

// ClockFast runs a node's wall clock Rate times as fast as real time until
// healed, by advancing it every 10ms (libfaketime cannot change its rate
// in a running process without a jump).
type ClockFast struct {
	Node int
	Rate float64
}

// Name says what the fault does and to which nodes.
func (f ClockFast) Name() string { return fmt.Sprintf("clock-fast(n%d x%g)", f.Node, f.Rate) }

const clockFastTick = 10 * time.Millisecond

// Apply starts the fault.
func (f ClockFast) Apply(_ context.Context, env *Env) error {
	if f.Rate <= 1 {
		return fmt.Errorf("chaos: clock rate %g: must be above 1", f.Rate)
	}
	if _, err := env.node(f.Node); err != nil {
		return err
	}
	return env.startBackground(f.Name(), func(ctx context.Context) error {
		tick := time.NewTicker(clockFastTick)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-ctx.Done():
				return nil
			case now := <-tick.C:
				step := time.Duration(float64(now.Sub(last)) * (f.Rate - 1))
				last = now
				if err := env.moveClock(ctx, f.Node, step); err != nil && ctx.Err() == nil {
					return err
				}
			}
		}
	})
}

// Heal ends the fault.
func (f ClockFast) Heal(_ context.Context, env *Env) error { return env.stopBackground(f.Name()) }
