package redlock

import "testing"

// Review of 7093d30: the early wake-up (fewer copies than a quorum, for a
// waiter whose attempt started before every node confirmed) is skipped for
// a release that starts with wakeAllMark. That is the release of a write
// lock (writerSpec.wakes: wakeEvery), which readers of the RWLock wait for
// through the plain retrying wait (tracked by attempting like any other).
// The commit's own schedule applies unchanged: a writer that won just two
// of three nodes (a reader's first attempt took the third) publishes on
// two, one of them the node where the readers' SUBSCRIBE is still on its
// way; one copy arrives, never a quorum, and every reader sleeps its
// whole retry delay.
func TestReviewWakeAllReleaseShortOfAQuorumWakesTrackedWaiters(t *testing.T) {
	c := newFakeClient(t, fakes(3), Options{})
	r1 := &waiter{ch: make(chan bool, 1)}
	r2 := &waiter{ch: make(chan bool, 1)}
	w := &c.waiters
	tp := &topic{list: []*waiter{r1, r2}}
	w.mu.Lock()
	w.topics = map[string]*topic{"job": tp}
	w.nodes = 3 // as in TestReleaseWakesAWaiterWhoseSubscriptionMissedAHolderNode
	tp.nconfirmed = 2
	w.mu.Unlock()
	w.attempting("job", r1)
	w.attempting("job", r2)
	woken := func(wt *waiter) bool {
		select {
		case <-wt.ch:
			return true
		default:
			return false
		}
	}

	// Control: the same single copy of a one-waiter release wakes a reader
	// whose attempt started with two of three nodes confirmed.
	w.notify("job", "owner-1", false)
	if !woken(r1) && !woken(r2) {
		t.Fatal("control: one copy of a plain release did not wake a tracked waiter")
	}

	// The writer's release: one copy is all that comes.
	w.notify("job", wakeAllMark+"owner-2", false)
	if !woken(r1) || !woken(r2) {
		t.Fatal("one copy of a write lock's release (wakeAllMark) woke no reader whose attempt started before every node confirmed: " +
			"the holder-of-a-quorum schedule of 7093d30 still loses the wake-up for wakeEvery kinds")
	}
}
