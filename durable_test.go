package redlock_test

// Durable votes (Options.DurableVotes): a vote counts only once every
// replica that could be promoted in its master's place acknowledged it.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// startReplicated starts n masters with one replica each, in sync.
func startReplicated(t *testing.T, n int) (*redistest.Cluster, []*redistest.Server) {
	t.Helper()
	masters := redistest.StartT(t, n, redistest.Options{})
	var replicas []*redistest.Server
	for _, m := range masters.Servers {
		r := redistest.StartT(t, 1, redistest.Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(m.Port)}})
		replicas = append(replicas, r.Servers[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, r := range replicas {
		if err := redistest.RestoreReplication(ctx, r); err != nil { // awaits the sync
			t.Fatal(err)
		}
	}
	return masters, replicas
}

// A master with a replica fails over as soon as someone promotes the
// replica: refused like a Sentinel or Cluster node unless votes are durable
// or the caller accepts failovers.
func TestMasterWithReplicaIsRefusedUnlessVotesAreDurable(t *testing.T) {
	masters, _ := startReplicated(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	refused := newClient(t, masters, redlock.Options{TTL: 2 * time.Second})
	err := refused.Verify(ctx)
	if !errors.Is(err, redlock.ErrFailoverNode) || !errors.Is(err, redlock.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "master with 1 replicas") || !strings.Contains(err.Error(), "DurableVotes") {
		t.Fatalf("masters with a replica, no option: want ErrFailoverNode naming the replica and the DurableVotes hint, got %v", err)
	}
	if _, err := refused.TryAcquire(ctx, "refused"); !errors.Is(err, redlock.ErrFailoverNode) {
		t.Fatalf("acquire on refused nodes: want ErrFailoverNode, got %v", err)
	}

	for _, opts := range []redlock.Options{{TTL: 2 * time.Second, DurableVotes: true}, {TTL: 2 * time.Second, AllowFailoverNodes: true}} {
		c := newClient(t, masters, opts)
		if err := c.Verify(ctx); err != nil {
			t.Fatalf("DurableVotes %v, AllowFailoverNodes %v: %v", opts.DurableVotes, opts.AllowFailoverNodes, err)
		}
		l, err := c.TryAcquire(ctx, "accepted")
		if err != nil {
			t.Fatalf("DurableVotes %v, AllowFailoverNodes %v: acquire: %v", opts.DurableVotes, opts.AllowFailoverNodes, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A write the replica never received is not a durable vote: with the
// replication of a majority of the masters cut, the acquire fails with
// ErrVoteNotDurable from those nodes, and leaves no key behind.
func TestDurableVoteNeedsTheReplicasAcknowledgement(t *testing.T) {
	masters, replicas := startReplicated(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newClient(t, masters, redlock.Options{TTL: 2 * time.Second, DurableVotes: true})
	l, err := c.TryAcquire(ctx, "durable")
	if err != nil {
		t.Fatalf("replication works: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range replicas[:2] {
		if err := redistest.CutReplication(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.TryAcquire(ctx, "durable")
	if !errors.Is(err, redlock.ErrVoteNotDurable) || errors.Is(err, redlock.ErrFailoverNode) {
		t.Fatalf("replication of 2 of 3 masters cut: want the acquire to fail with ErrVoteNotDurable, got %v", err)
	}
	for _, a := range masters.Addrs()[:2] {
		if !strings.Contains(err.Error(), a) {
			t.Errorf("the error does not name the node %s whose vote was not durable: %v", a, err)
		}
	}
	eventually(t, 5*time.Second, "the attempt's sweep deletes the keys of the votes that did not count", func() bool {
		return len(keysLeft(t, masters, c, "durable")) == 0
	})
}
