package redistest

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A cluster of two masters with a replica each: a key written through the
// cluster client is on its slot's master; a master restarted empty keeps
// its slots and lost the key; a forced failover after the replica's link
// was cut promotes a replica that lacks the last write; a moved slot takes
// its keys along.
func TestRedisClusterFaults(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	rc := StartRedisClusterT(t, 2, 1, Options{})
	cc := rc.ClusterClient()
	defer cc.Close()
	const key = "{b}k" // slot 3300: the first master's
	slot := int(cc.ClusterKeySlot(ctx, key).Val())
	if err := cc.Set(ctx, key, "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	m, err := rc.MasterFor(ctx, slot)
	if err != nil || m != rc.Shards[0].Master {
		t.Fatalf("MasterFor(%d) = %v, %v; want the first master", slot, m, err)
	}

	// Restart empty, keeping nodes.conf: same node, same slots, no key.
	if _, err := rc.RestartMaster(ctx, slot); err != nil {
		t.Fatal(err)
	}
	if m2, err := rc.MasterFor(ctx, slot); err != nil || m2 != m {
		t.Fatalf("after RestartMaster: slot %d served by %v (%v), want %s", slot, m2, err, m.Addr)
	}
	if v, err := m.Client().Get(ctx, key).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("restarted master still has the key: %q %v", v, err)
	}

	// A lossy failover: the replica's link is cut, the master takes a
	// write, the replica is promoted without it.
	if err := m.Client().Set(ctx, key, "v2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rep := rc.Shards[0].Replicas[0]
	// The replica has v2 once WAIT counts it.
	if n, err := m.Client().Do(ctx, "wait", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d %v", n, err)
	}
	if err := CutReplication(ctx, rep); err != nil {
		t.Fatal(err)
	}
	if err := m.Client().Set(ctx, key, "v3", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p, err := rc.Failover(ctx, slot, false)
	if err != nil {
		t.Fatal(err)
	}
	if p != rep {
		t.Fatalf("Failover promoted %s, want %s", p.Addr, rep.Addr)
	}
	if v, err := p.Client().Get(ctx, key).Result(); err != nil || v != "v2" {
		t.Fatalf("promoted replica: GET = %q %v, want v2 (the write after the cut lost)", v, err)
	}

	// Move the slot to the other shard's master: the key goes along.
	to := rc.Shards[1].Master
	if err := rc.MoveSlot(ctx, slot, to); err != nil {
		t.Fatal(err)
	}
	if v, err := to.Client().Get(ctx, key).Result(); err != nil || v != "v2" {
		t.Fatalf("after MoveSlot: GET on %s = %q %v, want v2", to.Addr, v, err)
	}
}

// A slot moved without its keys: the new master serves it with no key, and
// the old master dropped its keys of the slot (it learned of the newer
// owner by gossip); a key of another slot on the old master stays.
func TestRedisClusterMoveSlotEmpty(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	rc := StartRedisClusterT(t, 2, 0, Options{})
	cc := rc.ClusterClient()
	defer cc.Close()
	const key, kept = "{b}k", "{c}kept" // slots 3300 and 7365: the first master's
	slot := int(cc.ClusterKeySlot(ctx, key).Val())
	for _, k := range []string{key, kept} {
		if err := cc.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	from, to := rc.Shards[0].Master, rc.Shards[1].Master
	if err := rc.MoveSlotEmpty(ctx, slot, to); err != nil {
		t.Fatal(err)
	}
	if m, err := rc.MasterFor(ctx, slot); err != nil || m != to {
		t.Fatalf("after MoveSlotEmpty: slot %d served by %v (%v), want %s", slot, m, err, to.Addr)
	}
	for _, s := range []*Server{from, to} {
		if n, err := s.Client().ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || n != 0 {
			t.Fatalf("%s holds %d keys of the moved slot (%v), want none", s.Addr, n, err)
		}
	}
	if v, err := cc.Get(ctx, kept).Result(); err != nil || v != "v" {
		t.Fatalf("the key of the slot that stayed: %q %v", v, err)
	}
	if err := rc.MoveSlotEmpty(ctx, slot, to); err == nil {
		t.Fatal("MoveSlotEmpty to the slot's own master: want an error")
	}
}

// A master with two replicas and three Sentinels: a forced failover and a
// killed master both promote a replica that the Sentinels then name.
func TestSentinelFaults(t *testing.T) {
	ctx := ctxT(t, 90*time.Second)
	ss := StartSentinelT(t, "mymaster", 2, Options{})
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: ss.Name, SentinelAddrs: ss.SentinelAddrs()})
	defer fc.Close()
	if err := fc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := ss.Master.Client().Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("the failover client did not write to the master: %q %v", v, err)
	}
	p, err := ss.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p == ss.Master {
		t.Fatal("Failover kept the master")
	}
	_, p2, err := ss.KillMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p2 == p {
		t.Fatalf("KillMaster kept %s as master", p.Addr)
	}
	if role, err := p2.Client().Do(ctx, "role").Slice(); err != nil || role[0] != "master" {
		t.Fatalf("promoted %s: ROLE %v %v", p2.Addr, role, err)
	}
}
