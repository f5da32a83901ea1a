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
