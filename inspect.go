package redlock

// The operator's side of the client, in one file: what the nodes hold
// (Inspect, Queue, Semaphore.Holders, Keys), what the guards know of them
// (Nodes, NodesFor, Verify, Quorum), and the one write an operator
// may need (ForceUnlock). Everything here reads only, but ForceUnlock.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"
)

// Status is a quorum view of a lock, as Inspect sees it.
type Status struct {
	Name string
	Held bool // a quorum of nodes hold the same owner value
	// Unknown is true when Held is false but cannot be relied on: the
	// nodes that did not answer (Nodes[i].Err) could give an owner a
	// quorum, with the keys it holds on those that did. Held false and
	// Unknown false means no owner holds a quorum, whatever the silent
	// nodes hold.
	Unknown   bool
	Owner     string        // that owner value (opaque), "" if not held
	Remaining time.Duration // how long Owner surely still holds it: the quorum-th longest PTTL, less drift
	Fence     int64         // the highest fence register over the nodes
	// Metadata is what the holder attached (WithMetadata), "" if none or
	// not held.
	Metadata string
	Nodes    []NodeStatus
}

// NodeStatus is one node's view of a lock.
type NodeStatus struct {
	Node  string        // the node's address
	Owner string        // the owner value of the key, "" if none
	TTL   time.Duration // the key's remaining time to live
	Fence int64         // the fence register
	// Metadata is what the key's owner attached (WithMetadata), "" if none.
	Metadata string
	Err      error // why the node could not be read
}

// Inspect reads the lock on every node and tells who holds it, if anyone
// holds it on a quorum. It reads only: it takes and changes nothing. When
// fewer than a quorum of nodes answer, it returns the partial Status with a
// *QuorumError. Status.Unknown tells whether a Held of false can be relied
// on (it cannot when the silent nodes could make up a quorum). Each node's
// read is bounded by four node timeouts.
func (c *Client) Inspect(ctx context.Context, name string) (*Status, error) {
	if _, _, err := c.params(name, nil); err != nil {
		return nil, err
	}
	st := &Status{Name: name, Nodes: make([]NodeStatus, len(c.nodes))}
	lockKey, fenceKey, holderKey := c.lockKey(name), c.fenceKey(name), c.holderKey(name)
	c.each(func(i int, n *node) {
		ns := &st.Nodes[i]
		ns.Node = n.name
		if n.rdb == nil {
			ns.Err = errors.New("no client")
			return
		}
		ctx, cancel := c.perNode(ctx)
		defer cancel()
		pipe := n.rdb.Pipeline()
		owner := pipe.Get(ctx, lockKey)
		ttl := pipe.PTTL(ctx, lockKey)
		fence := pipe.Get(ctx, fenceKey)
		holder := pipe.Get(ctx, holderKey)
		_, err := pipe.Exec(ctx)
		if err != nil && !errors.Is(err, redis.Nil) {
			ns.Err = err
			return
		}
		ns.Owner = owner.Val()
		if ns.Owner != "" {
			ns.TTL = ttl.Val()
			// Metadata written by another owner than the key's is not this
			// holder's (the scripts never leave such a pair, but a reader
			// must not show a stranger as the holder if they did).
			if owner, md := holderMetadata(holder.Val()); owner == ns.Owner {
				ns.Metadata = md
			}
		}
		ns.Fence, _ = strconv.ParseInt(fence.Val(), 10, 64)
	})
	if qe := c.judge(st); qe != nil {
		return st, qe
	}
	return st, nil
}

// judge fills in st's verdict from its nodes' views: who holds the key on
// a quorum, and until when at least. It returns a *QuorumError when fewer
// than a quorum of nodes answered: the verdict may be wrong.
func (c *Client) judge(st *Status) *QuorumError {
	qe := &QuorumError{Op: "inspect", Name: st.Name, Needed: c.quorum()}
	holders := make(map[string][]time.Duration)
	for _, ns := range st.Nodes {
		if ns.Err != nil {
			qe.Errors = multierror.Append(qe.Errors, &NodeError{Node: ns.Node, Err: ns.Err})
			continue
		}
		qe.Won++
		st.Fence = max(st.Fence, ns.Fence)
		if ns.Owner != "" {
			holders[ns.Owner] = append(holders[ns.Owner], ns.TTL)
		}
	}
	for owner, ttls := range holders {
		if len(ttls) < c.quorum() {
			continue
		}
		st.Held, st.Owner = true, owner
		for _, ns := range st.Nodes {
			if ns.Err == nil && ns.Owner == owner && ns.Metadata != "" {
				st.Metadata = ns.Metadata
			}
		}
		// The lock holds while a quorum of keys live: until the
		// quorum-th longest TTL runs out.
		longest := ttls
		for i := range longest {
			for j := i + 1; j < len(longest); j++ {
				if longest[j] > longest[i] {
					longest[i], longest[j] = longest[j], longest[i]
				}
			}
		}
		q := longest[c.quorum()-1]
		st.Remaining = max(q-driftAllowance(q, c.opts.DriftFactor), 0)
	}
	if !st.Held {
		// The owner closest to a quorum (or a new one, with none) could
		// hold the lock on every node that did not answer.
		closest := 0
		for _, ttls := range holders {
			closest = max(closest, len(ttls))
		}
		st.Unknown = closest+len(st.Nodes)-qe.Won >= c.quorum()
	}
	if qe.Won < qe.Needed {
		return qe
	}
	return nil
}

// ForceUnlock deletes the lock's key (and its holder's metadata) on every
// node, whoever holds it, and wakes waiters. It is for operators clearing a lock whose holder is known
// dead. It also raises the fence register by one, so that a holder still
// alive cannot take the lock back with an extension (which repairs missing
// keys only under a fence no newer than its token): its next extension
// reports the lock lost. Tokens stay monotonic; one number is skipped. It
// returns how many nodes had a key. A bad name is a *ConfigError and
// changes nothing; the errors of nodes that failed to answer are joined in
// the error (a key there expires with its TTL), and the count covers the
// nodes that answered.
func (c *Client) ForceUnlock(ctx context.Context, name string) (int, error) {
	if _, _, err := c.params(name, nil); err != nil {
		return 0, err
	}
	var (
		mu      sync.Mutex
		deleted int
		errs    []error
	)
	key, fence, holder := c.lockKey(name), c.fenceKey(name), c.holderKey(name)
	forced := strings.Repeat("-", ownerValueLen) // no real owner value looks like this
	c.each(func(_ int, n *node) {
		if n.rdb == nil {
			return
		}
		pipe := n.rdb.Pipeline()
		del := pipe.Del(ctx, key)
		pipe.Del(ctx, holder)
		pipe.Incr(ctx, fence)
		if n.pipes != nil && n.pipes.sharded.Load() {
			pipe.SPublish(ctx, c.releaseChannel(name), forced)
		} else {
			pipe.Publish(ctx, c.releaseChannel(name), forced)
		}
		_, err := pipe.Exec(ctx)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, &NodeError{Node: n.name, Err: err})
			return
		}
		deleted += int(del.Val())
	})
	if len(errs) > 0 {
		return deleted, fmt.Errorf("redlock: force unlock %q: %w", name, errors.Join(errs...))
	}
	return deleted, nil
}

// NodeInfo is what Nodes learned of one node.
type NodeInfo struct {
	Node        string
	Err         error // set when the node could not be probed
	Role        string
	RunID       string
	Uptime      time.Duration
	AppendOnly  bool
	AppendFsync string        // "always", "everysec", "no"; "" if CONFIG is not allowed
	ClockOffset time.Duration // the node's clock minus ours, at the middle of the round trip
	ClockSkew   time.Duration // the node's clock minus the median of the other nodes' clocks
	LargestTTL  time.Duration // the node's register of the largest TTL any client uses (0: none)
	RTT         time.Duration
	// Replicas is how many replicas are connected to the node's master
	// (for a Cluster node, the replicas of all its masters in CLUSTER
	// NODES, connected or not). Promoted tells that a
	// master was promoted from replica since it started: it is dated as
	// started when the client first saw it.
	Replicas int
	Promoted bool
	// MaxMemory (bytes, 0 for no limit) and MaxMemoryPolicy are the
	// node's memory limit and eviction policy (INFO memory; for a Cluster
	// node, a master's that may evict, else the first master's), and
	// EvictedKeys the keys it evicted since it started (INFO stats; a
	// Cluster node's masters' together). A node that may evict (a limit
	// and a policy other than noeviction) is refused with ErrEvictingNode
	// unless Options.AllowEvictingNodes; with it, an eviction makes the
	// node sit out the restart grace.
	MaxMemory       int64
	MaxMemoryPolicy string
	EvictedKeys     int64
	Voting          bool   // whether its vote counts now
	SitOutReason    string // why not
	// Kind is what the node is: "master", a standalone master; "cluster",
	// a Redis Cluster (a *redis.ClusterClient); or "sentinel", a master
	// managed by Sentinel (a client of redis.NewFailoverClient).
	Kind string
	// Masters are the servers that hold the node's locks' keys, each with
	// its replicas: the server itself; for a Sentinel node the master it
	// reached (Sentinel's current one); for a Cluster node every master
	// and its slots, or, from NodesFor, the master serving the lock's slot.
	Masters []MasterInfo
	// DurableVotes tells that the node's votes wait for its master's
	// replicas to acknowledge them (Options.DurableVotes), so that a
	// promoted replica holds every counted vote.
	DurableVotes bool
	// Refused is why the client refuses the node's vote for good, nil if it
	// does not: ErrNotIndependent (a replica, a server given twice),
	// ErrFailoverNode (it fails over and its votes are not durable),
	// ErrSlotNotServed (a cluster-mode server that can take no lock). It
	// is the error an acquire gets, as a *ConfigError.
	Refused error
	// Cluster is set when the node runs in Redis Cluster mode: it can take
	// a lock only if Cluster.Serves(Client.keySlotOf(name)) is nil.
	Cluster *ClusterInfo
	// TLS is the TLS version of the last connection made to the node
	// ("TLS 1.3"), "" if it was not encrypted or none was made.
	TLS string
	// CertExpires is when the certificate the node presented on that
	// connection expires (zero without TLS), and CertSubject its common name.
	CertExpires time.Time
	CertSubject string
}

// MasterInfo is one master behind a node, as a probe found it.
type MasterInfo struct {
	Addr  string // host:port; for a Sentinel node, the address the master was reached at
	RunID string
	// Slots are the hash slots a Cluster master serves or imports (nil
	// for a node that is not a Cluster).
	Slots []SlotRange
	// Promoted tells that it was a replica turned master since it started.
	Promoted bool
	// Replicas are the replicas connected to it now. (A Cluster replica
	// whose link is down is not listed, but NodeInfo.Replicas counts it: it
	// may still be promoted.)
	Replicas []ReplicaInfo
}

// ReplicaInfo is one replica of a master, as the master's INFO
// replication lists it.
type ReplicaInfo struct {
	Addr  string // as the replica announced it
	State string // "online", or a stage of a sync ("wait_bgsave", "send_bulk")
	// Behind is how many bytes of the replication stream it has not
	// acknowledged: what it would lack if it were promoted now.
	Behind int64
	// LastAck is the time since its last acknowledgement, in the whole
	// seconds the master counts.
	LastAck time.Duration
}

// Nodes probes every node now and reports what the guards know of it. Each
// node's probe is bounded by four node timeouts (a few round trips and
// maybe a dial): a node that does not answer by then is reported with
// context.DeadlineExceeded. A Cluster node votes only if every one of its
// masters may: NodesFor judges the votes for one lock.
func (c *Client) Nodes(ctx context.Context) []NodeInfo {
	return c.nodeInfos(ctx, "")
}

// NodesFor is Nodes for the lock called name: a Cluster node's Masters is
// the master serving the lock's hash slot, and every node's vote is judged
// for that lock, as an acquire of it would judge it. A bad name (empty, too
// long) is a *ConfigError and probes nothing; a node that cannot be probed
// has its Err set, as in Nodes.
func (c *Client) NodesFor(ctx context.Context, name string) ([]NodeInfo, error) {
	if _, _, err := c.params(name, nil); err != nil {
		return nil, err
	}
	return c.nodeInfos(ctx, c.lockKey(name)), nil
}

// nodeInfos is Nodes, judging the votes for the lock whose key is key (""
// for any lock).
func (c *Client) nodeInfos(ctx context.Context, key string) []NodeInfo {
	infos := make([]NodeInfo, len(c.nodes))
	c.each(func(i int, n *node) {
		info := &infos[i]
		info.Node = n.name
		info.Kind = nodeKind(n.rdb)
		if n.rdb == nil {
			info.Err = errors.New("no client")
			return
		}
		pctx, cancel := c.perNode(ctx)
		defer cancel()
		res, err := c.refresh(pctx, n, 0)
		if err != nil {
			info.Err = err
			return
		}
		info.Masters = c.masters(pctx, n, res, key)
		info.DurableVotes = c.opts.DurableVotes
		info.Role, info.RunID, info.Uptime = res.role, res.runID, res.uptime
		info.AppendOnly, info.AppendFsync = res.appendOnly, res.appendFsync
		info.RTT = res.timeRecv.Sub(res.timeSent)
		info.ClockOffset = res.nodeTime.Sub(res.timeSent.Add(info.RTT / 2))
		info.LargestTTL = res.fleetTTL
		info.Replicas, info.Promoted = res.replicas, res.promoted
		info.MaxMemory, info.MaxMemoryPolicy, info.EvictedKeys = res.maxMemory, res.policy, res.evicted
		info.Cluster = res.cluster
		if st := n.tls.Load(); st != nil && st.version != 0 {
			info.TLS = tls.VersionName(st.version)
			info.CertExpires, info.CertSubject = st.certExpires, st.certSubject
		}
	})
	// Every clock is compared with the others' once all answered.
	c.compareClocks()
	samples, have := c.clockSamples()
	for i, n := range c.nodes {
		info := &infos[i]
		if info.Err != nil {
			continue
		}
		info.ClockSkew, _ = clockSkew(samples, have, i)
		if g := n.guard.Load(); g != nil {
			info.Refused = g.excluded
		}
		if err := c.ready(ctx, n, key); err != nil {
			info.SitOutReason = strings.TrimPrefix(err.Error(), ErrNodeSittingOut.Error()+": ")
		} else {
			info.Voting = true
		}
	}
	return infos
}

// nodeKind tells what kind of node rdb is.
func nodeKind(rdb redis.UniversalClient) string {
	if _, ok := rdb.(*redis.ClusterClient); ok {
		return kindCluster
	}
	if isFailoverClient(rdb) {
		return kindSentinel
	}
	return kindMaster
}

// masters lists the masters behind n from its probe res: for a Cluster
// node, every master, or only the one serving key's slot if key is set.
func (c *Client) masters(ctx context.Context, n *node, res probeResult, key string) []MasterInfo {
	if res.shards == nil {
		m := MasterInfo{RunID: res.runID, Promoted: res.promoted, Replicas: res.links}
		switch rdb := n.rdb.(type) {
		case *redis.Client:
			m.Addr = rdb.Options().Addr
			if isFailoverClient(rdb) {
				// Sentinel found the master at dial: the connection's
				// address on the server's side is where it was reached.
				if ci, err := rdb.ClientInfo(ctx).Result(); err == nil {
					m.Addr = ci.LAddr
				} else {
					m.Addr = "?"
				}
			}
		}
		return []MasterInfo{m}
	}
	var out []MasterInfo
	for _, r := range res.shards {
		m := MasterInfo{Addr: r.addr, RunID: r.runID, Slots: r.claims, Promoted: r.promoted, Replicas: r.links}
		if key != "" {
			if !(&ClusterInfo{Slots: r.claims}).has(keySlot(key)) {
				continue
			}
		}
		out = append(out, m)
	}
	return out
}

// Verify probes every node and returns an error matching ErrNotIndependent
// if one is a replica or two are the same server, one matching
// ErrSlotNotServed if one runs in cluster mode serving no hash slot, or a
// *QuorumError (ErrNoQuorum) if fewer than a quorum of nodes can vote now:
// some do not answer, or sit out (the restart grace of nodes that started
// without persistence, a clock jump), each node's error kept. A Verify that
// fails only for sit-outs passes once they end, which the error tells.
// (Whether a cluster node serves a given lock's slot is checked by every
// acquire.)
func (c *Client) Verify(ctx context.Context) error {
	infos := c.Nodes(ctx)
	if err := c.independence(); err != nil {
		return err
	}
	voting := 0
	var errs *multierror.Error
	for i, info := range infos {
		switch {
		case info.Err != nil:
			errs = multierror.Append(errs, &NodeError{Node: info.Node, Err: info.Err})
		case info.Voting:
			voting++
		default:
			err := c.ready(ctx, c.nodes[i], "")
			if err == nil { // its sit-out ended since Nodes looked
				voting++
				continue
			}
			errs = multierror.Append(errs, &NodeError{Node: info.Node, Err: err})
		}
	}
	if voting < c.quorum() {
		return &QuorumError{Op: "verify", Won: voting, Needed: c.quorum(), Errors: errs}
	}
	return nil
}

// perNode bounds one node's part of Inspect or Nodes by the node timeout
// of the default TTL: one stopped node must not hold the answer back for
// the caller's whole deadline, it is reported as timed out.
func (c *Client) perNode(ctx context.Context) (context.Context, context.CancelFunc) {
	timeout, err := c.opts.nodeTimeout(c.opts.TTL, "TTL")
	if err != nil { // checked by New: not reached
		return context.WithCancel(ctx)
	}
	// A probe is a few round trips (and maybe a dial): room for them.
	return context.WithTimeout(ctx, 4*timeout)
}

// each runs fn for every node in parallel and waits for all.
func (c *Client) each(fn func(i int, n *node)) {
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i, n)
		}()
	}
	wg.Wait()
}

// QueueEntry is one waiter in a fair lock's queue on one node.
type QueueEntry struct {
	Waiter  string        // the waiter's owner value (opaque)
	Ticket  int64         // its ticket: the µs its Acquire began; lower is served first
	Expires time.Duration // how long the entry lives unless the waiter refreshes it
}

// NodeQueue is one node's queue of a fair lock, head first.
type NodeQueue struct {
	Node    string
	Entries []QueueEntry
	Err     error // why the node could not be read
}

// Queue reads the fair lock's queue on every node. It reads only. A node
// that cannot be read has Err set; the error returned joins them.
func (c *Client) Queue(ctx context.Context, name string) ([]NodeQueue, error) {
	if _, _, err := c.params(name, nil); err != nil {
		return nil, err
	}
	lock := c.lockKey(name)
	out := make([]NodeQueue, len(c.nodes))
	c.each(func(i int, n *node) {
		q := &out[i]
		q.Node = n.name
		if n.rdb == nil {
			q.Err = errors.New("no client")
			return
		}
		pipe := n.rdb.Pipeline()
		tickets := pipe.ZRangeWithScores(ctx, lock+queueSuffix, 0, -1)
		expiries := pipe.ZRangeWithScores(ctx, lock+expirySuffix, 0, -1)
		now := pipe.Time(ctx)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			q.Err = err
			return
		}
		expiry := make(map[string]float64)
		for _, z := range expiries.Val() {
			expiry[z.Member.(string)] = z.Score
		}
		nowMS := float64(now.Val().UnixMilli())
		for _, z := range tickets.Val() {
			w := z.Member.(string)
			q.Entries = append(q.Entries, QueueEntry{Waiter: w, Ticket: int64(z.Score),
				Expires: time.Duration(expiry[w]-nowMS) * time.Millisecond})
		}
	})
	var errs *multierror.Error
	for _, q := range out {
		if q.Err != nil {
			errs = multierror.Append(errs, &NodeError{Node: q.Node, Err: q.Err})
		}
	}
	return out, errs.ErrorOrNil()
}

// SemaphoreStatus is a quorum view of a semaphore, as Holders sees it.
type SemaphoreStatus struct {
	Name    string
	Permits int
	// Slots has one Status per slot, named "<name>/<slot>": held when a
	// quorum of nodes hold the same owner value in that slot.
	Slots []Status
	// Recorded is the number of permits a quorum of nodes record for
	// their held slots (see Keys.Permits), 0 if no number has a quorum.
	Recorded int64
}

// Held counts the slots held on a quorum.
func (st *SemaphoreStatus) Held() int {
	n := 0
	for _, s := range st.Slots {
		if s.Held {
			n++
		}
	}
	return n
}

// Holders reads every slot on every node and tells which are held, by
// whom, and for how long at least. It reads only. When fewer than a quorum
// of nodes answer, it returns the partial view with a *QuorumError. When a
// quorum of nodes record another number of permits than s's, the view is
// of slots taken with that number, and it comes with a
// *PermitsMismatchError, as an acquire would.
func (s *Semaphore) Holders(ctx context.Context) (*SemaphoreStatus, error) {
	c, k := s.c, s.permits
	st := &SemaphoreStatus{Name: s.name, Permits: k, Slots: make([]Status, k)}
	recorded := make([]int64, len(c.nodes)) // per node: the number it records, 0 if none
	permitsKey := s.keys[2*k]
	for i := range st.Slots {
		st.Slots[i] = Status{Name: s.name + "/" + strconv.Itoa(i), Nodes: make([]NodeStatus, len(c.nodes))}
	}
	c.each(func(j int, n *node) {
		for i := range st.Slots {
			st.Slots[i].Nodes[j].Node = n.name
		}
		if n.rdb == nil {
			for i := range st.Slots {
				st.Slots[i].Nodes[j].Err = errors.New("no client")
			}
			return
		}
		pipe := n.rdb.Pipeline()
		owners := make([]*redis.StringCmd, k)
		ttls := make([]*redis.DurationCmd, k)
		fences := make([]*redis.StringCmd, k)
		for i := range k {
			owners[i] = pipe.Get(ctx, s.keys[i])
			ttls[i] = pipe.PTTL(ctx, s.keys[i])
			fences[i] = pipe.Get(ctx, s.keys[k+i])
		}
		record := pipe.Get(ctx, permitsKey)
		_, err := pipe.Exec(ctx)
		if err == nil || errors.Is(err, redis.Nil) {
			if v := record.Val(); v != "" {
				recorded[j] = -1 // not a number
				if n, perr := strconv.ParseInt(v, 10, 64); perr == nil && n != 0 {
					recorded[j] = n
				}
			}
		}
		for i := range k {
			ns := &st.Slots[i].Nodes[j]
			if err != nil && !errors.Is(err, redis.Nil) {
				ns.Err = err
				continue
			}
			ns.Owner = owners[i].Val()
			if ns.Owner != "" {
				ns.TTL = ttls[i].Val()
			}
			ns.Fence, _ = strconv.ParseInt(fences[i].Val(), 10, 64)
		}
	})
	var qerr error
	for i := range st.Slots {
		if err := c.judge(&st.Slots[i]); err != nil && qerr == nil {
			err.Op, err.Name = "holders", s.name
			qerr = err
		}
	}
	votes := map[int64]int{}
	for _, n := range recorded {
		if n != 0 {
			votes[n]++
			if votes[n] >= c.quorum() {
				st.Recorded = n
			}
		}
	}
	if st.Recorded != 0 && st.Recorded != int64(k) {
		return st, &PermitsMismatchError{Name: s.name, Permits: k, Recorded: st.Recorded, Denied: votes[st.Recorded], Nodes: len(c.nodes)}
	}
	return st, qerr
}

// Quorum is the number of nodes that must agree: N/2+1.
func (c *Client) Quorum() int { return c.quorum() }

// Keys are the Redis keys and the pub/sub channel that the primitives of
// one name use on every node, for operators and tests that look at the
// nodes directly (redis-cli, an ACL, a dashboard). They all share the hash
// tag {name}, so on a Redis Cluster they live in one hash slot, Slot. Most
// exist only while the name is held or waited for; the fence register
// outlives its holders on purpose.
type Keys struct {
	// Lock holds the owner value of the holder of the mutex, of the fair
	// lock and of an RWLock's writer; its TTL is the holder's.
	Lock string
	// Fence is the fence register that makes tokens monotonic across
	// holders. It lives Options.FenceLifetime past the last acquisition
	// of the name.
	Fence string
	// Holder keeps the metadata the holder attached (WithMetadata), only
	// while such a holder holds the lock.
	Holder string
	// Released is the pub/sub channel a release publishes on, which
	// waiters of the name listen to.
	Released string
	// Readers and Writers are an RWLock's live readers and its waiting
	// writers' intents.
	Readers, Writers string
	// Permits is where a node records the number of permits a Semaphore's
	// held slots were taken with; it expires no earlier than the slot that
	// lives longest. Each slot is a key of its own: see Permit.
	Permits string
	// Slot is the Redis Cluster hash slot of every key above. A node in
	// cluster mode can hold the name only if it serves this slot.
	Slot int
}

// Keys gives the keys of the primitives called name, with the client's
// key prefix. It does no network I/O and cannot fail: a name that no
// primitive accepts (empty, too long) still gets its keys.
func (c *Client) Keys(name string) Keys {
	lock := c.lockKey(name)
	return Keys{
		Lock:     lock,
		Fence:    lock + fenceSuffix,
		Holder:   lock + holderSuffix,
		Released: lock + releasedSuffix,
		Readers:  lock + readersSuffix,
		Writers:  lock + intentsSuffix,
		Permits:  lock + permitsSuffix,
		Slot:     keySlot(lock),
	}
}

// Permit is the key of a Semaphore's slot i (from 0 to its permits - 1);
// the slot's fence register is that key + ":fence".
func (k Keys) Permit(i int) string { return k.Lock + permitSlotInfix + strconv.Itoa(i) }
