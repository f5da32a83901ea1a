package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// slotCount is the number of hash slots of Redis Cluster.
const slotCount = 16384

// SlotRange is a range of Redis Cluster hash slots, both ends included.
type SlotRange struct{ First, Last int }

// String writes the range as CLUSTER NODES does: "0-5460", or "5461" for
// a single slot.
func (r SlotRange) String() string {
	if r.First == r.Last {
		return strconv.Itoa(r.First)
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// ClusterInfo is what a probe learned of a node that runs in Redis Cluster
// mode (cluster-enabled yes).
type ClusterInfo struct {
	State string      // cluster_state: "ok", or "fail" (the node then refuses every key)
	Slots []SlotRange // the hash slots the node serves
	Err   error       // why CLUSTER INFO or CLUSTER NODES could not be read
	// Register is the key of the client's register of the largest TTL in
	// use, which every acquire raises on the node first: the node must
	// serve its slot too, whatever the lock.
	Register string
}

// Serves tells whether the node can take a lock whose keys are in hash
// slot slot (and the register): nil if so, otherwise an error matching
// ErrSlotNotServed that says why.
func (ci *ClusterInfo) Serves(slot int) error {
	if err := ci.servesRegister(); err != nil {
		return err
	}
	if !ci.has(slot) {
		return fmt.Errorf("%w: cluster mode, serves hash slots %s, not the lock's slot %d", ErrSlotNotServed, ci.slotList(), slot)
	}
	return nil
}

// servesRegister tells whether the node can take any lock at all: it is up
// and serves the slot of the register every acquire raises.
func (ci *ClusterInfo) servesRegister() error {
	switch {
	case ci.Err != nil:
		return fmt.Errorf("%w: cluster mode, the hash slots it serves could not be read: %w", ErrSlotNotServed, ci.Err)
	case len(ci.Slots) == 0:
		return fmt.Errorf("%w: cluster mode, serves no hash slot", ErrSlotNotServed)
	case ci.Register != "" && !ci.has(keySlot(ci.Register)):
		return fmt.Errorf("%w: cluster mode, serves hash slots %s, not slot %d of %s, the register of the largest TTL in use that every acquire raises (choose a KeyPrefix, the CLI's --key-prefix, that puts it in a slot the node serves)",
			ErrSlotNotServed, ci.slotList(), keySlot(ci.Register), ci.Register)
	case ci.State != "ok":
		return fmt.Errorf("%w: cluster mode, cluster_state %s: refuses every key (CLUSTERDOWN)", ErrSlotNotServed, ci.State)
	}
	return nil
}

// has tells whether slot is among the node's slots.
func (ci *ClusterInfo) has(slot int) bool { return inRanges(ci.Slots, slot) }

// inRanges tells whether slot is in one of rs.
func inRanges(rs []SlotRange, slot int) bool {
	for _, r := range rs {
		if r.First <= slot && slot <= r.Last {
			return true
		}
	}
	return false
}

// slotList lists the ranges the node serves, shortened past a few.
func (ci *ClusterInfo) slotList() string {
	const show = 4
	parts := make([]string, 0, show+1)
	for i, r := range ci.Slots {
		if i == show {
			parts = append(parts, fmt.Sprintf("and %d more ranges", len(ci.Slots)-show))
			break
		}
		parts = append(parts, r.String())
	}
	return strings.Join(parts, ",")
}

// keySlotOf is Keys.Slot: the Redis Cluster hash slot of the name's keys.
func (c *Client) keySlotOf(name string) int { return keySlot(c.lockKey(name)) }

// keySlot is Redis Cluster's hash slot of key: CRC16 of its hash tag (the
// part between the first "{" and the next "}", if not empty) or of the
// whole key, modulo 16384.
func keySlot(key string) int {
	if tag := hashTag(key); tag != "" {
		key = tag
	}
	return int(crc16(key) % slotCount)
}

// hashTag is key's hash tag: the part between its first "{" and the next
// "}", "" if there is none or it is empty (Redis Cluster then hashes the
// whole key).
func hashTag(key string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return key[open+1 : open+1+end]
		}
	}
	return ""
}

// emptyTagReason says why a lock's keys would not share a hash slot: the
// tag of its base key (prefix{name}) is empty, so each key is hashed whole
// and the keys of one lock (its readers, slots, queue) land in different
// slots; a Cluster node refuses them, and on any node the calls of one
// lock would go to different lanes of the node's stream (Options.Lanes),
// where a release could overtake its acquire. "" when the tag is fine.
func emptyTagReason(prefix, name string) string {
	// Read in place, not on a built key: this runs on every acquire.
	if open := strings.IndexByte(prefix, '{'); open >= 0 {
		// The prefix opens the tag, whatever the name.
		if strings.HasPrefix(prefix[open+1:], "}") {
			return "gives every lock's keys an empty hash tag (its first \"{\" is closed at once), so the keys of one lock would not share a hash slot"
		}
		return ""
	}
	if strings.HasPrefix(name, "}") {
		return "must not start with \"}\": the lock's keys would get an empty hash tag and not share a hash slot"
	}
	return ""
}

// crc16 is the CRC-16/XMODEM checksum (polynomial 0x1021, initial value 0)
// that Redis Cluster hashes keys with. Every script call hashes its lock's
// tag to pick its lane (nodePipes.lane): a byte a step, from a table.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

// crc16Table is the CRC of each byte value, shifted in alone.
var crc16Table = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()

// probeCluster reads the cluster state and the slots a node in cluster mode
// serves, in one round trip; nodes is its CLUSTER NODES ("" on an error).
func probeCluster(ctx context.Context, rdb redis.UniversalClient, register string) (ci *ClusterInfo, nodes string) {
	ci = &ClusterInfo{Register: register}
	pipe := rdb.Pipeline()
	info := pipe.ClusterInfo(ctx)
	nodesCmd := pipe.ClusterNodes(ctx)
	_, _ = pipe.Exec(ctx)
	if ci.Err = errors.Join(info.Err(), nodesCmd.Err()); ci.Err != nil {
		return ci, ""
	}
	ci.State = parseInfo(info.Val())["cluster_state"]
	ci.Slots, ci.Err = ownSlots(nodesCmd.Val(), false)
	return ci, nodesCmd.Val()
}

// ownSlots finds the slots of the "myself" line of CLUSTER NODES. Its
// fields are: id addr flags master ping pong epoch link slot...; a slot
// field is "N" or "N-M", or "[N->-id]" / "[N-<-id]" for a slot being
// migrated, which is not (or not yet) served here.
// With importing, a slot being migrated to the node ("[N-<-id]") counts:
// after ASKING the node takes the slot's keys.
func ownSlots(nodes string, importing bool) ([]SlotRange, error) {
	fields := myselfFields(nodes)
	if fields == nil {
		return nil, errors.New("redlock: CLUSTER NODES has no line flagged myself")
	}
	var slots []SlotRange
	for _, f := range fields[8:] {
		if strings.HasPrefix(f, "[") {
			num, _, isImport := strings.Cut(strings.Trim(f, "[]"), "-<-")
			if a, err := strconv.Atoi(num); importing && isImport && err == nil {
				slots = append(slots, SlotRange{a, a})
			}
			continue
		}
		first, last, isRange := strings.Cut(f, "-")
		if !isRange {
			last = first
		}
		a, err1 := strconv.Atoi(first)
		b, err2 := strconv.Atoi(last)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("redlock: unexpected slot %q in CLUSTER NODES", f)
		}
		slots = append(slots, SlotRange{a, b})
	}
	return slots, nil
}

// myselfFields is the fields of the line of CLUSTER NODES flagged myself
// (id addr flags master ping pong epoch link slot...); nil if none.
func myselfFields(nodes string) []string {
	for _, line := range strings.Split(nodes, "\n") {
		if f := strings.Fields(line); len(f) >= 8 && strings.Contains(","+f[2]+",", ",myself,") {
			return f
		}
	}
	return nil
}

// migratingSlots finds the slots the "myself" line of CLUSTER NODES shows
// as being migrated away ("[N->-id]"): slots the master still serves, some
// of whose keys may already be on the importing master.
func migratingSlots(nodes string) []SlotRange {
	fields := myselfFields(nodes)
	if fields == nil {
		return nil
	}
	var slots []SlotRange
	for _, f := range fields[8:] {
		if num, _, ok := strings.Cut(strings.Trim(f, "[]"), "->-"); ok && strings.HasPrefix(f, "[") {
			if a, err := strconv.Atoi(num); err == nil {
				slots = append(slots, SlotRange{a, a})
			}
		}
	}
	return slots
}

// migrationAbandoned tells whether a slot that was being migrated away
// (before) is served now and no longer migrating: the migration was
// closed without the slot moving (CLUSTER SETSLOT STABLE, or SETSLOT NODE
// back to the owner), and keys MIGRATEd out meanwhile are on the importing
// master, out of reach.
func migrationAbandoned(before, migrating, served []SlotRange) bool {
	for _, r := range before {
		for slot := r.First; slot <= r.Last; slot++ {
			if !inRanges(migrating, slot) && inRanges(served, slot) {
				return true
			}
		}
	}
	return false
}

// replicasInView counts the replicas of the "myself" master in CLUSTER
// NODES, connected or not: a replica whose link is down may still be
// promoted (with cluster-replica-validity-factor 0, or by CLUSTER FAILOVER
// FORCE on it).
func replicasInView(nodes string) int {
	var me string
	if f := myselfFields(nodes); f != nil {
		me = f[0]
	}
	n := 0
	for _, line := range strings.Split(nodes, "\n") {
		if f := strings.Fields(line); len(f) >= 8 && me != "" && f[3] == me && strings.Contains(","+f[2]+",", ",slave,") {
			n++
		}
	}
	return n
}

// slotsServed refuses the lock called name if a node in cluster mode cannot
// take its keys. The refused node is probed again on the next attempt:
// slots move, and a cluster comes back up.
func (c *Client) slotsServed(name string) error {
	slot := -1
	for _, n := range c.nodes {
		g := n.guard.Load()
		if g == nil || g.cluster == nil {
			continue
		}
		if slot < 0 {
			slot = c.keySlotOf(name)
		}
		if err := g.cluster.Serves(slot); err != nil {
			n.stale.Store(true)
			return &ConfigError{Field: "node", Value: n.name, Reason: fmt.Sprintf("cannot take lock %q (key %s): %s", name, c.lockKey(name), strings.TrimPrefix(err.Error(), ErrSlotNotServed.Error()+": ")), Err: err}
		}
	}
	return nil
}

// lockable tells whether the nodes can take the lock called name: they
// are independent, and every node in cluster mode serves its slot.
func (c *Client) lockable(name string) error {
	if err := c.independence(); err != nil {
		return err
	}
	return c.slotsServed(name)
}

// clusterRedirect tells whether a node's error says it runs in cluster mode
// and does not serve the key now: its slots changed since it was probed.
func clusterRedirect(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") || redis.HasErrorPrefix(err, "CLUSTERDOWN")
}
