package chaos

import (
	"context"
	"fmt"
	"time"
)

// toxic is the shared body of the faults that are one toxiproxy toxic on
// each of some nodes' proxies.
type toxic struct {
	nodes  Nodes
	kind   string // toxiproxy toxic type
	stream string // "upstream" (client to node), "downstream" or "both"
	attrs  map[string]int64
}

func (t toxic) streams() []string {
	if t.stream == "both" {
		return []string{"upstream", "downstream"}
	}
	return []string{t.stream}
}

func (t toxic) apply(env *Env) error {
	return t.eachStream(func(n int, name, stream string) error {
		return env.Net.AddToxic(n, name, t.kind, stream, t.attrs)
	})
}

func (t toxic) heal(ctx context.Context, env *Env) error {
	return t.eachStream(func(n int, name, _ string) error { return env.Net.RemoveToxic(ctx, n, name) })
}

// eachStream runs step for every node and stream the toxic is on, with
// the toxic's name there, and stops at the first error.
func (t toxic) eachStream(step func(n int, name, stream string) error) error {
	return t.nodes.each(func(n int) error {
		for _, st := range t.streams() {
			if err := step(n, t.kind+"_"+st, st); err != nil {
				return err
			}
		}
		return nil
	})
}

// Latency delays every request to the nodes and every reply from them by
// Delay ± Jitter (each way).
type Latency struct {
	Nodes
	Delay, Jitter time.Duration
}

// Name says what the fault does and to which nodes.
func (f Latency) Name() string {
	return fmt.Sprintf("latency(%s %s±%s)", f.Nodes.list(), f.Delay, f.Jitter)
}
func (f Latency) toxic() toxic { return latencyToxic(f.Nodes, f.Delay, f.Jitter, "both") }

func latencyToxic(nodes []int, delay, jitter time.Duration, stream string) toxic {
	return toxic{nodes, "latency", stream, map[string]int64{"latency": delay.Milliseconds(), "jitter": jitter.Milliseconds()}}
}

// Apply starts the fault.
func (f Latency) Apply(_ context.Context, env *Env) error { return f.toxic().apply(env) }

// Heal ends the fault.
func (f Latency) Heal(ctx context.Context, env *Env) error { return f.toxic().heal(ctx, env) }

// LateRequests delays only the requests to the nodes, by Delay ± Jitter:
// with a delay around the client's node timeout a request the client gave
// up on still reaches the node, possibly after a later request sent on
// another connection (the case a release must not overtake).
type LateRequests struct {
	Nodes
	Delay, Jitter time.Duration
}

// Name says what the fault does and to which nodes.
func (f LateRequests) Name() string {
	return fmt.Sprintf("late-requests(%s %s±%s)", f.Nodes.list(), f.Delay, f.Jitter)
}
func (f LateRequests) toxic() toxic { return latencyToxic(f.Nodes, f.Delay, f.Jitter, "upstream") }

// Apply starts the fault.
func (f LateRequests) Apply(_ context.Context, env *Env) error { return f.toxic().apply(env) }

// Heal ends the fault.
func (f LateRequests) Heal(ctx context.Context, env *Env) error { return f.toxic().heal(ctx, env) }

// Bandwidth caps the nodes' replies at KBps kilobytes per second.
type Bandwidth struct {
	Nodes
	KBps int64
}

// Name says what the fault does and to which nodes.
func (f Bandwidth) Name() string {
	return fmt.Sprintf("bandwidth(%s %dKB/s)", f.Nodes.list(), f.KBps)
}
func (f Bandwidth) toxic() toxic {
	return toxic{f.Nodes, "bandwidth", "downstream", map[string]int64{"rate": f.KBps}}
}

// Apply starts the fault.
func (f Bandwidth) Apply(_ context.Context, env *Env) error { return f.toxic().apply(env) }

// Heal ends the fault.
func (f Bandwidth) Heal(ctx context.Context, env *Env) error { return f.toxic().heal(ctx, env) }

// SlowClose delays the closing of the nodes' connections by Delay.
type SlowClose struct {
	Nodes
	Delay time.Duration
}

// Name says what the fault does and to which nodes.
func (f SlowClose) Name() string { return fmt.Sprintf("slow_close(%s %s)", f.Nodes.list(), f.Delay) }
func (f SlowClose) toxic() toxic {
	return toxic{f.Nodes, "slow_close", "downstream", map[string]int64{"delay": f.Delay.Milliseconds()}}
}

// Apply starts the fault.
func (f SlowClose) Apply(_ context.Context, env *Env) error { return f.toxic().apply(env) }

// Heal ends the fault.
func (f SlowClose) Heal(ctx context.Context, env *Env) error { return f.toxic().heal(ctx, env) }

// ResetPeer resets the nodes' connections (TCP RST) After they open.
type ResetPeer struct {
	Nodes
	After time.Duration
}

// Name says what the fault does and to which nodes.
func (f ResetPeer) Name() string {
	return fmt.Sprintf("reset_peer(%s after %s)", f.Nodes.list(), f.After)
}
func (f ResetPeer) toxic() toxic {
	return toxic{f.Nodes, "reset_peer", "upstream", map[string]int64{"timeout": f.After.Milliseconds()}}
}

// Apply starts the fault.
func (f ResetPeer) Apply(_ context.Context, env *Env) error { return f.toxic().apply(env) }

// Heal ends the fault.
func (f ResetPeer) Heal(ctx context.Context, env *Env) error { return f.toxic().heal(ctx, env) }

// Blackhole lets no request through to the nodes and never closes the
// connection (toxiproxy's "timeout" toxic with no timeout): calls hang
// until the client's own timeout.
type Blackhole struct{ Nodes }

// Name says what the fault does and to which nodes.
func (f Blackhole) Name() string { return fmt.Sprintf("timeout(%s blackhole)", f.Nodes.list()) }
func (f Blackhole) toxic() toxic {
	return toxic{f.Nodes, "timeout", "upstream", map[string]int64{"timeout": 0}}
}

// Apply starts the fault.
func (f Blackhole) Apply(_ context.Context, env *Env) error { return f.toxic().apply(env) }

// Heal ends the fault.
func (f Blackhole) Heal(ctx context.Context, env *Env) error { return f.toxic().heal(ctx, env) }

// LimitData closes each connection to the nodes once Bytes have come back
// through it.
type LimitData struct {
	Nodes
	Bytes int64
}

// Name says what the fault does and to which nodes.
func (f LimitData) Name() string {
	return fmt.Sprintf("limit_data(%s %dB)", f.Nodes.list(), f.Bytes)
}
func (f LimitData) toxic() toxic {
	return toxic{f.Nodes, "limit_data", "downstream", map[string]int64{"bytes": f.Bytes}}
}

// Apply starts the fault.
func (f LimitData) Apply(_ context.Context, env *Env) error { return f.toxic().apply(env) }

// Heal ends the fault.
func (f LimitData) Heal(ctx context.Context, env *Env) error { return f.toxic().heal(ctx, env) }
