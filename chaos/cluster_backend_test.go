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
			c := startT(ctx, t, b, ClusterSpec{Nodes: 1, FakeTime: true, ClusterMasters: 2})
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

// The operations of the TTL register's scenarios do what they say, on
// every backend: a write made after the cut is not on the replica, the
// failover promotes that replica (so the write is lost and the lock's
// slot keeps its master), and a node frozen and revived serves every slot
// again, empty.
func TestBackendClusterReplicaOperations(t *testing.T) {
	for _, b := range openBackends(t) {
		t.Run(b.Name(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := startT(ctx, t, b, ClusterSpec{Nodes: 1, ClusterMasters: 3, ClusterReplicas: 1})
			n := c.ClusterNodes[0]
			cc := clusterNodeClient(n.Seeds())
			defer cc.Close()
			lockKey := RedlockScheme{}.LockKey()
			lockMaster := masterAddrOf(ctx, t, cc, lockKey)
			regMaster := masterAddrOf(ctx, t, cc, ttlRegisterKey)
			if lockMaster == regMaster {
				t.Fatalf("the lock's slot and the register's share the master %s: the register scenarios need them apart", lockMaster)
			}
			if err := cc.Set(ctx, ttlRegisterKey, "before", 0).Err(); err != nil {
				t.Fatal(err)
			}
			// The write is on the replica before the cut: WAIT for it.
			m := redis.NewClient(&redis.Options{Addr: regMaster})
			defer m.Close()
			if acks, err := m.Do(ctx, "wait", 1, 5000).Int(); err != nil || acks != 1 {
				t.Fatalf("WAIT 1 on %s: %d, %v", regMaster, acks, err)
			}
			replica, err := n.CutReplicaOf(ctx, ttlRegisterKey)
			if err != nil {
				t.Fatal(err)
			}
			if err := cc.Set(ctx, ttlRegisterKey, "after", 0).Err(); err != nil {
				t.Fatal(err)
			}
			from, to, err := n.FailoverMasterOf(ctx, ttlRegisterKey)
			if err != nil {
				t.Fatal(err)
			}
			if from != regMaster || to != replica {
				t.Fatalf("failover from %s to %s; want from %s to the cut replica %s", from, to, regMaster, replica)
			}
			if got := masterAddrOf(ctx, t, cc, ttlRegisterKey); got != replica {
				t.Fatalf("the register's slot is served by %s after the failover; want %s", got, replica)
			}
			if got := masterAddrOf(ctx, t, cc, lockKey); got != lockMaster {
				t.Fatalf("the lock's slot moved to %s; want it kept by %s", got, lockMaster)
			}
			if v, err := cc.Get(ctx, ttlRegisterKey).Result(); err != nil || v != "before" {
				t.Fatalf("after the failover the register holds %q (%v); want the value from before the cut", v, err)
			}
			if err := n.RestoreReplicas(ctx); err != nil {
				t.Fatal(err)
			}

			if err := cc.Set(ctx, lockKey, "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := n.Freeze(ctx); err != nil {
				t.Fatal(err)
			}
			for _, a := range n.Seeds() {
				s := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
				if err := s.Ping(ctx).Err(); err == nil {
					t.Errorf("%s answers while frozen", a)
				}
				_ = s.Close()
			}
			if err := n.Revive(ctx); err != nil {
				t.Fatal(err)
			}
			// A new client: the old one's connections died with the servers.
			after := clusterNodeClient(n.Seeds())
			defer after.Close()
			for _, key := range []string{lockKey, ttlRegisterKey} {
				if k, err := after.Exists(ctx, key).Result(); err != nil || k != 0 {
					t.Fatalf("after the node restarted empty: %s exists %d times (%v)", key, k, err)
				}
			}
		})
	}
}
