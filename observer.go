package redlock

import (
	"context"
	"time"
)

// Observer is told of what happens to locks and nodes, for metrics and
// tracing. Observe is called synchronously on the lock's path: it must be
// quick and must not block.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// EventKind says what an Event is about.
type EventKind int

// The kinds of events.
const (
	EventAcquired      EventKind = iota + 1 // a lock was acquired: Token, Elapsed, Validity
	EventAcquireFailed                      // an attempt failed: Err
	EventExtended                           // a lock was extended: Elapsed, Validity
	EventExtendFailed                       // an extension failed: Err
	EventReleased                           // a lock was released: Err as Release returned it (matching ErrLockLost after an EventLost)
	EventLost                               // a held lock was lost: Err
	EventNodeSitOut                         // a node's vote stopped counting (restart, clock jump or skew): Node, Reason, Err
	EventNodeRestarted                      // a node came back with a new run_id: Node
	EventWaited                             // an Acquire call ended: Elapsed since the call, Token if it got the lock, else Err
	EventGraceWait                          // an Acquire waits for nodes in their restart grace: Wait (the longest it may last), Err (which nodes, why); once per client until that wait ends
	EventUnreachable                        // an Acquire waits while too few nodes can vote (unreachable, or answering errors): Elapsed (for how long so far), Err (the last attempt's); once per call
)

var eventNames = [...]string{
	EventAcquired: "acquired", EventAcquireFailed: "acquire-failed", EventExtended: "extended",
	EventExtendFailed: "extend-failed", EventReleased: "released", EventLost: "lost",
	EventNodeSitOut: "node-sit-out", EventNodeRestarted: "node-restarted", EventWaited: "waited",
	EventGraceWait: "grace-wait", EventUnreachable: "unreachable",
}

// String is the kind's name without the Event prefix ("acquired",
// "lost", ...), for logs and metric labels.
func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "unknown"
}

// Event is one thing that happened. Fields that do not apply are zero.
type Event struct {
	Kind     EventKind
	Name     string        // the lock's name
	Node     string        // the node's address, for node events
	Token    int64         // the lock's fencing token
	Elapsed  time.Duration // how long the operation took
	Validity time.Duration // the validity it gave
	Wait     time.Duration // EventGraceWait: the longest the wait may last
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

// The reasons a node sits out (Event.Reason).
const (
	sitOutClockJump = "clock-jump" // its clock moved against ours by more than the threshold
	sitOutClockSkew = "clock-skew" // its clock disagrees with a quorum of the other nodes'
	sitOutRestart   = "restart"    // it restarted without persistence: it votes again after the restart grace
)

// NodeResult is one node's part in a quorum round.
type NodeResult struct {
	Node    string        // the node's address
	OK      bool          // the node said yes: it holds, extended or deleted our key
	Elapsed time.Duration // from the start of the round to the node's answer
	// Err is why the node did not say yes: a *NodeError (ErrNodeSittingOut,
	// ErrNodeDown, a timeout, ...), or nil when it answered no (the lock is
	// held by another owner here, or our key was no longer there).
	Err error
}
