package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
)

// Review of 195a6b9: a client that met two nodes only while they were full
// never read their data-kept markers (markerFull, marker ""). The operator
// frees them with FLUSHALL (the memory coming back late, as an async flush
// does), which drops X's lock key. The first probe that reads the marker
// then finds none, but has no value of its own to compare with
// (old.marker == ""), so it sees no loss, clears markerFull, and the node
// votes at once: Y takes the lock X still holds. The flush came after Y's
// first contact, so the "flush before first contact" limit of PROTOCOL §11
// does not cover it.
func TestReviewFlushAfterFirstContactWhileFullIsSeen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := startCappedNodes(t)
	opts := redlock.Options{TTL: 30 * time.Second}
	x := newClientOn(t, cl.Clients(), opts)
	const name = "job"
	held := hold(t, ctx, x.TryAcquire, name) // X's probes wrote the markers
	// Two nodes fill up; Y meets the nodes only now.
	configSetOn(ctx, t, cl.Servers[:2], "maxmemory", "1")
	y := newClientOn(t, cl.Clients(), opts)
	for i, info := range y.Nodes(ctx) {
		t.Logf("Y meets node %d: voting %v (%s)", i, info.Voting, info.SitOutReason)
	}
	// The operator frees them; the memory comes back late.
	for _, s := range cl.Servers[:2] {
		if err := s.Client().FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, info := range y.Nodes(ctx)[:2] {
		t.Logf("node %d after the flush, memory not back: voting %v (%s)", i, info.Voting, info.SitOutReason)
	}
	configSetOn(ctx, t, cl.Servers[:2], "maxmemory", "8mb")
	t.Logf("lock key on: %v", keysLeft(t, cl, x, name))
	refusedWhileHeld(t, ctx, held, name, refusal{tries: 3, margin: time.Second, after: " after FLUSHALL on 2 of 3 nodes that Y met only while full,", is: sittingOut(false, ""), want: "the flushed nodes sitting out"}, contender{"Y", y})
}
