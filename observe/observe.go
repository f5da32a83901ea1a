// Package observe is what a redlock client tells an Observer: one Event per
// thing that happened to a lock or a node, for metrics, logs and tracing.
// Set redlock.Options.Observer to receive them; the otel package turns them
// into OpenTelemetry metrics and spans.
//
// The events are apart from the lock package because a program that only
// locks never names them, and one that watches names little else.
package observe

import (
	"context"
	"time"
)

// Observer is told of what happens to locks and nodes. Observe is called
// synchronously on the lock's path: it must be quick and must not block.
type Observer interface {
	Observe(Event)
}

// Func adapts a function to Observer.
type Func func(Event)

// Observe calls f(e).
func (f Func) Observe(e Event) { f(e) }

// Kind says what an Event is about.
type Kind int

// The kinds of events.
const (
	Acquired      Kind = iota + 1 // a lock was acquired: Token, Elapsed, Validity
	AcquireFailed                 // an attempt failed: Err
	Extended                      // a lock was extended: Elapsed, Validity
	ExtendFailed                  // an extension failed: Err
	Released                      // a lock was released: Err as Release returned it (matching redlock.ErrLockLost after a Lost)
	Lost                          // a held lock was lost: Err
	NodeSitOut                    // a node's vote stopped counting (restart, clock jump or skew): Node, Reason, Err
	NodeRestarted                 // a node came back with a new run_id: Node
	Waited                        // an Acquire call ended: Elapsed since the call, Token if it got the lock, else Err
	GraceWait                     // an Acquire waits for nodes in their restart grace: Wait (the longest it may last), Err (which nodes, why); once per client until that wait ends
	Unreachable                   // an Acquire waits while too few nodes can vote (unreachable, or answering errors): Elapsed (for how long so far), Err (the last attempt's); once per call
)

var kindNames = [...]string{
	Acquired: "acquired", AcquireFailed: "acquire-failed", Extended: "extended",
	ExtendFailed: "extend-failed", Released: "released", Lost: "lost",
	NodeSitOut: "node-sit-out", NodeRestarted: "node-restarted", Waited: "waited",
	GraceWait: "grace-wait", Unreachable: "unreachable",
}

// String is the kind's name ("acquired", "lost", ...), for logs and metric
// labels; "unknown" for a value that is not one of the kinds.
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Event is one thing that happened. Fields that do not apply are zero.
type Event struct {
	Kind     Kind
	Name     string        // the lock's name
	Node     string        // the node's address, for node events
	Token    int64         // the lock's fencing token
	Elapsed  time.Duration // how long the operation took
	Validity time.Duration // the validity it gave
	Wait     time.Duration // GraceWait: the longest the wait may last
	Err      error

	// Context is the caller's context, for the events of a call (acquire,
	// extend, release, waited), so that a tracer can put the operation in
	// the caller's trace. It is nil for the events no call caused (a loss
	// found by the renewal scheduler, node events).
	Context context.Context
	// Reason says in one fixed word why a node sits out: "clock-jump" (its
	// clock moved against ours by more than the threshold), "clock-skew"
	// (its clock disagrees with a quorum of the other nodes') or "restart"
	// (it restarted without persistence, or had another event that may
	// have lost keys: it votes again after the restart grace). It is meant
	// as a metric label; Err has the details.
	Reason string
	// Nodes are the per-node results of an acquire, extend or release
	// round, in the order they came in, up to the moment the round was
	// decided (a late answer is not waited for). The round started Elapsed
	// before the event.
	Nodes []NodeResult
}

// NodeResult is one node's part in a quorum round.
type NodeResult struct {
	Node    string        // the node's address
	OK      bool          // the node said yes: it holds, extended or deleted our key
	Elapsed time.Duration // from the start of the round to the node's answer
	// Err is why the node did not say yes: a *redlock.NodeError
	// (redlock.ErrNodeSittingOut, redlock.ErrNodeDown, a timeout, ...), or
	// nil when it answered no (the lock is held by another owner here, or
	// our key was no longer there).
	Err error
}
