package redlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A lock that another owner holds on enough nodes to make a quorum impossible
// is busy, whatever the other nodes did: one node failing first must not turn
// "held" into "no quorum" (the CLI would say the lock service is down).
func TestRefusalsThatAloneLoseAreLockedEvenWithAFailedNode(t *testing.T) {
	fs := fakes(5)
	boom := errors.New("connection refused")
	fs[0].fail = boom
	for _, f := range fs[1:] {
		f.set("redlock:{busy}", "someone-else")
	}
	// Two of the refusals come after the decision (a failure and two
	// refusals lose the round at once).
	gate := make(chan struct{})
	arrived := make(chan struct{}, 2)
	for _, f := range fs[3:] {
		f.gate, f.arrived = gate, arrived
	}
	go func() {
		<-arrived
		<-arrived
		close(gate)
	}()
	c := newFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 20 * time.Second})

	_, err := c.TryAcquire(context.Background(), "busy")
	var locked *LockedError
	if !errors.As(err, &locked) || !errors.Is(err, ErrLocked) || errors.Is(err, ErrNoQuorum) {
		t.Fatalf("held on 4 of 5 nodes, 1 failed: got %v, want a *LockedError that is not ErrNoQuorum", err)
	}
	if locked.Refused < 3 || locked.Nodes != 5 || locked.Errors.Len() != 1 || !errors.Is(err, boom) {
		t.Fatalf("got %+v, want at least 3 of 5 refusals and the failed node's error kept", locked)
	}
}

// When the failures were needed to lose, the answer is no quorum, and it
// names every node that failed, also those that answered after the decision,
// and how many nodes the other owner holds.
func TestNoQuorumNamesEveryFailedNodeAndCountsTheRefusals(t *testing.T) {
	fs := fakes(5)
	boom := errors.New("connection refused")
	for _, f := range fs[:3] {
		f.fail = boom
	}
	for _, f := range fs[3:] {
		f.set("redlock:{busy}", "someone-else")
	}
	c := newFakeClient(t, fs, Options{TTL: time.Minute, NodeTimeout: 20 * time.Second})

	_, err := c.TryAcquire(context.Background(), "busy")
	var qe *QuorumError
	if !errors.As(err, &qe) || errors.Is(err, ErrLocked) {
		t.Fatalf("3 of 5 failed, 2 held: got %v, want a *QuorumError that is not ErrLocked", err)
	}
	if qe.Errors.Len() != 3 || qe.Refused != 2 {
		t.Fatalf("got %v (%d node errors, %d refusals), want all 3 failed nodes named and 2 refusals", err, qe.Errors.Len(), qe.Refused)
	}
}
