// Package redlock implements the Redlock distributed lock across N
// independent Redis masters, with monotonic fencing tokens.
//
// A lock is held when a quorum (N/2+1) of the masters accepted it, for a
// validity that accounts for the time the round trip took and for clock
// drift. Every acquisition gets a fencing token that is strictly greater than
// the token of any earlier holder of the same lock, in the same round trip in
// the common case; a resource that rejects stale tokens (see package fence:
// fence.Set) stays safe even when a holder is paused past its validity.
//
// The client also guards against the faults Redlock's critics name: a node
// that restarted empty does not vote until it has been up longer than the
// largest TTL in use, a node whose clock jumps sits out, and a set of nodes
// that is not independent (a replica, or one server reached twice) is
// refused.
package redlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/observe"
)

// NoRestartGrace, as Options.RestartGrace, lets a node vote right after it
// (re)started, and right after any other event that may have lost keys: a
// promotion, a fail-back, a slot gained, an eviction, a flush. Safe only
// when every node persists with appendfsync always and never loses a key
// another way: it never fails over, never evicts and is never flushed.
const NoRestartGrace time.Duration = -1

// noClockGuard, as Options.ClockJumpThreshold, turns off the clock-jump guard.
const noClockGuard time.Duration = -1

// noFenceExpiry, as Options.FenceLifetime, keeps every fence register for
// ever.
const noFenceExpiry time.Duration = -1

// maxNameLen is the longest lock name accepted, in bytes.
const maxNameLen = 512

// Defaults of Options.
const (
	defaultTTL           = 10 * time.Second
	defaultNodeTimeout   = 200 * time.Millisecond
	fsyncedNodeTimeout   = 3 * time.Second // FsyncedVotes: an everysec fsync, queued behind another
	defaultRetryDelayMin = 10 * time.Millisecond
	defaultRetryDelayMax = 500 * time.Millisecond
	defaultDriftFactor   = 0.01
	defaultFenceLifetime = 24 * time.Hour
)

// DefaultKeyPrefix is the default of Options.KeyPrefix: every key and
// channel of a client without a prefix of its own starts with it.
const DefaultKeyPrefix = "redlock:"

const fenceSuffix = ":fence"

// minNodeTimeout is the shortest per-node timeout accepted, given or derived
// from the TTL. A round trip over loopback takes ~100µs, but one across a
// real network ~1ms (and a busy Redis or a GC pause adds to it): below 1ms
// healthy nodes would time out, and the lock would fail for no fault.
const minNodeTimeout = time.Millisecond

// minLockTTL is the shortest TTL accepted, as Options.TTL, WithTTL or any
// primitive's TTL. Of a 100ms lock the drift allowance (DriftFactor of it
// plus 2ms) takes 3ms, and the default node timeout, a tenth, is 10ms: room
// for a first contact over loopback (a dial, then the probe's round trips)
// on a busy machine. At 10ms (a 1ms node timeout) every first acquire on
// localhost timed out, and at 20ms they all did on a loaded two-core
// machine. A TTL this short suits tests and local coordination only;
// across a network use seconds.
const minLockTTL = 100 * time.Millisecond

// Options configure a Client. The zero value gives sound defaults.
type Options struct {
	// TTL is how long a lock lives on the nodes unless extended or
	// released. Default 10s. WithTTL overrides it per lock.
	//
	// Unless NodeTimeout is set, each node gets a tenth of the TTL (at most
	// 200ms) to answer. The smallest TTL accepted is minLockTTL (100ms).
	TTL time.Duration
	// NodeTimeout bounds each call to a node. It must be far below the
	// TTL: the time it takes comes off the lock's validity. Default: the
	// smaller of 200ms and TTL/10 (with FsyncedVotes, of 3s and TTL/3). An
	// explicit value must be below TTL/2.
	NodeTimeout time.Duration
	// RetryDelayMin and RetryDelayMax bound the jittered, doubling delay
	// between attempts of a blocked Acquire, which is also woken at once
	// when the holder releases. Defaults 10ms and 500ms.
	RetryDelayMin, RetryDelayMax time.Duration
	// MaxWait bounds how long Acquire waits for a held lock. Default 0:
	// until the context is done. WithMaxWait overrides it per call. When
	// it runs out the error says so and matches ErrMaxWait (and, as a
	// deadline would, context.DeadlineExceeded).
	MaxWait time.Duration
	// DriftFactor is the share of the TTL allowed for clock drift between
	// nodes; 2ms more cover Redis' expiry resolution. Default 0.01.
	DriftFactor float64
	// KeyPrefix prefixes every key. Default "redlock:".
	KeyPrefix string
	// RestartGrace is how long a node that (re)started without persistence
	// (appendonly with appendfsync always) does not vote, counted from its
	// start. It is never less than the largest TTL any client uses on these
	// nodes, which the client learns from a register on every node (see
	// docs/GUARANTEES.md, "The node guards, precisely"). NoRestartGrace turns the guard off
	// (promotions, evictions and flushes included): safe only when every
	// node persists and never fails over, evicts or is flushed.
	RestartGrace time.Duration
	// ClockJumpThreshold is how far a node's clock may move against ours
	// between two samples, or disagree with the other nodes' clocks when
	// the client meets it, before it sits out one largest TTL in use.
	// Default 0: the drift allowance of the smallest TTL this client used.
	// That protects the drift budget of this client's locks only: where
	// other clients hold shorter locks on the same nodes, set it to at most
	// the drift allowance of the shortest TTL any client uses
	// (docs/GUARANTEES.md). -1 turns the guard off.
	ClockJumpThreshold time.Duration
	// DisableFencing skips the fence register: Token() is 0.
	DisableFencing bool
	// FenceLifetime is how long a lock name's fence register outlives the
	// last acquisition of that name; every acquisition renews it. A
	// service that locks per entity would otherwise keep one register per
	// name ever used on every node. Tokens stay strictly increasing across
	// an expired register because proposals are the acquiring client's
	// time in microseconds: the assumption is that client clocks (and a
	// token counter pushed ahead of them by the slow path) are off by less
	// than the lifetime. Default 24h; -1 keeps registers for ever.
	FenceLifetime time.Duration
	// Logger receives warnings about nodes (restarts, clock jumps,
	// refused nodes) and lost locks. Default: discard.
	Logger *slog.Logger
	// Observer, if set, is told of every acquisition, extension, release,
	// loss and node event, for metrics and tracing. It must not block.
	Observer observe.Observer
	// Clock is the time source. Default: the system clock.
	Clock Clock
	// TLSConfig, if set, is the TLS configuration of every node that
	// NewFromURLs connects to (LoadTLSConfig makes one from PEM files). Each
	// node gets a copy, with the URL's host as ServerName unless one is set
	// here, and the URL's own TLS parameters (cacert, cert, key, sni) on
	// top. Every URL must then be rediss://: a plain one is refused rather
	// than silently left unencrypted. New ignores it: the go-redis clients
	// given to New carry their own.
	TLSConfig *tls.Config
	// AllowFailoverNodes accepts nodes that fail over by themselves, or
	// may be made to: a client of redis.NewFailoverClient (a master
	// managed by Sentinel), a *redis.ClusterClient whose masters have
	// replicas, and a master with replicas. Without it (or DurableVotes)
	// such nodes are refused with ErrFailoverNode: replication is
	// asynchronous, so a replica promoted in a master's place may lack a
	// lock's key, and a second client can take the lock while the first
	// still holds it. A master the client sees promoted sits out the
	// restart grace as a restarted one does, but a failover that happens
	// while a lock is held still loses the vote of that node: with this
	// option, count every node that may fail over as one that may lose
	// its keys, and keep such failovers to fewer than a quorum's margin
	// (see docs/DEPLOYMENTS.md).
	AllowFailoverNodes bool
	// AllowEvictingNodes accepts nodes that may evict keys: a maxmemory
	// with a maxmemory-policy other than noeviction (volatile-* included:
	// every lock key has a TTL). Without it such nodes are refused with
	// ErrEvictingNode. With it, a node whose evicted_keys changed since
	// the client's last probe (or is not 0 when the client first meets
	// it) sits out the restart grace, counted from that probe. An eviction
	// is seen at the next probe, at most a second after the last one plus
	// a probe's round trips (docs/PROTOCOL.md §11): a lock key evicted
	// within that window before another client's vote can still give a
	// second holder. Prefer noeviction, or a Redis of its own for locks.
	//
	// It needs RestartGrace set to at least the largest TTL any client
	// uses on these nodes, and every lock's TTL at most that: the grace is
	// otherwise learned from a register on the nodes, and a cache that
	// fills the nodes evicts that register with the lock keys, on every
	// node at once, unlike a restart.
	AllowEvictingNodes bool
	// DurableVotes makes votes survive a failover: after every script
	// whose answer is a vote (acquire, extend, the fence and TTL
	// registers' raises; releases need none), a node's vote counts only
	// once every replica that could be promoted in its master's place
	// acknowledged the write (WAIT, or WAITAOF where the server has it and
	// its AOF is on, pipelined on the same connection within the node
	// timeout). A vote that is not acknowledged in time fails with
	// ErrVoteNotDurable. The replicas counted are those the master's
	// deployment lists (a Cluster's CLUSTER NODES), else the most the
	// master ever reported connected: a replica that is down makes the
	// node's votes fail rather than count unsafely. Nodes that fail over
	// (see AllowFailoverNodes) are accepted with it. A promoted master
	// still sits out the restart grace (docs/PROTOCOL.md §11), so a
	// failover of a quorum of a lock's nodes while it is held ends that
	// lock: liveness, not safety.
	DurableVotes bool
	// FsyncedVotes lets a node whose AOF is on with appendfsync everysec
	// count as persistent, so that it needs no restart grace after a crash
	// and restart of its server (kill -9 included), as a node with
	// appendfsync always does. It applies to a Redis 8.0 or later master:
	// every write a vote relies on there (the lock's keys, the fence and
	// TTL registers) is followed, on the same connection, by WAITAOF, and
	// the vote counts only once the master confirms its own fsync of it
	// and no AOF rewrite ran or started between the vote and that
	// confirmation (INFO persistence stats, read on the same connection
	// before the vote and after the WAITAOF): at a rewrite's start Redis
	// 8.x may confirm before the old AOF file's fsync. So a node's votes
	// fail while it rewrites its AOF. A vote that is not confirmed so
	// fails with ErrVoteNotDurable, naming the node, and the node's
	// persistence is learned again before its next vote. That
	// holds on every such master with its AOF on, also while this client
	// counts it as not persistent (a rewrite running, appendfsync no):
	// another client may count it as persistent and excuse its restart. So
	// a node with appendfsync no, or one rewriting its AOF with
	// no-appendfsync-on-rewrite yes, takes no vote of a client with this
	// option.
	//
	// Every client of the nodes must set it: a client without it counts
	// votes on an everysec node that a power loss may take, while the
	// clients with it excuse the restart.
	//
	// Valkey and Redis before 8.0 keep the rule without this option
	// (persistent only with appendfsync always), and Nodes says why: their
	// WAITAOF may answer that the fsync is done when it is not (Valkey
	// 9.1.2; Redis 7.4 until redis/redis#13793), so a power loss could
	// take votes counted as fsynced.
	//
	// The cost is latency: everysec fsyncs about once a second, and a
	// vote's WAITAOF waits for the next fsync after it, so back-to-back
	// acquires take about a second each (measured: 1.00s on an idle Redis
	// 8.6), and a multi-lock, which takes its names one after another, a
	// second per name. A call that queues behind another write of the node
	// waits for that write's fsync first, and that wait comes out of its
	// NodeTimeout: the WAITAOF gets the time left less a margin of up to
	// 500ms. Unless NodeTimeout is set, a client with this option gives
	// each node the smaller of 3s and TTL/3; with many calls in flight per
	// node give it more (5s; docs/PROTOCOL.md §13). A node with
	// appendfsync always answers at once. Persistence never excuses a
	// promotion, a slot gained, an eviction or a flush (docs/PROTOCOL.md
	// §11, §13).
	FsyncedVotes bool
	// AllowNoFaultTolerance accepts fewer than 3 nodes. With 1 or 2 the
	// quorum is every node, so a single node down or restarting stops
	// every lock; New refuses such a set unless this is set (tests, a
	// single-node setup on purpose). A Semaphore of such a client needs no
	// opt-in of its own then.
	AllowNoFaultTolerance bool
	// UnreachableTimeout bounds how long an Acquire (or Do) with no bound
	// of its own (no context deadline, no MaxWait) waits while fewer than
	// a quorum of nodes can vote (they cannot be reached, or they answer
	// errors: a wrong password, LOADING, OOM, ...): it then fails with an error
	// matching ErrNoQuorum rather than retry in silence for ever. Every
	// waiting Acquire also logs a warning, and tells an Observer
	// (EventUnreachable), once such a wait lasted 2s; a wait for nodes in
	// their restart grace, which ends by itself, is told once
	// (EventGraceWait) and not bounded by this. Default 30s; -1 waits for
	// ever.
	UnreachableTimeout time.Duration
	// DeferNodeChecks keeps New from probing the nodes: a replica or a
	// server given twice is then refused by the first acquire (or Verify,
	// Nodes) instead of by New. For tools that show what is wrong with a
	// set of nodes, such as the CLI's nodes and status commands; a client
	// that takes locks is better refused at once.
	DeferNodeChecks bool
	// Lanes is how many writes of acquires and releases the client keeps
	// in flight to each node at once, each on a connection of its own
	// (between 1 and 16). A call goes to the lane of its lock's hash slot,
	// so the calls of one lock keep their order whatever the number. Calls
	// that queue while their lane's write is in flight share its next
	// write, so more lanes mean smaller writes: on this project's 2-core
	// benchmark machine, where the client and the servers share the
	// cores, 2 or 4 lanes raised the CPU spent per operation more than
	// they cut the waiting, and cost throughput on 5 nodes
	// (docs/BENCHMARKS.md). Default 1: one write in flight per node.
	Lanes int
}

// Client takes locks on a fixed set of independent Redis masters. It is safe
// for concurrent use; create one per process and share it.
type Client struct {
	opts   Options
	nodes  []*node
	clock  Clock
	base   time.Time // anchors monotonic readings to wall time (clock guard)
	logger *slog.Logger
	// the default TTL and the fence lifetime in ms, boxed once for the
	// hot path
	defaultTTLArg, fenceLifetimeArg any
	owned                           []redis.UniversalClient
	unrouteLog                      func() // ends the routing of go-redis' log about owned (golog.go)

	guardMu   sync.Mutex   // serialises guard updates across nodes (duplicate check)
	maxTTL    atomic.Int64 // largest TTL used so far, for the restart grace
	minTTL    atomic.Int64 // smallest TTL used so far, for the clock threshold
	lastToken atomic.Int64 // highest fence value seen, for the next proposal
	waiters   waiters
	messages  listeners   // waiters of kinds that hear their kind's own messages on the release channels
	renewals  renewals    // the auto-extensions
	probed    atomic.Bool // every node was probed once (first contact)
	// graceToldUntil is when the wait for the restart grace last told
	// (waitReport.tellGrace) ends, in Unix ns: it is not told again before.
	graceToldUntil atomic.Int64
	bg             background // goroutines that outlive a call: stragglers, cleanups, extenders
	closed         atomic.Bool
}

// New builds a client over nodes, one go-redis client per independent Redis
// master. The caller keeps ownership of the clients (Close does not close
// them); New adds a hook to each that lets the client notice reconnections.
//
// New refuses fewer than 3 nodes unless Options.AllowNoFaultTolerance is
// set. It probes every node once, in parallel, for at most four node
// timeouts, and refuses a set that is known not to be independent masters
// (ErrNotIndependent): a replica, or one server reached twice, naming that
// node. A node that does not answer is not an error here: it may come up
// later, and Verify tells whether enough nodes vote now.
func New(nodes []redis.UniversalClient, opts Options) (*Client, error) {
	if len(nodes) == 0 {
		return nil, configErr("nodes", "[]", "at least one Redis master is needed (an odd number, 3 or 5, is usual)")
	}
	if n := len(nodes); n < 3 && !opts.AllowNoFaultTolerance {
		return nil, configErr("number of nodes", n, fmt.Sprintf("leaves no fault tolerance: the quorum is %d of %d, so one node down or restarting stops every lock; use 3 or more independent masters (5 is usual), or set Options.AllowNoFaultTolerance", n/2+1, n))
	}
	ns := make([]*node, len(nodes))
	seen := make(map[string]int)
	for i, rdb := range nodes {
		if rdb == nil {
			return nil, configErr("node", i+1, "is nil") // counted from 1, as in every message
		}
		name := nodeName(rdb, i)
		if j, dup := seen[name]; dup {
			return nil, &ConfigError{Field: "node", Value: name, Reason: fmt.Sprintf("given twice (nodes %d and %d of %d)", j+1, i+1, len(nodes)), Err: ErrNotIndependent}
		}
		seen[name] = i
		if isFailoverClient(rdb) && !opts.DurableVotes && !opts.AllowFailoverNodes {
			return nil, &ConfigError{Field: "node", Value: name, Reason: fmt.Sprintf("is a master managed by Sentinel (node %d of %d): a failover may promote a replica that lacks the lock's key; set Options.DurableVotes to make votes wait for the replicas, or Options.AllowFailoverNodes to accept that", i+1, len(nodes)), Err: ErrFailoverNode}
		}
		if size, need := poolSize(rdb), max(opts.Lanes, 1)+2; size > 0 && size < need {
			return nil, configErr("PoolSize of node "+name, size, fmt.Sprintf("is below %d: the client keeps a connection of the node busy for each of its %d lanes, one for renewals and one for a probe, and a call that finds the pool empty waits for PoolTimeout and fails; raise PoolSize or lower Options.Lanes", need, max(opts.Lanes, 1)))
		}
		ps := newNodePipes(rdb, opts.Lanes)
		ns[i] = &node{index: i, name: name, rdb: rdb, run: ps, pipes: ps}
		ns[i].durableVotes, ns[i].fsyncedVotes = opts.DurableVotes, opts.FsyncedVotes
		ps.each(func(p *pipe) {
			p.slotted = ns[i].slotted
			if opts.DurableVotes || opts.FsyncedVotes {
				// Every write of the node's pipes waits for its replicas,
				// or for its master's fsync, or both (durable.go).
				p.durable = ns[i]
			}
		})
		ns[i].stale.Store(true)
	}
	c, err := newClient(ns, opts)
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		n.rdb.AddHook(dialWatch{n})
		n.rdb.AddHook(tlsWatch{n})
		if cc, ok := n.rdb.(*redis.ClusterClient); ok {
			// Its own hooks do not run on its servers' dials: watch each
			// server's client (probeCluster watches those made before).
			cc.OnNewNode(n.watch)
		}
	}
	if opts.DeferNodeChecks {
		return c, nil
	}
	if err := c.probeAtStart(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// probeAtStart probes every node once, in parallel, when New builds the
// client, so that a set of nodes known to be wrong is refused where it is
// configured, naming the wrong node, rather than at the first acquire: a
// replica, or one server reached under two addresses. It uses the guard's
// probe but installs no guard: the first acquire still makes the first
// contact (checkIndependence), so the guard's history starts where it did.
// A node that does not answer is left to that first contact.
func (c *Client) probeAtStart() error {
	ctx, cancel := c.perNode(context.Background())
	defer cancel()
	res := make([]probeResult, len(c.nodes))
	errs := make([]error, len(c.nodes))
	c.each(func(i int, n *node) { res[i], errs[i] = c.probe(ctx, n, 0, false) })
	for i, n := range c.nodes {
		if err := replicaRefusal(n, res[i]); errs[i] == nil && err != nil {
			return err
		}
	}
	seen := make(map[string]*node)
	for i, n := range c.nodes {
		if errs[i] != nil {
			continue
		}
		for _, id := range res[i].servers {
			if other, dup := seen[id]; dup && other != n {
				return sameServerRefusal(n, other, id)
			}
			seen[id] = n
		}
	}
	return nil
}

// newClient builds a client over nodes; the quorum tests give it fakes.
func newClient(nodes []*node, opts Options) (*Client, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	c := &Client{
		opts:   opts,
		nodes:  nodes,
		clock:  opts.Clock,
		logger: opts.Logger,
	}
	c.defaultTTLArg = opts.TTL.Milliseconds()
	c.fenceLifetimeArg = max(opts.FenceLifetime, 0).Milliseconds()
	c.base = c.clock.Now()
	c.maxTTL.Store(int64(opts.TTL))
	c.minTTL.Store(int64(opts.TTL))
	c.waiters.c = c
	c.renewals.c = c
	c.bg.idle = make(chan struct{}, 1)
	return c, nil
}

// NewFromURLs builds a client from node URLs of any kind (see
// ParseNodeURL): standalone masters, Redis Clusters, Sentinel-managed
// masters. It owns the go-redis clients it creates: Close closes them, and
// go-redis' log lines about their nodes go to Options.Logger, not stderr
// (see golog.go: the first NewFromURLs installs a process-wide go-redis
// logger that routes them; a program with a go-redis logger of its own
// gives it to SetGoRedisLogger, which keeps it for every other line).
// Their connections are dialled once, not retried, and go-redis does not
// retry commands unless a URL sets max_retries: a node that refuses
// connections is reported at once, and the client's own Acquire loop does
// the retrying. (A Cluster node still follows MOVED and ASK redirects.)
func NewFromURLs(urls []string, opts Options) (*Client, error) {
	// Routed before the clients are built: their dialers mark the route,
	// and New's probe may be the first dial.
	logger, now := opts.Logger, time.Now
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock != nil {
		now = opts.Clock.Now
	}
	route := newLogRoute(logger, now)
	var clients []redis.UniversalClient
	closeAll := func() {
		for _, rdb := range clients {
			_ = rdb.Close()
		}
		route.close()
	}
	for _, u := range urls {
		n, err := parseNodeURL(u, opts.TLSConfig)
		if err != nil {
			closeAll()
			return nil, err
		}
		clients = append(clients, n.client(hasQuery(u, "max_retries"), route))
	}
	c, err := New(clients, opts)
	if err != nil {
		closeAll()
		return nil, err
	}
	c.owned, c.unrouteLog = clients, route.close
	return c, nil
}

// hasQuery tells whether a node URL sets the query option key itself: an
// explicit choice there wins over the client's defaults.
func hasQuery(raw, key string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Query().Has(key)
}

// nodeName names node i (counted from 0) in messages: a server's address,
// or, for a deployment, its kind and position (counted from 1, as in every
// message): a client of redis.NewFailoverClient reports its address as
// "FailoverClient", whichever master it is connected to.
func nodeName(rdb redis.UniversalClient, i int) string {
	switch c := rdb.(type) {
	case *redis.Client:
		if addr := c.Options().Addr; addr != failoverAddr {
			return addr
		}
		return fmt.Sprintf("%s#%d", failoverAddr, i+1)
	case *redis.ClusterClient:
		return fmt.Sprintf("ClusterClient#%d", i+1)
	}
	return fmt.Sprintf("node-%d", i)
}

// poolSize is the size of rdb's connection pool, per server for a
// deployment; 0 where it is not known (go-redis's default then applies,
// 10 per CPU for a server).
func poolSize(rdb redis.UniversalClient) int {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().PoolSize
	case *redis.ClusterClient:
		return c.Options().PoolSize
	}
	return 0
}

// failoverAddr is the address go-redis gives the clients of
// redis.NewFailoverClient: the master is found through Sentinel at dial.
const failoverAddr = "FailoverClient"

// isFailoverClient tells whether rdb is a client of redis.NewFailoverClient.
func isFailoverClient(rdb redis.UniversalClient) bool {
	c, ok := rdb.(*redis.Client)
	return ok && c.Options().Addr == failoverAddr
}

func (o *Options) setDefaults() error {
	if o.TTL == 0 {
		o.TTL = defaultTTL
	}
	if o.DriftFactor == 0 {
		o.DriftFactor = defaultDriftFactor
	}
	if o.DriftFactor < 0 || o.DriftFactor >= 1 {
		return configErr("DriftFactor", o.DriftFactor, "must be in [0, 1)")
	}
	if o.RetryDelayMin == 0 {
		o.RetryDelayMin = defaultRetryDelayMin
	}
	if o.RetryDelayMax == 0 {
		o.RetryDelayMax = max(defaultRetryDelayMax, o.RetryDelayMin)
	}
	switch {
	case o.RetryDelayMin < 0:
		return configErr("RetryDelayMin", o.RetryDelayMin, "must not be negative")
	case o.RetryDelayMax < o.RetryDelayMin:
		return configErr("RetryDelayMax", o.RetryDelayMax, "must not be below RetryDelayMin "+o.RetryDelayMin.String())
	case o.NodeTimeout < 0:
		return configErr("NodeTimeout", o.NodeTimeout, "must not be negative")
	case o.MaxWait < 0:
		return configErr("MaxWait", o.MaxWait, "must not be negative")
	case o.UnreachableTimeout < noUnreachableTimeout:
		return configErr("UnreachableTimeout", o.UnreachableTimeout, "must be -1 (no bound), 0 or positive")
	case o.RestartGrace < NoRestartGrace:
		return configErr("RestartGrace", o.RestartGrace, "must be NoRestartGrace, 0 or positive")
	case o.ClockJumpThreshold < noClockGuard:
		return configErr("ClockJumpThreshold", o.ClockJumpThreshold, "must be -1 (guard off), 0 or positive")
	case o.FenceLifetime < noFenceExpiry:
		return configErr("FenceLifetime", o.FenceLifetime, "must be -1 (no expiry), 0 or positive")
	case o.Lanes < 0 || o.Lanes > maxLanes:
		return configErr("Lanes", o.Lanes, fmt.Sprintf("must be between 1 and %d (0 for the default, 1)", maxLanes))
	case o.FenceLifetime > 0 && o.FenceLifetime < time.Hour:
		return configErr("FenceLifetime", o.FenceLifetime, "must be at least 1h: tokens rely on client clocks agreeing within it")
	}
	if o.FenceLifetime == 0 {
		o.FenceLifetime = defaultFenceLifetime
	}
	if o.UnreachableTimeout == 0 {
		o.UnreachableTimeout = defaultUnreachableTimeout
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultKeyPrefix
	}
	if why := emptyTagReason(o.KeyPrefix, "name"); why != "" {
		return configErr("KeyPrefix", fmt.Sprintf("%q", o.KeyPrefix), why)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.AllowEvictingNodes && o.RestartGrace == 0 {
		return configErr("RestartGrace", o.RestartGrace, "must be set, to at least the largest TTL any client uses on these nodes, with AllowEvictingNodes: "+
			"the grace is otherwise learned from a register on the nodes, which an eviction may take with the lock keys on every node at once")
	}
	if _, err := o.nodeTimeout(o.TTL, "TTL"); err != nil {
		return err
	}
	return nil
}

// nodeTimeout checks ttl and returns the per-node timeout to use with it.
func (o *Options) nodeTimeout(ttl time.Duration, field string) (time.Duration, error) {
	if ttl < minLockTTL {
		return 0, configErr(field, ttl, fmt.Sprintf("is below the minimum TTL of %v: the drift allowance and the nodes' round trips would leave a lock too little validity to be taken, even on localhost", minLockTTL))
	}
	if o.AllowEvictingNodes && o.RestartGrace > 0 && ttl > o.RestartGrace {
		return 0, configErr(field, ttl, fmt.Sprintf("is above RestartGrace %v: with AllowEvictingNodes the grace after an eviction is RestartGrace alone, so no lock may outlive it", o.RestartGrace))
	}
	if d := driftAllowance(ttl, o.DriftFactor); d >= ttl {
		return 0, configErr(field, ttl, fmt.Sprintf("leaves no validity: the drift allowance alone is %v", d))
	}
	if o.NodeTimeout == 0 && o.FsyncedVotes {
		// A vote waits for an everysec fsync, up to a second, after the
		// fsync of any write it queued behind.
		return min(fsyncedNodeTimeout, ttl/3), nil
	}
	if o.NodeTimeout == 0 {
		return min(defaultNodeTimeout, ttl/10), nil // at least minNodeTimeout, as ttl >= minLockTTL
	}
	if o.NodeTimeout < minNodeTimeout {
		return 0, configErr("NodeTimeout", o.NodeTimeout, fmt.Sprintf("is below the %v a node needs to answer over a network", minNodeTimeout))
	}
	if o.NodeTimeout >= ttl/2 {
		return 0, configErr("NodeTimeout", o.NodeTimeout, fmt.Sprintf("must be below half the %s %v", field, ttl))
	}
	return o.NodeTimeout, nil
}

// Close waits for background work (late replies, cleanups of failed
// attempts, releases) to finish, stops the release subscriptions and closes
// the go-redis clients NewFromURLs created. Locks still held are neither
// released nor extended any more: they expire after their TTL, and their
// Done closes then.
//
// Its error joins those of closing the go-redis clients, nil if none
// failed; a second Close does nothing and returns nil.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.waiters.close()
	c.renewals.close()
	c.bg.wait()
	var errs []error
	for _, rdb := range c.owned {
		errs = append(errs, rdb.Close())
	}
	if c.unrouteLog != nil {
		c.unrouteLog()
	}
	return errors.Join(errs...)
}

func (c *Client) quorum() int { return len(c.nodes)/2 + 1 }

// lockKey is the Redis key of the lock called name (Keys.Lock), on the
// hot path without the other keys.
func (c *Client) lockKey(name string) string { return c.opts.KeyPrefix + "{" + name + "}" }

// nameOf is the inverse of lockKey.
func (c *Client) nameOf(key string) (string, bool) {
	p := c.opts.KeyPrefix
	if len(key) < len(p)+3 || key[:len(p)] != p || key[len(p)] != '{' || key[len(key)-1] != '}' {
		return "", false
	}
	return key[len(p)+1 : len(key)-1], true
}

// releaseChannel is the pub/sub channel on which the releases of the lock
// called name are announced. Its hash tag puts it in the lock's cluster
// slot, and it starts with the key prefix, so one ACL channel pattern
// ("&<prefix>*") covers every lock's channel.
// A kind whose releases are announced on a channel of its own routes its
// topics there (topicRoutes).
func (c *Client) releaseChannel(name string) string {
	for _, r := range topicRoutes {
		if base, ok := strings.CutSuffix(name, r.topic); ok {
			return c.lockKey(base) + r.channel
		}
	}
	return c.lockKey(name) + releasedSuffix
}

// nameOfChannel is the inverse of releaseChannel.
func (c *Client) nameOfChannel(channel string) (string, bool) {
	for _, r := range topicRoutes {
		if key, ok := strings.CutSuffix(channel, r.channel); ok {
			name, ok := c.nameOf(key)
			return name + r.topic, ok
		}
	}
	if len(channel) < len(releasedSuffix) || channel[len(channel)-len(releasedSuffix):] != releasedSuffix {
		return "", false
	}
	return c.nameOf(channel[:len(channel)-len(releasedSuffix)])
}

// fenceKey is Keys.Fence, without the other keys.
func (c *Client) fenceKey(name string) string { return c.lockKey(name) + fenceSuffix }

// releaseTimeout bounds the wait for a node's answer to a release. It is
// longer than the node timeout: a release has no validity to protect, so
// waiting out a brief stall costs the caller little, while giving up leaves
// the key in the way of every other client for the rest of its TTL. A node
// that times out is marked down and released in the background next time.
func (c *Client) releaseTimeout() time.Duration {
	return max(c.opts.NodeTimeout, minReleaseTimeout)
}

const minReleaseTimeout = time.Second

func (c *Client) emit(e observe.Event) {
	if c.opts.Observer != nil {
		c.opts.Observer.Observe(e)
	}
}

// background counts the client's goroutines that outlive a call (late node
// replies, cleanups, extenders), so that Close can wait for them. Unlike a
// WaitGroup it allows new work to start while Close waits: a lock released
// concurrently with Close must still clean up.
type background struct {
	n       atomic.Int64
	closing atomic.Bool
	idle    chan struct{} // signalled when n drops to zero while closing
}

func (b *background) add() { b.n.Add(1) }

func (b *background) done() {
	if b.n.Add(-1) == 0 && b.closing.Load() {
		select {
		case b.idle <- struct{}{}:
		default:
		}
	}
}

// wait returns once no background work runs.
func (b *background) wait() {
	b.closing.Store(true)
	for b.n.Load() != 0 {
		<-b.idle
	}
}
