package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Check names one of the properties the checker judges.
type Check string

// The checks. Lost updates of the unfenced register (d) are counted, not
// judged: they show what fencing buys, and the register has no fence.
const (
	CheckMutualExclusion Check = "a:mutual-exclusion" // no two clients act as holder at once (a semaphore: no more than its permits)
	CheckTokenOrder      Check = "b:token-order"      // tokens strictly increase in acquisition order (a semaphore: per slot)
	CheckFenceOrder      Check = "c:fence-order"      // the fenced resource never accepted a lower token after a higher one
	CheckLeftoverKey     Check = "e:leftover-key"     // no lock key left on any node after the run
	CheckLiveness        Check = "f:liveness"         // acquisitions resume after faults heal
	CheckFairOrder       Check = "g:fair-order"       // fair lock: waiters served in the order they began (fair.go)
)

// AllChecks lists the judged checks in report order.
var AllChecks = []Check{CheckMutualExclusion, CheckTokenOrder, CheckFenceOrder, CheckLeftoverKey, CheckLiveness, CheckFairOrder}

// Violation is one breach of a check, with the events that show it.
type Violation struct {
	Check   Check
	At      time.Duration
	Detail  string
	Excerpt []Event
}

// CheckOptions tune the judgement.
type CheckOptions struct {
	// RecoveryBound is how soon after the last active fault heals an
	// acquisition must succeed (f). Zero skips the liveness check.
	RecoveryBound time.Duration
	// MaxKept bounds the violations kept per check (all are counted);
	// zero keeps 20.
	MaxKept int
	// Permits is how many holders may act at once: a semaphore's K. Zero
	// or one judges a lock. With K > 1, tokens and fenced writes are
	// judged per slot (Event.Slot): K holders hold K different tokens at
	// once, and the resource keeps one fence per slot.
	Permits int
	// FairOrder, if not zero, judges the order of the grants (g) with
	// this margin (see checkFairOrder): for the fair lock only.
	FairOrder time.Duration
}

// HoldSpan is one successful acquisition as the checker sees it.
type HoldSpan struct {
	Client, Hold int
	Token        int64
	Slot         int           // the semaphore slot of Token
	Start        time.Duration // acquire returned
	ValidUntil   time.Duration // latest validity deadline the holder knew of
	Stop         time.Duration // release started (or the hold's last event)
	// End is when the client stopped acting as the holder: the earlier of
	// ValidUntil and Stop, pushed later by any action it started after its
	// validity had passed (a stalled holder that wakes up and writes).
	End      time.Duration
	Stalled  bool // an action started after ValidUntil
	Conflict bool // overlaps another client's hold (check a)
	// Shared is a reader of a read-write lock: readers may overlap each
	// other, never a writer, and their Token is the fence value they saw,
	// not a token of their own (check b skips them).
	Shared bool
	events []Event
}

// Result is the checker's judgement of one history, with the figures the
// report prints.
type Result struct {
	Violations []Violation
	Counts     map[Check]int // violations per check, all of them

	Attempts, Acquisitions, AcquireFailures int
	FencedAccepted, StaleRejected           int
	RegisterWrites                          int
	RegisterFinal                           int64
	// LostUpdates is RegisterWrites - RegisterFinal: read-modify-writes of
	// the unfenced register that another holder overwrote. -1 if the
	// final value was not recorded.
	LostUpdates            int
	ClientStalls           int
	AcquireP50, AcquireP99 time.Duration
	// Recovery is the longest time from a moment when every fault was
	// healed to the next successful acquisition; RecoveryMeasured is false
	// when the history has no such moment.
	Recovery         time.Duration
	RecoveryMeasured bool

	Holds  []HoldSpan
	Faults []FaultWindow
	End    time.Duration // time of the last event
}

// FaultWindow is the time a fault was active.
type FaultWindow struct {
	Fault       string
	Apply       time.Duration
	Heal        time.Duration // equals the run's end if never healed
	HealedInRun bool
}

// Total returns the number of violations over all checks.
func (r Result) Total() int {
	n := 0
	for _, c := range r.Counts {
		n += c
	}
	return n
}

// CheckHistory judges a history. It reads nothing but the history: the workload
// never judges itself.
func CheckHistory(h History, opts CheckOptions) Result {
	if opts.MaxKept <= 0 {
		opts.MaxKept = 20
	}
	h = slices.Clone(h)
	slices.SortStableFunc(h, func(a, b Event) int { return cmp.Compare(a.At, b.At) })

	r := Result{Counts: map[Check]int{}, LostUpdates: -1}
	add := func(v Violation) {
		r.Counts[v.Check]++
		if r.Counts[v.Check] <= opts.MaxKept {
			r.Violations = append(r.Violations, v)
		}
	}
	if len(h) > 0 {
		r.End = h[len(h)-1].At
	}

	r.Holds = buildHolds(h)
	countEvents(h, &r)
	if opts.Permits > 1 {
		checkPermits(r.Holds, opts.Permits, add)
		for _, spans := range holdsBySlot(r.Holds) {
			checkTokenOrder(spans, add)
		}
		for _, writes := range writesBySlot(h, r.Holds) {
			checkFenceOrder(writes, add)
		}
	} else {
		checkMutualExclusion(r.Holds, add)
		checkTokenOrder(r.Holds, add)
		checkFenceOrder(h, add)
	}
	checkLeftoverKeys(h, add)
	r.Faults = faultWindows(h, r.End)
	checkLiveness(h, opts.RecoveryBound, &r, add)
	if opts.FairOrder > 0 {
		checkFairOrder(h, r.Holds, r.Faults, opts.FairOrder, add)
	}
	slices.SortStableFunc(r.Violations, func(a, b Violation) int { return cmp.Compare(a.At, b.At) })
	return r
}

// buildHolds turns the client events of each successful acquisition into
// a span, sorted by start.
func buildHolds(h History) []HoldSpan {
	type acc struct {
		span    HoldSpan
		ok      bool
		stopped bool
		last    time.Duration
		actions map[EventKind][]holdAction // keyed by the invoke kind
	}
	byHold := map[int]*acc{}
	var order []int
	for _, e := range h {
		if e.Client == NoClient || e.Hold == 0 {
			continue
		}
		a := byHold[e.Hold]
		if a == nil {
			a = &acc{span: HoldSpan{Client: e.Client, Hold: e.Hold}, actions: map[EventKind][]holdAction{}}
			byHold[e.Hold] = a
			order = append(order, e.Hold)
		}
		a.last = e.At
		a.span.events = append(a.span.events, e)
		switch e.Kind {
		case AcquireOK:
			a.ok = true
			a.span.Token = e.Token
			a.span.Slot = e.Slot
			a.span.Start = e.At
			a.span.Shared = e.Detail == SharedHold
			a.span.ValidUntil = e.Deadline
		case ValidityObserved:
			a.span.ValidUntil = max(a.span.ValidUntil, e.Deadline)
		case FencedWriteInvoke, RegisterInvoke:
			a.actions[e.Kind] = append(a.actions[e.Kind], holdAction{invoke: e.At, done: -1})
		case FencedWriteOK, FencedWriteStale, FencedWriteFail:
			closeAction(a.actions[FencedWriteInvoke], e.At)
		case RegisterOK, RegisterFail:
			closeAction(a.actions[RegisterInvoke], e.At)
		case ReleaseInvoke:
			if !a.stopped {
				a.stopped = true
				a.span.Stop = e.At
			}
		}
	}
	var spans []HoldSpan
	for _, id := range order {
		a := byHold[id]
		if !a.ok {
			continue
		}
		s := a.span
		if !a.stopped {
			s.Stop = a.last
		}
		s.End = min(s.ValidUntil, s.Stop)
		for _, list := range a.actions {
			for _, act := range list {
				if act.invoke <= s.ValidUntil {
					continue
				}
				s.Stalled = true
				end := act.done
				if end < 0 {
					end = act.invoke
				}
				s.End = max(s.End, end)
			}
		}
		spans = append(spans, s)
	}
	slices.SortStableFunc(spans, func(a, b HoldSpan) int { return cmp.Compare(a.Start, b.Start) })
	return spans
}

// holdAction is one write a holder started: its invoke and completion
// times (done < 0 while it has not completed).
type holdAction struct{ invoke, done time.Duration }

// closeAction marks the oldest open action of a list done at t.
func closeAction(list []holdAction, t time.Duration) {
	for i := range list {
		if list[i].done < 0 {
			list[i].done = t
			return
		}
	}
}

func countEvents(h History, r *Result) {
	invoked := map[int]time.Duration{}
	var lat []time.Duration
	final := false
	for _, e := range h {
		switch e.Kind {
		case AcquireInvoke:
			r.Attempts++
			invoked[e.Hold] = e.At
		case AcquireOK:
			r.Acquisitions++
			if t, ok := invoked[e.Hold]; ok {
				lat = append(lat, e.At-t)
			}
		case AcquireFail:
			r.AcquireFailures++
		case FencedWriteOK:
			r.FencedAccepted++
		case FencedWriteStale:
			r.StaleRejected++
		case RegisterOK:
			r.RegisterWrites++
		case RegisterFinal:
			r.RegisterFinal = e.Value
			final = true
		case ClientStall:
			r.ClientStalls++
		}
	}
	if final {
		r.LostUpdates = r.RegisterWrites - int(r.RegisterFinal)
	}
	r.AcquireP50 = percentile(lat, 0.50)
	r.AcquireP99 = percentile(lat, 0.99)
}

// percentile returns the q-quantile (nearest rank) of ds, 0 if empty.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// SharedHold, as the Detail of an AcquireOK event, marks a reader's hold.
const SharedHold = "shared (reader)"

// checkMutualExclusion reports every pair of holds of different clients
// whose acting intervals [Start, End) overlap (a), unless both are readers.
func checkMutualExclusion(spans []HoldSpan, add func(Violation)) {
	for i := range spans {
		for j := i + 1; j < len(spans) && spans[j].Start < spans[i].End; j++ {
			a, b := &spans[i], &spans[j]
			if a.Client == b.Client || b.End <= b.Start || (a.Shared && b.Shared) {
				continue
			}
			a.Conflict, b.Conflict = true, true
			add(Violation{
				Check: CheckMutualExclusion,
				At:    b.Start,
				Detail: fmt.Sprintf("client %d (hold %d, token %d) acquired at %.3fs while client %d (hold %d, token %d) acted as holder until %.3fs (valid until %.3fs%s)",
					b.Client, b.Hold, b.Token, b.Start.Seconds(), a.Client, a.Hold, a.Token, a.End.Seconds(), a.ValidUntil.Seconds(), stalledNote(a)),
				Excerpt: append(slices.Clone(a.events), b.events...),
			})
		}
	}
}

func stalledNote(s *HoldSpan) string {
	if s.Stalled {
		return ", then stalled and acted late"
	}
	return ""
}

// checkTokenOrder reports each hold whose token is not above every token
// handed out by an earlier acquisition (b). A reader of a read-write lock
// (Shared) shares the lock, so its token only has to be at least every
// earlier writer's (it may equal the last writer's or another reader's);
// a writer's must be above every earlier hold's, readers' included. Holds
// without a token (0) are not judged.
func checkTokenOrder(spans []HoldSpan, add func(Violation)) {
	var best, bestWriter *HoldSpan // the highest token so far, and the highest writer's
	for i := range spans {
		s := &spans[i]
		if s.Token == 0 {
			continue
		}
		// below reports s's token against the earlier hold's, in format's words.
		below := func(earlier *HoldSpan, format string) {
			add(Violation{
				Check: CheckTokenOrder,
				At:    s.Start,
				Detail: fmt.Sprintf(format,
					s.Client, s.Token, s.Start.Seconds(), earlier.Token, earlier.Client, earlier.Start.Seconds()),
				Excerpt: append(slices.Clone(earlier.events), s.events...),
			})
		}
		switch {
		case s.Shared && bestWriter != nil && s.Token < bestWriter.Token:
			below(bestWriter, "reader client %d got token %d at %.3fs, below token %d of writer client %d at %.3fs")
		case !s.Shared && best != nil && s.Token <= best.Token:
			below(best, "client %d got token %d at %.3fs, not above token %d of client %d at %.3fs")
		}
		if best == nil || s.Token > best.Token {
			best = s
		}
		if !s.Shared && (bestWriter == nil || s.Token > bestWriter.Token) {
			bestWriter = s
		}
	}
}

// checkFenceOrder reports each fenced write the resource accepted with a
// token below that of a write it had accepted before this one was sent
// (c). Writes whose intervals overlap have no known order and are not
// compared.
func checkFenceOrder(h History, add func(Violation)) {
	type write struct {
		invoke, done time.Duration
		inv, ok      Event
	}
	open := map[int]Event{}
	var accepted []write
	for _, e := range h {
		switch e.Kind {
		case FencedWriteInvoke:
			open[e.Hold] = e
		case FencedWriteOK:
			inv, found := open[e.Hold]
			if !found {
				inv = e
			}
			accepted = append(accepted, write{invoke: inv.At, done: e.At, inv: inv, ok: e})
			delete(open, e.Hold)
		case FencedWriteStale, FencedWriteFail:
			delete(open, e.Hold)
		}
	}
	byDone := slices.Clone(accepted)
	slices.SortStableFunc(byDone, func(a, b write) int { return cmp.Compare(a.done, b.done) })
	slices.SortStableFunc(accepted, func(a, b write) int { return cmp.Compare(a.invoke, b.invoke) })
	var highest *write
	next := 0
	for i := range accepted {
		w := &accepted[i]
		for next < len(byDone) && byDone[next].done < w.invoke {
			if highest == nil || byDone[next].inv.Token > highest.inv.Token {
				highest = &byDone[next]
			}
			next++
		}
		if highest != nil && w.inv.Token < highest.inv.Token {
			add(Violation{
				Check: CheckFenceOrder,
				At:    w.done,
				Detail: fmt.Sprintf("resource accepted token %d from client %d at %.3fs after it had accepted token %d from client %d at %.3fs",
					w.inv.Token, w.inv.Client, w.done.Seconds(), highest.inv.Token, highest.inv.Client, highest.done.Seconds()),
				Excerpt: []Event{highest.inv, highest.ok, w.inv, w.ok},
			})
		}
	}
}

// checkLeftoverKeys reports every node on which the final scan found the
// lock key (e). The excerpt ends with the last client events before the
// scan: the attempt that left the key is among them.
func checkLeftoverKeys(h History, add func(Violation)) {
	var last []Event
	for _, e := range h {
		if e.Client != NoClient {
			last = append(last, e)
			if len(last) > 12 {
				last = last[1:]
			}
		}
		if e.Kind != KeyScan || (e.Detail == "" && e.Err == "") {
			continue
		}
		what := "lock key left behind: " + e.Detail
		if e.Err != "" {
			what = "node could not be scanned: " + e.Err
		}
		add(Violation{Check: CheckLeftoverKey, At: e.At, Detail: fmt.Sprintf("node %s: %s", e.Node, what), Excerpt: append(slices.Clone(last), e)})
	}
}

// faultWindows pairs each FaultApply with the next FaultHeal of the same
// name.
func faultWindows(h History, end time.Duration) []FaultWindow {
	var ws []FaultWindow
	openAt := map[string][]int{}
	for _, e := range h {
		switch e.Kind {
		case FaultApply:
			openAt[e.Fault] = append(openAt[e.Fault], len(ws))
			ws = append(ws, FaultWindow{Fault: e.Fault, Apply: e.At, Heal: end})
		case FaultHeal:
			if idx := openAt[e.Fault]; len(idx) > 0 {
				ws[idx[0]].Heal, ws[idx[0]].HealedInRun = e.At, true
				openAt[e.Fault] = idx[1:]
			}
		}
	}
	return ws
}

// checkLiveness measures, from each moment at which the last active fault
// healed, the time to the next successful acquisition (f).
func checkLiveness(h History, bound time.Duration, r *Result, add func(Violation)) {
	active := 0
	for i, e := range h {
		switch e.Kind {
		case FaultApply:
			active++
		case FaultHeal:
			active--
		}
		if e.Kind != FaultHeal || active > 0 {
			continue
		}
		healed := e.At
		var next *Event
		for j := i + 1; j < len(h); j++ {
			if h[j].Kind == FaultApply {
				break // a new fault started before any acquisition: nothing to measure
			}
			if h[j].Kind == AcquireOK {
				next = &h[j]
				break
			}
		}
		if next == nil {
			if bound > 0 && !faultBefore(h[i+1:], healed+bound) {
				add(Violation{Check: CheckLiveness, At: healed,
					Detail:  fmt.Sprintf("no acquisition after the faults healed at %.3fs (run ended at %.3fs)", healed.Seconds(), r.End.Seconds()),
					Excerpt: []Event{e}})
			}
			continue
		}
		rec := next.At - healed
		r.RecoveryMeasured = true
		r.Recovery = max(r.Recovery, rec)
		if bound > 0 && rec > bound {
			add(Violation{Check: CheckLiveness, At: next.At,
				Detail:  fmt.Sprintf("first acquisition %.3fs after the faults healed at %.3fs (bound %s)", rec.Seconds(), healed.Seconds(), bound),
				Excerpt: []Event{e, *next}})
		}
	}
}

// faultBefore reports whether a fault is applied in h before t.
func faultBefore(h History, t time.Duration) bool {
	for _, e := range h {
		if e.At >= t {
			return false
		}
		if e.Kind == FaultApply {
			return true
		}
	}
	return false
}
