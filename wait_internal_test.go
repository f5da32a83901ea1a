package redlock

import "testing"

// A release is announced by every node that released. Woken by the first
// announcement, a waiter could find the other nodes not released yet, fail,
// and sleep its backoff while the later copies were dropped: a remote
// release wakes a waiter only once a quorum of nodes announced it, and once.
func TestRemoteReleaseWakesAWaiterOnceAQuorumAnnouncedIt(t *testing.T) {
	c := newFakeClient(t, fakes(5), Options{})
	wt := &waiter{ch: make(chan bool, 1)}
	w := &c.waiters
	w.mu.Lock()
	w.topics = map[string]*topic{"job": {list: []*waiter{wt}}}
	w.mu.Unlock()
	woken := func() bool {
		select {
		case <-wt.ch:
			return true
		default:
			return false
		}
	}
	for copyNo := 1; copyNo <= 5; copyNo++ {
		w.notify("job", "owner-1", false)
		if got, want := woken(), copyNo == c.quorum(); got != want {
			t.Fatalf("after copy %d of the release: woken %v, want %v", copyNo, got, want)
		}
	}
	// Our own release wakes at once, and its copies from the nodes do not
	// wake anyone again.
	w.notify("job", "owner-2", true)
	if !woken() {
		t.Fatal("our own release did not wake the waiter")
	}
	for range 5 {
		w.notify("job", "owner-2", false)
	}
	if woken() {
		t.Fatal("the nodes' copies of our own release woke the waiter again")
	}
}

// The confirmation of a quorum of nodes meets the holder's quorum on one
// node only. A holder that won just a quorum of three (another contender
// took the last node first) announces its release on two nodes, and the
// waiter's subscription on one of them may still be on its way: one copy
// reaches it, never a quorum. A waiter whose last attempt started before
// every node confirmed is woken by the copies it can count on; one whose
// attempt started after every node confirmed still waits for a quorum, and
// a waiter woken early is woken again by the copies up to the quorum.
func TestReleaseWakesAWaiterWhoseSubscriptionMissedAHolderNode(t *testing.T) {
	c := newFakeClient(t, fakes(3), Options{})
	wt := &waiter{ch: make(chan bool, 1)}
	w := &c.waiters
	tp := &topic{list: []*waiter{wt}}
	w.mu.Lock()
	w.topics = map[string]*topic{"job": tp}
	w.nodes = 3 // the fakes have no go-redis clients: as if all three could subscribe
	w.mu.Unlock()
	woken := func() bool {
		select {
		case <-wt.ch:
			return true
		default:
			return false
		}
	}

	// Two of the three nodes confirmed when the attempt started (the
	// quorum the wait asks): the one copy of a release that comes is
	// enough, and the copy that makes the quorum wakes the waiter again.
	tp.nconfirmed = 2
	w.attempting("job", wt)
	w.notify("job", "owner-1", false)
	if !woken() {
		t.Fatal("the release announced where the subscription was confirmed did not wake the waiter: a holder of two nodes, one not yet subscribed, is never heard")
	}
	w.notify("job", "owner-1", false)
	if !woken() {
		t.Fatal("the copy that makes a quorum did not wake again the waiter woken early")
	}
	w.notify("job", "owner-1", false)
	if woken() {
		t.Fatal("a copy past the quorum woke the waiter once more")
	}

	// Every node confirmed before the attempt: every copy will come, and
	// only a quorum of them wakes, as before.
	tp.nconfirmed = 3
	w.attempting("job", wt)
	w.notify("job", "owner-2", false)
	if woken() {
		t.Fatal("one copy woke a waiter whose subscription was confirmed on every node")
	}
	w.notify("job", "owner-2", false)
	if !woken() {
		t.Fatal("a quorum of copies did not wake the waiter")
	}
}
