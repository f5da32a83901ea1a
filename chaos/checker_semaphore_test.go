package chaos

import (
	"strings"
	"testing"
)

// withSlots gives hold i (counted from 1) the slot slots[i-1].
func withSlots(h History, slots ...int) History {
	for i := range h {
		if h[i].Kind == AcquireOK && h[i].Hold >= 1 && h[i].Hold <= len(slots) {
			h[i].Slot = slots[h[i].Hold-1]
		}
	}
	return h
}

func TestCheckerAllowsKHoldersAndCatchesKPlusOne(t *testing.T) {
	// Two permits: clients 0 and 1 hold at once on slots 0 and 1, tokens
	// ordered per slot only (slot 1's 50 is below slot 0's 100).
	var b histBuilder
	b.add(holdSpec{client: 0, start: 10, validUntil: 1000, stop: 50, token: 100})
	b.add(holdSpec{client: 1, start: 20, validUntil: 1000, stop: 60, token: 50})
	b.add(holdSpec{client: 2, start: 70, validUntil: 1000, stop: 80, token: 101})
	h := withSlots(b.finish(100), 0, 1, 0)
	if r := CheckHistory(h, CheckOptions{Permits: 2}); r.Total() != 0 {
		t.Fatalf("two holders of two permits judged unsafe: %v", r.Violations)
	}
	// The same history judged as a lock: they overlap.
	if r := CheckHistory(h, CheckOptions{}); r.Counts[CheckMutualExclusion] == 0 {
		t.Fatal("the lock's check missed two holders")
	}

	// A third client acquires while both act: three holders of two permits.
	b = histBuilder{}
	b.add(holdSpec{client: 0, start: 10, validUntil: 1000, stop: 50, token: 100})
	b.add(holdSpec{client: 1, start: 20, validUntil: 1000, stop: 60, token: 50})
	b.add(holdSpec{client: 2, start: 30, validUntil: 1000, stop: 40, token: 101})
	r := CheckHistory(withSlots(b.finish(100), 0, 1, 0), CheckOptions{Permits: 2})
	if r.Counts[CheckMutualExclusion] != 1 || !strings.Contains(r.Violations[0].Detail, "2 holders acted, with 2 permits") {
		t.Fatalf("three holders of two permits: %v", r.Violations)
	}
}

func TestCheckerJudgesTokensAndFencesPerSlot(t *testing.T) {
	var b histBuilder
	b.add(holdSpec{client: 0, start: 10, validUntil: 1000, stop: 20, token: 100})
	b.add(holdSpec{client: 1, start: 30, validUntil: 1000, stop: 40, token: 90}) // slot 0 goes back
	b.add(holdSpec{client: 2, start: 50, validUntil: 1000, stop: 60, token: 10}) // slot 1: fine
	r := CheckHistory(withSlots(b.finish(100), 0, 0, 1), CheckOptions{Permits: 2})
	if r.Counts[CheckTokenOrder] != 1 || r.Counts[CheckFenceOrder] != 1 || r.Total() != 2 {
		t.Fatalf("want one token-order and one fence-order violation on slot 0, got %v", r.Counts)
	}
}
