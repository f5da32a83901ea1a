package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
)

// Review of 195a6b9 (availability, not safety): a node at its maxmemory
// still takes an extension (the renewal's PEXPIRE is not refused for want
// of memory), but markerFull now refuses its vote: with two of three nodes
// full the holder loses its lock at the next extension.
func TestReviewExtendOnFullNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := startCappedNodes(t)
	x := newClientOn(t, cl.Clients(), redlock.Options{TTL: 30 * time.Second})
	held := hold(t, ctx, x.TryAcquire, "job")
	configSetOn(ctx, t, cl.Servers[:2], "maxmemory", "1")
	x.Nodes(ctx) // the probe that finds them full
	if err := held.Extend(ctx); err != nil {
		t.Fatalf("extend of a lock whose keys sit on full nodes: %v", err)
	}
}
