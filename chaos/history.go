// Package chaos runs the redlock library, and the naive lock schemes it
// replaces, under injected faults (network toxics and partitions through an
// in-process toxiproxy, crashes, pauses and clock jumps of the Redis nodes,
// stalls of the lock holder) and judges the recorded history with a checker
// that is separate from the workload.
//
// The parts, one file each: a Backend starts the Redis nodes (local
// processes or testcontainers-go containers), the Net puts one toxiproxy
// proxy in front of each node, Faults are named values that can be applied
// and healed, the workload makes K clients contend for one lock and records
// every step in a History, Check judges that history, and a Scenario ties
// faults, schedule and expected verdict together.
package chaos

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// EventKind says what an Event records.
type EventKind int

// The kinds of events in a history. Client events carry the client number
// and the hold number of the acquisition they belong to; nemesis events
// (faults) and final-state events carry Client == NoClient.
const (
	// AcquireInvoke: a client starts asking for the lock.
	AcquireInvoke EventKind = iota + 1
	// AcquireOK: the client holds the lock; Token and Deadline are set.
	AcquireOK
	// AcquireFail: the attempt gave up (Err says why).
	AcquireFail
	// ValidityObserved: the holder read its validity deadline again (it
	// moves when the lock is extended); Deadline is set.
	ValidityObserved
	// Abandoned: the holder found too little validity left to act and did
	// not write.
	Abandoned
	// ClientStall: the holder stalled (an injected client pause) for
	// Duration, as a long GC pause would stall it.
	ClientStall
	// FencedWriteInvoke: the holder sends a fenced write with Token.
	FencedWriteInvoke
	// FencedWriteOK: the fenced resource accepted the write.
	FencedWriteOK
	// FencedWriteStale: the fenced resource rejected the write's token as
	// lower than one it had seen.
	FencedWriteStale
	// FencedWriteFail: the write failed for another reason (Err).
	FencedWriteFail
	// RegisterInvoke: the holder starts a read-modify-write of the
	// unfenced register.
	RegisterInvoke
	// RegisterOK: the holder read Value-1 and wrote Value.
	RegisterOK
	// RegisterFail: the read or the write failed (Err).
	RegisterFail
	// ReleaseInvoke: the holder starts releasing; it no longer acts as the
	// holder from here on.
	ReleaseInvoke
	// ReleaseOK: the release succeeded.
	ReleaseOK
	// ReleaseFail: the release reported an error (Err), e.g. the lock had
	// already expired.
	ReleaseFail
	// FaultApply: the nemesis applied the fault named Fault.
	FaultApply
	// FaultHeal: the nemesis healed the fault named Fault.
	FaultHeal
	// NemesisNote: a step of the nemesis worth seeing on the timeline
	// (Detail says what), e.g. "node 2 restarted".
	NemesisNote
	// RegisterFinal: the unfenced register read after the run (Value).
	RegisterFinal
	// KeyScan: after the run, the lock key on Node was found present
	// (Detail holds owner and PTTL) or absent (Detail empty); Err is set
	// when the node could not be read.
	KeyScan
)

var eventKindNames = map[EventKind]string{
	AcquireInvoke: "acquire-invoke", AcquireOK: "acquire-ok", AcquireFail: "acquire-fail",
	ValidityObserved: "validity", Abandoned: "abandoned", ClientStall: "client-stall",
	FencedWriteInvoke: "fenced-invoke", FencedWriteOK: "fenced-ok", FencedWriteStale: "fenced-stale",
	FencedWriteFail: "fenced-fail", RegisterInvoke: "register-invoke", RegisterOK: "register-ok",
	RegisterFail: "register-fail", ReleaseInvoke: "release-invoke", ReleaseOK: "release-ok",
	ReleaseFail: "release-fail", FaultApply: "fault-apply", FaultHeal: "fault-heal",
	NemesisNote: "nemesis", RegisterFinal: "register-final", KeyScan: "key-scan",
}

// String names the kind the way the report and the logs print it.
func (k EventKind) String() string {
	if s, ok := eventKindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// NoClient is the Client of events that do not come from a workload client.
const NoClient = -1

// Event is one line of a history. At and Deadline are offsets from the
// start of the run on the process's monotonic clock, so events of different
// goroutines compare directly.
type Event struct {
	At       time.Duration
	Kind     EventKind
	Client   int           // workload client number, or NoClient
	Hold     int           // acquisition number, unique in the run; 0 if none
	Token    int64         // fencing token (AcquireOK, fenced writes)
	Slot     int           // the semaphore slot whose token it is (AcquireOK); 0 for a lock
	Deadline time.Duration // end of validity (AcquireOK, ValidityObserved)
	Duration time.Duration // ClientStall length
	Value    int64         // register value written (RegisterOK) or read (RegisterFinal)
	Fault    string        // fault name (FaultApply, FaultHeal)
	Node     string        // node name (KeyScan)
	Detail   string
	Err      string
}

// String is a compact one-line form for logs and violation excerpts.
func (e Event) String() string {
	s := fmt.Sprintf("%9.3fs %-15s", e.At.Seconds(), e.Kind)
	if e.Client != NoClient {
		s += fmt.Sprintf(" c%d h%d", e.Client, e.Hold)
	}
	if e.Token != 0 {
		s += fmt.Sprintf(" token=%d", e.Token)
	}
	if e.Deadline != 0 {
		s += fmt.Sprintf(" valid-until=%.3fs", e.Deadline.Seconds())
	}
	if e.Duration != 0 {
		s += fmt.Sprintf(" for=%s", e.Duration)
	}
	if e.Kind == RegisterOK || e.Kind == RegisterFinal {
		s += fmt.Sprintf(" value=%d", e.Value)
	}
	if e.Fault != "" {
		s += " fault=" + e.Fault
	}
	if e.Node != "" {
		s += " node=" + e.Node
	}
	if e.Detail != "" {
		s += " " + e.Detail
	}
	if e.Err != "" {
		s += " err=" + e.Err
	}
	return s
}

// History is the ordered record of one run.
type History []Event

// Recorder collects a history from many goroutines against one monotonic
// clock: the start instant of the run. Its zero value is not usable; make
// one with NewRecorder.
type Recorder struct {
	start time.Time

	mu      sync.Mutex
	events  History
	holds   int
	changed chan struct{} // closed and replaced on every Record
}

// NewRecorder starts the run's clock now.
func NewRecorder() *Recorder {
	return &Recorder{start: time.Now(), changed: make(chan struct{})}
}

// Since converts an instant read from the process's clock (it must carry
// a monotonic reading, as time.Now() does) into the run's time base.
func (r *Recorder) Since(t time.Time) time.Duration { return t.Sub(r.start) }

// Now is the current offset from the start of the run.
func (r *Recorder) Now() time.Duration { return time.Since(r.start) }

// NewHold hands out the next acquisition number (1, 2, ...).
func (r *Recorder) NewHold() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holds++
	return r.holds
}

// Record stamps e with the current time (unless At is already set) and
// appends it. The stamp is taken under the lock so that the history is in
// time order.
func (r *Recorder) Record(e Event) Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.At == 0 {
		e.At = time.Since(r.start)
	}
	r.events = append(r.events, e)
	close(r.changed)
	r.changed = make(chan struct{})
	return e
}

// WaitFor blocks until an event recorded at or after from matches, and
// returns it; it gives up when ctx ends.
func (r *Recorder) WaitFor(ctx context.Context, from time.Duration, match func(Event) bool) (Event, error) {
	seen := 0
	for {
		r.mu.Lock()
		for ; seen < len(r.events); seen++ {
			if e := r.events[seen]; e.At >= from && match(e) {
				r.mu.Unlock()
				return e, nil
			}
		}
		changed := r.changed
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return Event{}, ctx.Err()
		case <-changed:
		}
	}
}

// History returns a copy of what was recorded so far, sorted by time.
func (r *Recorder) History() History {
	r.mu.Lock()
	h := slices.Clone(r.events)
	r.mu.Unlock()
	slices.SortStableFunc(h, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	return h
}
