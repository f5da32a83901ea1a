package redlock

import "time"

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
	EventReleased                           // a lock was released: Err if it had been lost
	EventLost                               // a held lock was lost: Err
	EventNodeSitOut                         // a node's vote stopped counting (clock jump): Node, Err
	EventNodeRestarted                      // a node came back with a new run_id: Node
)

var eventNames = [...]string{
	EventAcquired: "acquired", EventAcquireFailed: "acquire-failed", EventExtended: "extended",
	EventExtendFailed: "extend-failed", EventReleased: "released", EventLost: "lost",
	EventNodeSitOut: "node-sit-out", EventNodeRestarted: "node-restarted",
}

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
	Err      error
}
