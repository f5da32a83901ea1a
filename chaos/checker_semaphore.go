package chaos

import (
	"fmt"
	"slices"
)

// The semaphore's properties: never more than K holders acting at once,
// tokens strictly increasing per slot, and the fenced resource of each
// slot never going back (DESIGN §5).

// checkPermits reports each acquisition that made more than permits
// clients act as holders at once (a): the hold that starts while permits
// others are acting.
func checkPermits(spans []HoldSpan, permits int, add func(Violation)) {
	for j := range spans {
		b := &spans[j]
		if b.End <= b.Start {
			continue
		}
		var acting []*HoldSpan
		for i := range j {
			a := &spans[i]
			if a.Client != b.Client && a.Start <= b.Start && b.Start < a.End {
				acting = append(acting, a)
			}
		}
		if len(acting) < permits {
			continue
		}
		excerpt := slices.Clone(b.events)
		detail := fmt.Sprintf("client %d (hold %d, slot %d, token %d) acquired at %.3fs while %d holders acted, with %d permits:",
			b.Client, b.Hold, b.Slot, b.Token, b.Start.Seconds(), len(acting), permits)
		for _, a := range acting {
			a.Conflict = true
			detail += fmt.Sprintf(" client %d (hold %d, slot %d, token %d, until %.3fs%s)", a.Client, a.Hold, a.Slot, a.Token, a.End.Seconds(), stalledNote(a))
			excerpt = append(excerpt, a.events...)
		}
		b.Conflict = true
		add(Violation{Check: CheckMutualExclusion, At: b.Start, Detail: detail, Excerpt: excerpt})
	}
}

// holdsBySlot splits the holds by slot, each in start order.
func holdsBySlot(spans []HoldSpan) map[int][]HoldSpan {
	by := map[int][]HoldSpan{}
	for _, s := range spans {
		by[s.Slot] = append(by[s.Slot], s)
	}
	return by
}

// writesBySlot splits the history's fenced-write events by the slot of
// the hold that made them: each slot's resource has a fence of its own.
func writesBySlot(h History, spans []HoldSpan) map[int]History {
	slot := map[int]int{}
	for _, s := range spans {
		slot[s.Hold] = s.Slot
	}
	by := map[int]History{}
	for _, e := range h {
		switch e.Kind {
		case FencedWriteInvoke, FencedWriteOK, FencedWriteStale, FencedWriteFail:
			by[slot[e.Hold]] = append(by[slot[e.Hold]], e)
		}
	}
	return by
}
