package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// holderKeysLeft lists the nodes that still keep the holder metadata of name.
func holderKeysLeft(t *testing.T, cl *redistest.Cluster, c *redlock.Client, name string) []string {
	t.Helper()
	return serversWith(t, cl, c.Keys(name).Holder)
}

// A holder's metadata is shown by Inspect while it holds the lock, lives as
// long as the lock key on every node (set by the acquire, renewed by the
// extend), and goes with the release.
func TestMetadataIsShownWhileHeldAndGoesWithTheLock(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{})
	ctx := context.Background()
	const md = "host=web-1 pid=4242 cmd=./report.sh"
	l, err := c.Acquire(ctx, "report", redlock.WithTTL(time.Minute), redlock.WithMetadata(md))
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Inspect(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Metadata != md {
		t.Fatalf("Inspect: want held with metadata %q, got held=%v metadata %q", md, st.Held, st.Metadata)
	}
	// The acquire returned at a quorum: the last node may not have answered yet.
	for _, ns := range st.Nodes {
		if ns.Owner == st.Owner && ns.Metadata != md {
			t.Fatalf("node %s holds the key: want metadata %q, got %q", ns.Node, md, ns.Metadata)
		}
	}
	// Shorten both keys' lives behind the client's back: the extend must
	// renew the metadata with the lock, not leave it to expire first.
	for _, s := range cl.Servers {
		for _, k := range []string{c.Keys("report").Lock, c.Keys("report").Holder} {
			if err := s.Client().PExpire(ctx, k, 5*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	// The extend returned at a quorum: the nodes that renewed the lock by
	// then renewed the metadata with it.
	extended := 0
	for _, s := range cl.Servers {
		lockTTL := s.Client().PTTL(ctx, c.Keys("report").Lock).Val()
		holderTTL := s.Client().PTTL(ctx, c.Keys("report").Holder).Val()
		if lockTTL < 30*time.Second {
			continue
		}
		extended++
		// Two commands of the extend's script set the two expiries, and
		// the server's millisecond may turn between them: the metadata may
		// outlive the lock by one millisecond.
		if holderTTL < 30*time.Second || holderTTL > lockTTL+time.Millisecond {
			t.Fatalf("%s: after the extend the metadata lives %v, the lock %v: want renewed with it", s.Addr, holderTTL, lockTTL)
		}
	}
	if extended < c.Quorum() {
		t.Fatalf("only %d nodes extended", extended)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A node whose call was still running at the release deletes its keys
	// when that call ends.
	eventually(t, 5*time.Second, "no metadata left after the release", func() bool {
		return len(holderKeysLeft(t, cl, c, "report")) == 0
	})

	// The next holder attached none: none is shown.
	l, err = c.Acquire(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if st, err := c.Inspect(ctx, "report"); err != nil || st.Metadata != "" {
		t.Fatalf("a holder without metadata: want none shown, got %q (%v)", st.Metadata, err)
	}
	// Metadata that another owner wrote is not shown as this holder's.
	for _, s := range cl.Servers {
		if err := s.Client().Set(ctx, c.Keys("report").Holder, strings.Repeat("X", 26)+"host=stranger", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := c.Inspect(ctx, "report"); err != nil || st.Metadata != "" || st.Nodes[0].Metadata != "" {
		t.Fatalf("metadata of another owner: want none shown, got %q (%v)", st.Metadata, err)
	}
}

// An attempt that fails after winning some nodes cleans up its metadata with
// its lock keys, and ForceUnlock removes a holder's metadata too.
func TestMetadataLeavesNoKeyBehind(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{})
	ctx := context.Background()
	// Another owner holds the lock on two nodes: the attempt wins the third
	// only, fails, and must take its keys back there.
	for _, s := range cl.Servers[1:] {
		if err := s.Client().Set(ctx, c.Keys("job").Lock, "someone-else", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	failing := newClient(t, cl, redlock.Options{})
	if _, err := failing.TryAcquire(ctx, "job", redlock.WithMetadata("host=a")); !errors.Is(err, redlock.ErrLocked) {
		t.Fatalf("want ErrLocked, got %v", err)
	}
	failing.Close() // waits for the cleanup, which runs in the background
	if left := holderKeysLeft(t, cl, c, "job"); len(left) > 0 {
		t.Fatalf("the failed attempt left its metadata on %v", left)
	}
	for _, s := range cl.Servers[1:] {
		s.Client().Del(ctx, c.Keys("job").Lock)
	}

	if _, err := c.Acquire(ctx, "job", redlock.WithMetadata("host=a"), redlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The acquire returned at a quorum; the last node answers a moment later.
	eventually(t, 5*time.Second, "the metadata on every node", func() bool {
		return len(holderKeysLeft(t, cl, c, "job")) == 3
	})
	if _, err := c.ForceUnlock(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	if left := holderKeysLeft(t, cl, c, "job"); len(left) > 0 {
		t.Fatalf("ForceUnlock left the metadata on %v", left)
	}
}

// Metadata that is too long or not text is a configuration error naming it,
// and nothing is taken.
func TestBadMetadataIsAConfigError(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{})
	c := newClient(t, cl, redlock.Options{})
	for _, md := range []string{strings.Repeat("x", redlock.MaxMetadataLen+1), "bad \xff byte"} {
		_, err := c.TryAcquire(context.Background(), "job", redlock.WithMetadata(md))
		var ce *redlock.ConfigError
		if !errors.As(err, &ce) || ce.Field != "metadata" || !errors.Is(err, redlock.ErrInvalidConfig) {
			t.Fatalf("metadata of %d bytes: want a ConfigError on metadata, got %v", len(md), err)
		}
	}
	if left := keysLeft(t, cl, c, "job"); len(left) > 0 {
		t.Fatalf("a refused request left keys on %v", left)
	}
	if _, err := c.TryAcquire(context.Background(), "job", redlock.WithMetadata(strings.Repeat("x", redlock.MaxMetadataLen))); err != nil {
		t.Fatalf("metadata of exactly %d bytes: %v", redlock.MaxMetadataLen, err)
	}
}
