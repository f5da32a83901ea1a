package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The operations the Cluster faults rely on do what they say, on every
// backend: the lock's master restarts empty at the same address, the slot
// moves with and without its keys, and the clock of the slot's master
// jumps.
func TestBackendClusterNodeOperations(t *testing.T) {
	for _, b := range openBackends(t) {
		t.Run(b.Name(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c, err := b.Start(ctx, ClusterSpec{Nodes: 1, FakeTime: true, ClusterMasters: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := c.Stop(); err != nil {
					t.Errorf("stop: %v", err)
				}
			})
			if len(c.ClusterNodes) != 1 || len(c.Nodes) != 0 {
				t.Fatalf("%d Cluster nodes and %d plain nodes; want 1 and 0", len(c.ClusterNodes), len(c.Nodes))
			}
			n := c.ClusterNodes[0]
			cc := clusterNodeClient(n.Seeds())
			defer cc.Close()
			const key = "{lock}"
			set := func() {
				t.Helper()
				if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
			exists := func() bool {
				t.Helper()
				k, err := cc.Exists(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				return k == 1
			}

			set()
			addr, err := n.RestartMasterOf(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if exists() {
				t.Fatalf("the key outlived the restart of its master %s", addr)
			}
			if again := masterAddrOf(ctx, t, cc, key); again != addr {
				t.Fatalf("after the restart %s serves the key's slot; want %s, which kept its slots", again, addr)
			}

			set()
			from, to, err := n.MoveSlotOf(ctx, key, true)
			if err != nil {
				t.Fatal(err)
			}
			if from == to || masterAddrOf(ctx, t, cc, key) != to {
				t.Fatalf("slot moved with its keys from %s to %s; the client sees %s", from, to, masterAddrOf(ctx, t, cc, key))
			}
			if !exists() {
				t.Fatal("the key was lost in a move with its keys")
			}
			if _, _, err := n.MoveSlotOf(ctx, key, false); err != nil {
				t.Fatal(err)
			}
			if exists() {
				t.Fatal("the key outlived a move without its keys")
			}

			addr, err = n.MoveMasterClockOf(ctx, key, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			m := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			defer m.Close()
			if ahead := serverTime(t, m).Sub(time.Now()); ahead < 19*time.Second {
				t.Fatalf("the clock of %s is %s ahead, want about 20s", addr, ahead)
			}
		})
	}
}

// masterAddrOf is the address of the master that serves key's slot, as
// one of the cluster's servers says now.
func masterAddrOf(ctx context.Context, t *testing.T, cc *redis.ClusterClient, key string) string {
	t.Helper()
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range slots {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr
		}
	}
	t.Fatalf("no master serves slot %d", slot)
	return ""
}
