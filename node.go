package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
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

	// stale is set whenever go-redis dials a new connection to the node. A
	// restart always breaks every connection, so a node that restarted is
	// always stale before we talk to it again: we probe it before trusting
	// its vote.
	stale atomic.Bool

	guard atomic.Pointer[nodeGuard] // nil until the first probe
	clock nodeClock

	// downUntil is when the node is asked again after a failure, in
	// nanoseconds of the client's clock since Client.base; 0 if up.
	downUntil atomic.Int64
}

// downHoldoff is how long a failed node is left out: long enough that a
// dead node costs one node timeout now and then rather than on every
// contended attempt, short enough that a node back up is soon used again.
func downHoldoff(nodeTimeout time.Duration) time.Duration {
	return min(5*nodeTimeout, time.Second)
}

// failed records err from a call to n and marks the node down if the error
// says the node could not be reached (network error, no answer in time),
// rather than that it answered.
func (c *Client) failed(n *node, err error, nodeTimeout time.Duration) {
	var netErr net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		n.downUntil.Store(int64(c.clock.Now().Sub(c.base) + downHoldoff(nodeTimeout)))
	}
}

// nodeGuard is what the last probe learned, plus sit-outs decided since.
// It is replaced, never changed, so the hot path reads it without locking.
type nodeGuard struct {
	runID    string
	role     string
	upSince  time.Time // our clock when the server started
	sitOut   time.Time // no vote before this instant (clock jump)
	reason   string    // why it sits out, for reports
	excluded error     // permanent: replica or duplicate (ErrNotIndependent)
}

// voteErr tells why the node's vote does not count at now, or nil.
func (g *nodeGuard) voteErr(now time.Time, grace time.Duration) error {
	switch {
	case g.excluded != nil:
		return g.excluded
	case now.Before(g.sitOut):
		return fmt.Errorf("%w: %s", ErrNodeSittingOut, g.reason)
	case now.Before(g.upSince.Add(grace)):
		return fmt.Errorf("%w: restarted %v ago, votes again after the %v restart grace",
			ErrNodeSittingOut, now.Sub(g.upSince).Round(time.Second), grace)
	}
	return nil
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

// probeResult is what one probe round trip tells about a node.
type probeResult struct {
	runID       string
	role        string
	uptime      time.Duration
	appendOnly  bool
	appendFsync string
	nodeTime    time.Time
	sent, recv  time.Time
}

// probe asks the node who it is, how long it has been up, its role and its
// time, in one pipelined round trip. With full it also reads persistence
// settings (for reports, not for votes).
func probe(ctx context.Context, rdb redis.UniversalClient, clock Clock, full bool) (probeResult, error) {
	var res probeResult
	sections := []string{"server", "replication"}
	if full {
		sections = append(sections, "persistence")
	}
	pipe := rdb.Pipeline()
	info := pipe.Info(ctx, sections...)
	tm := pipe.Time(ctx)
	var fsync *redis.MapStringStringCmd
	if full {
		fsync = pipe.ConfigGet(ctx, "appendfsync")
	}
	res.sent = clock.Now()
	_, err := pipe.Exec(ctx)
	res.recv = clock.Now()
	if info.Err() != nil {
		return res, info.Err()
	}
	if tm.Err() != nil {
		return res, tm.Err()
	}
	if err != nil && (fsync == nil || !errors.Is(err, fsync.Err())) {
		return res, err
	}
	fields := parseInfo(info.Val())
	res.runID = fields["run_id"]
	res.role = fields["role"]
	secs, err := strconv.ParseInt(fields["uptime_in_seconds"], 10, 64)
	if res.runID == "" || res.role == "" || err != nil {
		return res, fmt.Errorf("redlock: node did not report run_id, role and uptime in INFO")
	}
	res.uptime = time.Duration(secs) * time.Second
	res.nodeTime = tm.Val()
	res.appendOnly = fields["aof_enabled"] == "1"
	if fsync != nil && fsync.Err() == nil {
		res.appendFsync = fsync.Val()["appendfsync"]
	}
	return res, nil
}

func parseInfo(s string) map[string]string {
	fields := make(map[string]string)
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && !strings.HasPrefix(k, "#") {
			fields[k] = v
		}
	}
	return fields
}

// refresh probes n and installs its new guard. It reports a restart (a new
// run_id) and refuses replicas and servers already reached through another
// node.
func (c *Client) refresh(ctx context.Context, n *node) (probeResult, error) {
	n.stale.Store(false)
	res, err := probe(ctx, n.rdb, c.clock, false)
	if err != nil {
		n.stale.Store(true) // try again next time
		return res, err
	}
	c.observeClock(n, res.nodeTime, res.sent, res.recv)

	c.guardMu.Lock()
	defer c.guardMu.Unlock()
	old := n.guard.Load()
	g := &nodeGuard{runID: res.runID, role: res.role, upSince: res.recv.Add(-res.uptime)}
	if old != nil {
		g.sitOut, g.reason = old.sitOut, old.reason
		if old.runID != res.runID {
			c.logger.Warn("redlock: node restarted", "node", n.name, "uptime", res.uptime)
			c.emit(Event{Kind: EventNodeRestarted, Node: n.name})
		}
	}
	if res.role != "master" {
		g.excluded = &ConfigError{Field: "node", Value: n.name,
			Reason: "is a " + res.role + ", not a master", Err: ErrNotIndependent}
	}
	for _, other := range c.nodes {
		if og := other.guard.Load(); other != n && og != nil && og.runID == res.runID && og.excluded == nil {
			g.excluded = &ConfigError{Field: "node", Value: n.name,
				Reason: "is the same server as node " + other.name + " (same run_id)", Err: ErrNotIndependent}
		}
	}
	if g.excluded != nil && (old == nil || old.excluded == nil) {
		c.logger.Error("redlock: node refused", "node", n.name, "err", g.excluded)
	}
	n.guard.Store(g)
	return res, nil
}

// observeClock feeds a node time sample to the clock-jump guard and sends
// the node to sit out for one restart grace if its clock jumped.
func (c *Client) observeClock(n *node, nodeTime, sent, recv time.Time) bool {
	threshold := c.opts.ClockJumpThreshold
	if threshold < 0 {
		return false
	}
	if threshold == 0 {
		threshold = driftAllowance(time.Duration(c.maxTTL.Load()), c.opts.DriftFactor)
	}
	jump, jumped := n.clock.observe(nodeTime, sent, recv, c.base, threshold)
	if !jumped {
		return false
	}
	hold := c.graceFor()
	if hold <= 0 {
		hold = time.Duration(c.maxTTL.Load())
	}
	reason := fmt.Sprintf("clock jumped by %v against ours; sits out until %v", jump.Round(time.Microsecond), hold)
	c.logger.Warn("redlock: node clock jumped", "node", n.name, "jump", jump, "sitOut", hold)
	c.emit(Event{Kind: EventNodeSitOut, Node: n.name, Err: fmt.Errorf("%w: %s", ErrNodeSittingOut, reason)})

	c.guardMu.Lock()
	defer c.guardMu.Unlock()
	g := &nodeGuard{}
	if old := n.guard.Load(); old != nil {
		*g = *old
	}
	g.sitOut = recv.Add(hold)
	g.reason = fmt.Sprintf("clock jumped by %v", jump.Round(time.Microsecond))
	n.guard.Store(g)
	return true
}

// graceFor is the restart grace in force: the option, but never less than
// the largest TTL this client has used (a node that restarted empty must
// not vote while a lock it forgot may still be valid).
func (c *Client) graceFor() time.Duration {
	if c.opts.RestartGrace < 0 {
		return 0
	}
	return max(c.opts.RestartGrace, time.Duration(c.maxTTL.Load()))
}

// recheck runs after a node answered, with the node's TIME from the reply:
// if the node's clock jumped, or go-redis opened a new connection during
// the call (it retries on a broken one, and the server may have restarted
// empty), the vote must pass the guards again.
func (c *Client) recheck(ctx context.Context, n *node, sec, usec int64, sent, recv time.Time) error {
	if n.rdb == nil {
		return nil
	}
	if c.observeClock(n, time.Unix(sec, usec*1000), sent, recv) || n.stale.Load() {
		return c.ready(ctx, n)
	}
	return nil
}

// down tells whether n is in its hold-off after a failure.
func (c *Client) down(n *node) bool {
	until := n.downUntil.Load()
	return until != 0 && int64(c.clock.Now().Sub(c.base)) < until
}

// ready makes sure n has been probed since its last new connection and
// tells whether its vote counts now.
func (c *Client) ready(ctx context.Context, n *node) error {
	if c.down(n) {
		return ErrNodeDown
	}
	if n.rdb != nil && (n.stale.Load() || n.guard.Load() == nil) {
		if _, err := c.refresh(ctx, n); err != nil {
			return err
		}
	}
	g := n.guard.Load()
	if g == nil {
		return nil // a test fake without guard
	}
	return g.voteErr(c.clock.Now(), c.graceFor())
}
