package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// A node in cluster mode counts only for locks whose hash slot it serves;
// otherwise the acquire is refused with the reason, instead of running on
// the other nodes with less fault tolerance than configured.
func TestClusterNodeMustServeTheLocksSlot(t *testing.T) {
	ctx := context.Background()
	plain := redistest.StartT(t, 2, redistest.Options{})
	cl := redistest.StartT(t, 1, redistest.Options{ClusterMode: true})
	node := cl.Servers[0]
	clients := append(plain.Clients(), cl.Clients()...)
	c := newClientOn(t, clients, redlock.Options{RestartGrace: redlock.NoRestartGrace})

	// Serving no slot, it can take no lock at all: refused like a replica.
	if err := c.Verify(ctx); !errors.Is(err, redlock.ErrSlotNotServed) || !strings.Contains(err.Error(), node.Addr) {
		t.Fatalf("Verify with a cluster node serving no slot: want ErrSlotNotServed naming %s, got %v", node.Addr, err)
	}
	if _, err := c.TryAcquire(ctx, "job"); !errors.Is(err, redlock.ErrSlotNotServed) || !strings.Contains(err.Error(), "serves no hash slot") {
		t.Fatalf("acquire with a cluster node serving no slot: want ErrSlotNotServed, got %v", err)
	}
	infos := c.Nodes(ctx)
	if ci := infos[2].Cluster; ci == nil || len(ci.Slots) != 0 || infos[2].Voting {
		t.Fatalf("Nodes: want the cluster node reported with no slots and not voting, got %+v", infos[2])
	}

	if err := node.ServeSlots(ctx, 0, 8191); err != nil {
		t.Fatal(err)
	}
	served, unserved := "", ""
	for i := 0; served == "" || unserved == ""; i++ {
		name := fmt.Sprintf("job-%d", i)
		// The client's slot is the one Redis computes.
		want, err := node.Client().ClusterKeySlot(ctx, c.Keys(name).Lock).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Keys(name).Slot; int64(got) != want {
			t.Fatalf("Keys(%q).Slot = %d, Redis says %d", name, got, want)
		}
		if want <= 8191 {
			served = cmp(served, name)
		} else {
			unserved = cmp(unserved, name)
		}
	}

	l, err := c.TryAcquire(ctx, served)
	if err != nil {
		t.Fatalf("lock %q in a slot the cluster node serves: %v", served, err)
	}
	// The two plain nodes are a quorum: the acquire may decide before the
	// cluster node's call is answered, so its key is awaited, not read.
	eventually(t, 10*time.Second, "the cluster node holds the lock key", func() bool {
		v, err := node.Client().Get(ctx, c.Keys(served).Lock).Result()
		return err == nil && v != ""
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	_, err = c.TryAcquire(ctx, unserved)
	if !errors.Is(err, redlock.ErrSlotNotServed) || !errors.Is(err, redlock.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), fmt.Sprintf("not the lock's slot %d", c.Keys(unserved).Slot)) || !strings.Contains(err.Error(), "0-8191") {
		t.Fatalf("lock %q outside the node's slots: want ErrSlotNotServed with the slots, got %v", unserved, err)
	}
	for _, s := range append(plain.Servers, node) {
		if n, err := s.Client().Exists(ctx, c.Keys(unserved).Lock).Result(); err != nil && !errors.Is(err, redis.Nil) && !strings.HasPrefix(err.Error(), "CLUSTERDOWN") || n != 0 {
			t.Fatalf("%s: the refused lock left a key (%d, %v)", s.Addr, n, err)
		}
	}
	ci := c.Nodes(ctx)[2].Cluster
	if ci == nil || ci.Serves(c.Keys(served).Slot) != nil || !errors.Is(ci.Serves(c.Keys(unserved).Slot), redlock.ErrSlotNotServed) {
		t.Fatalf("Nodes: want the node's slots 0-8191, got %+v", ci)
	}
}

// A node in cluster mode must also serve the slot of the register of the
// largest TTL in use, which every acquire raises on it first: without it,
// it can take no lock, whatever the lock's own slot.
func TestClusterNodeMustServeTheRegistersSlot(t *testing.T) {
	ctx := context.Background()
	plain := redistest.StartT(t, 2, redistest.Options{})
	cl := redistest.StartT(t, 1, redistest.Options{ClusterMode: true})
	node := cl.Servers[0]
	// The default prefix puts the register, redlock:ttl-in-use, in slot 8189.
	if err := node.ServeSlots(ctx, 8192, 16383); err != nil {
		t.Fatal(err)
	}
	c := newClientOn(t, append(plain.Clients(), cl.Clients()...), redlock.Options{RestartGrace: redlock.NoRestartGrace})
	name := ""
	for i := 0; name == ""; i++ {
		if n := fmt.Sprintf("job-%d", i); c.Keys(n).Slot >= 8192 {
			name = n
		}
	}
	_, err := c.TryAcquire(ctx, name)
	if !errors.Is(err, redlock.ErrSlotNotServed) || !strings.Contains(err.Error(), "not slot 8189 of redlock:ttl-in-use") {
		t.Fatalf("lock %q in a slot the node serves, but not the register's: want ErrSlotNotServed naming the register, got %v", name, err)
	}
	if err := c.Verify(ctx); !errors.Is(err, redlock.ErrSlotNotServed) {
		t.Fatalf("Verify: want ErrSlotNotServed, got %v", err)
	}
}

// cmp keeps the first name found.
func cmp(have, name string) string {
	if have != "" {
		return have
	}
	return name
}
