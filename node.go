package redlock

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// node is one Redis master as the quorum sees it, with the guards of
// DESIGN §3: it votes only while it is known to be an independent master
// that has been up longer than the restart grace and whose clock did not
// jump.
type node struct {
	index int
	name  string // redacted address, safe to log
	run   scriptRunner
	rdb   redis.UniversalClient // nil for test fakes
	pipes *nodePipes            // the ordered streams run writes to; nil for test fakes

	// stale is set whenever go-redis dials a new connection to the node. A
	// restart always breaks every connection, so a node that restarted is
	// always stale before we talk to it again: we probe it before trusting
	// its vote.
	stale atomic.Bool

	guard atomic.Pointer[nodeGuard] // nil until the first probe

	// learning counts the probes that saw the node lose data and are
	// still reading the other nodes' TTL registers before they install its
	// new guard. That read waits up to a node timeout on a node that does
	// not answer; meanwhile the guard in force predates the loss, so no
	// vote counts on it (guardsPassAged).
	learning atomic.Int32

	// clock is the clock of a node that is one server. A Cluster node's
	// masters each keep their own, in masterClocks by address: their
	// clocks are apart, and one may jump alone. Fed into one history, the
	// replies of a jumped master and of one that did not would each look
	// like a jump against the other, and the node would sit out for ever.
	clock        nodeClock
	masterClocks sync.Map // address -> *nodeClock

	// downUntil is when the node is asked again after a failure, in
	// nanoseconds of the client's clock since Client.base; 0 if up.
	downUntil atomic.Int64

	// lastAnswer is the send of the last call the node answered, in
	// nanoseconds since Client.base: a server we meet there under a new
	// run_id started after it (dateStart).
	lastAnswer atomic.Int64

	// watched holds the per-server clients inside a *redis.ClusterClient
	// that carry dialWatch: the ClusterClient's own hooks do not run on
	// its servers' dials.
	watched sync.Map // *redis.Client -> struct{}

	// replicas is the most replicas the node's master (a node that is one
	// server, or a Sentinel's) reported connected since this client met
	// it: how many acknowledgements a durable vote needs (durable.go).
	// waitAOF: the master has WAITAOF and its AOF on, so votes wait for
	// fsyncs rather than for receipt.
	replicas atomic.Int64
	waitAOF  atomic.Bool

	// durableVotes and fsyncedVotes are Options.DurableVotes and
	// Options.FsyncedVotes: what the node's durable writes wait for.
	durableVotes, fsyncedVotes bool
	// aofView is what the last probe saw of the master's AOF (an aofView):
	// with fsyncedVotes every vote waits for a WAITAOF whatever it says;
	// it only tells whether the answer is news (durable.go, fsyncVerdict).
	aofView atomic.Uint32
	// unconfirmed counts the votes of the node that were answered without
	// a WAITAOF confirming their fsync (with fsyncedVotes only), whether
	// they counted (the master answered that its AOF is off) or failed. A
	// guard that counted the node as persistent through WAITAOF holds its
	// value from before its probe: after such a vote a restart is not
	// excused (guard.go, refresh).
	unconfirmed atomic.Int64

	tls       atomic.Pointer[nodeTLS]         // what the last connection showed of TLS (tls.go); nil before one
	reg       atomic.Pointer[ttlRegistration] // the node's register of the largest TTL in use (ttlregister.go)
	raising   atomic.Bool                     // a background raise of the register is under way
	reprobing atomic.Bool                     // a probe of a guard past guardMaxAge is under way
}

// downHoldoff is how long a failed node is left out: long enough that a
// dead node costs one node timeout now and then rather than on every
// contended attempt, short enough that a node back up is soon used again.
func downHoldoff(nodeTimeout time.Duration) time.Duration {
	return min(5*nodeTimeout, time.Second)
}

// failed records err from a call to n and marks the node down if the error
// is evidence that the node cannot be reached: the connection failed, or it
// left a call unanswered (see timedOut). A node that answered with an error
// is up; a call that waited in our own queue says nothing about the node.
func (c *Client) failed(n *node, err error, nodeTimeout time.Duration) {
	if errors.Is(err, errNotSent) {
		return
	}
	var netErr net.Error
	switch {
	case isTimeout(err):
		c.timedOut(n, nodeTimeout)
	case errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		c.markDown(n, nodeTimeout)
	}
}

// timedOut marks n down after a call to it got no answer within the node
// timeout, if the node is to blame: it left a write unanswered for at least
// half that time while another node answered a write sent after it. A
// client starved of CPU, or whose own link is cut, sees every node late at
// once, and that is no reason to stop asking any of them.
func (c *Client) timedOut(n *node, nodeTimeout time.Duration) {
	if n.pipes == nil { // a test fake: no evidence to weigh
		c.markDown(n, nodeTimeout)
		return
	}
	since := n.pipes.stuckSince()
	if since == 0 || sinceEpoch()-time.Duration(since) < nodeTimeout/2 {
		return // it answered meanwhile, or had little time
	}
	for _, m := range c.nodes {
		if m != n && m.pipes != nil && m.pipes.lastAnswered() > since {
			c.markDown(n, nodeTimeout)
			return
		}
	}
}

// markDown leaves n out for the down hold-off, unless that would leave
// fewer than a quorum of nodes up: with that many nodes failing at once the
// fault is more likely ours, and a node left out could cost every extension
// its quorum.
func (c *Client) markDown(n *node, nodeTimeout time.Duration) {
	up := 0
	for _, m := range c.nodes {
		if m != n && !c.down(m) {
			up++
		}
	}
	if up < c.quorum() && !c.down(n) {
		return
	}
	n.downUntil.Store(int64(c.clock.Now().Sub(c.base) + downHoldoff(nodeTimeout)))
}

// dialWatch is a go-redis hook that marks the node stale on every new
// connection. It works on clients the user built too, unlike OnConnect.
type dialWatch struct{ n *node }

func (h dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err == nil {
			h.n.stale.Store(true)
		}
		return conn, err
	}
}

func (dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// serverWatch is dialWatch for one server of a Cluster node, which also
// marks the node stale when a script ran on a server that was not among
// its masters at the last probe. After a failover the ClusterClient
// follows MOVED to the promoted replica, often on a connection it already
// had (it reads the cluster's layout from replicas too): no dial shows the
// new master, but the reply came from it, and the recheck after every
// reply probes the node again before its vote counts.
type serverWatch struct {
	dialWatch
	addr string
}

func (h serverWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.ran(cmd)
		return err
	}
}

func (h serverWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.ran(cmd)
		}
		return err
	}
}

// ran marks the node stale if cmd was a script and this server is not one
// of the masters the node's guard knows, or did not serve the slot of the
// script's keys at the last probe: a slot moved to a master the guard
// knew (a reshard) may have come without its keys.
func (h serverWatch) ran(cmd redis.Cmder) {
	switch cmd.Name() {
	case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall":
	default:
		return
	}
	g := h.n.guard.Load()
	if g == nil {
		return
	}
	sh := g.shard(h.addr)
	if sh == nil {
		h.n.stale.Store(true)
		return
	}
	// Not judged by the reply: in a ClusterClient's pipeline the hook runs
	// before the replies are read, and a MOVED reply only costs a probe.
	if key := scriptKey(cmd.Args()); key != "" && !sh.serves(keySlot(key)) {
		h.n.stale.Store(true)
	}
}

// scriptKey is the first key of a script command built by script.args (or
// in its layout): the lock's keys share its hash slot, which a Cluster
// node's guard follows. "" if there is none.
func scriptKey(args []any) string {
	if len(args) > 3 {
		if k, ok := args[3].(string); ok {
			return k
		}
	}
	return ""
}

// slotted tells whether the keys of one script call to n must share a hash
// slot: n is a Redis Cluster, through a ClusterClient or as one server in
// cluster mode (CROSSSLOT otherwise).
func (n *node) slotted() bool {
	if _, ok := n.rdb.(*redis.ClusterClient); ok {
		return true
	}
	g := n.guard.Load()
	return g != nil && g.cluster != nil
}

// down tells whether n is in its hold-off after a failure.
func (c *Client) down(n *node) bool {
	until := n.downUntil.Load()
	return until != 0 && int64(c.clock.Now().Sub(c.base)) < until
}

// watch makes the node stale whenever m, one server of a Cluster node,
// dials a new connection, as dialWatch does for a node that is one server.
func (n *node) watch(m *redis.Client) {
	if _, seen := n.watched.LoadOrStore(m, struct{}{}); !seen {
		m.AddHook(serverWatch{dialWatch{n}, m.Options().Addr})
	}
}
