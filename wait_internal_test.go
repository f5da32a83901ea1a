package redlock

import "testing"

// notifyFixture is a client of n fake nodes whose waiters wait for "job".
func notifyFixture(t *testing.T, n, waiters int) (*waiters, []*waiter) {
	t.Helper()
	c := newFakeClient(t, fakes(n), Options{})
	var list []*waiter
	for range waiters {
		list = append(list, &waiter{ch: make(chan bool, 1)})
	}
	w := &c.waiters
	w.mu.Lock()
	w.topics = map[string]*topic{"job": {list: append([]*waiter(nil), list...)}}
	w.mu.Unlock()
	return w, list
}

func woken(wt *waiter) bool {
	select {
	case <-wt.ch:
		return true
	default:
		return false
	}
}

// The waiter's subscription is confirmed on a quorum of nodes and the
// holder's key is on a quorum: the two sets are sure to share only one
// node. Of 3 nodes, the holder held 0 and 1 and the subscription was in
// effect on 0 and 2: its release reaches the waiter from node 0 alone, and
// that copy must wake it (the lock is free on 0 and 2 by then).
func TestOneCopyOfAReleaseWakesAWaiter(t *testing.T) {
	w, list := notifyFixture(t, 3, 1)
	w.notify("job", "owner-1", false)
	if !woken(list[0]) {
		t.Fatal("the one copy of the release that reached the waiter did not wake it")
	}
}

// Woken by the first copy, a waiter may retry before the other nodes
// released and fail: each later copy, up to a quorum of them, wakes the
// same waiter again (not another one, which would only compete with it),
// so the retry after the last copy it can hear finds the lock free.
func TestLaterCopiesOfAReleaseWakeTheSameWaiterAgain(t *testing.T) {
	w, list := notifyFixture(t, 5, 2)
	q := w.c.quorum()
	for copyNo := 1; copyNo <= 5; copyNo++ {
		w.notify("job", "owner-1", false)
		if got, want := woken(list[0]), copyNo <= q; got != want {
			t.Fatalf("after copy %d of the release: first waiter woken %v, want %v", copyNo, got, want)
		}
		if woken(list[1]) {
			t.Fatalf("copy %d of the release woke a second waiter", copyNo)
		}
	}
	// The next release wakes the other waiter: they take turns.
	w.notify("job", "owner-2", false)
	if woken(list[0]) || !woken(list[1]) {
		t.Fatal("the next release did not wake the other waiter")
	}
}

// Our own release wakes at once, having heard a quorum's deletions; its
// copies from the nodes wake nobody again.
func TestOwnReleaseWakesOnceDespiteItsCopies(t *testing.T) {
	w, list := notifyFixture(t, 5, 2)
	w.notify("job", "owner-1", true)
	if !woken(list[0]) {
		t.Fatal("our own release did not wake the waiter")
	}
	for range 5 {
		w.notify("job", "owner-1", false)
	}
	if woken(list[0]) || woken(list[1]) {
		t.Fatal("the nodes' copies of our own release woke a waiter again")
	}
}

// A release of a kind whose holders share the lock wakes every waiter,
// and its later copies wake them all again.
func TestWakeAllReleaseWakesEveryWaiterOnEachCopy(t *testing.T) {
	w, list := notifyFixture(t, 3, 2)
	for copyNo := 1; copyNo <= 2; copyNo++ {
		w.notify("job", wakeAllMark+"owner-1", false)
		for i, wt := range list {
			if !woken(wt) {
				t.Fatalf("copy %d of the release did not wake waiter %d", copyNo, i)
			}
		}
	}
}
