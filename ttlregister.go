package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The register of the largest TTL in use (DESIGN §3, lua/ttl_register.lua).
//
// The restart grace must cover the longest lock any client may hold on a
// node, not only this client's: a client that uses 1s locks would otherwise
// let a node that restarted empty vote again after 1s, while another
// client's 30s lock still needed that node's key. Each node keeps a
// register of the largest TTL in use, which every client raises on the node
// before its acquires and extends there count. A restarted node lost its
// register, but every lock it may have forgotten was taken on a quorum of
// nodes that all had the register raised first: a client that meets a
// restarted node reads the registers of the others and makes the node sit
// out the largest TTL it finds. That learns the TTL unless every node of
// the forgotten lock's quorum restarted empty or is out of reach, which is
// more failures than a quorum tolerates.
//
// The register decays: a raise is kept for 2*registerWindow(ttl)+ttl, and a
// client relies on its raise for registerWindow(ttl) from just before it
// was sent, raising it again in the background halfway through. A lock taken
// while a raise is relied on expires before that raise can have decayed,
// with a whole window to spare for the node's clock running fast.

// ttlRegistration is what a client knows of one node's register.
type ttlRegistration struct {
	raised     time.Duration // the TTL this client raised the register to
	until      time.Time     // acquires and extends up to raised may rely on the raise until then
	refreshAt  time.Time     // raise it again in the background after this
	fleet      time.Duration // the register's value as last read
	fleetUntil time.Time     // the value read cannot have decayed before this
}

// minRegisterWindow bounds how often a client raises a node's register, so
// short TTLs do not cost a command per node every few hundred milliseconds.
const minRegisterWindow = 10 * time.Second

// registerWindow is how long a client relies on one raise to ttl.
func registerWindow(ttl time.Duration) time.Duration { return max(ttl, minRegisterWindow) }

// registerKey is the register's key on every node.
func (c *Client) registerKey() string { return c.opts.KeyPrefix + "ttl-in-use" }

// registerArgs builds the register script's command: raise to ttl (0: read).
func (c *Client) registerArgs(ttl time.Duration) []any {
	keep := 2*registerWindow(ttl) + ttl
	return ttlRegisterScript.args([]string{c.registerKey()}, ttl.Milliseconds(), keep.Milliseconds())
}

// registerCmd queues the register script in a probe's pipeline. A probe is
// rare (first contact, reconnection), so it sends the source with EVAL and
// needs no NOSCRIPT fallback.
func (c *Client) registerCmd(ctx context.Context, pipe redis.Pipeliner, ttl time.Duration) *redis.Cmd {
	args := c.registerArgs(ttl)
	args[0], args[1] = "eval", ttlRegisterScript.srcArg
	cmd := redis.NewCmd(ctx, args...)
	_ = pipe.Process(ctx, cmd)
	return cmd
}

// registerReply reads the register script's reply: the largest TTL in use.
func registerReply(v any) (time.Duration, error) {
	vals, ok := v.([]any)
	if ok && len(vals) == 1 {
		if ms, ok := vals[0].(int64); ok {
			return time.Duration(ms) * time.Millisecond, nil
		}
	}
	return 0, fmt.Errorf("redlock: unexpected reply %v from the TTL register", v)
}

// heard records a reply of n's register script sent at sent: raised is the
// TTL the call raised it to (0 if it only read it) and fleet the value it
// holds. A read keeps what an earlier raise on the same server promised.
func (c *Client) heard(n *node, sent time.Time, raised, fleet time.Duration) {
	r := &ttlRegistration{fleet: fleet, fleetUntil: sent.Add(registerWindow(fleet) + fleet)}
	if raised > 0 {
		w := registerWindow(raised)
		r.raised, r.until, r.refreshAt = raised, sent.Add(w), sent.Add(w/2)
	}
	for {
		old := n.reg.Load()
		if raised == 0 && old != nil {
			r.raised, r.until, r.refreshAt = old.raised, old.until, old.refreshAt
		}
		if n.reg.CompareAndSwap(old, r) {
			return
		}
	}
}

// forgetRegistration drops what this client raised on n: the server there
// is new and never saw it.
func (n *node) forgetRegistration() {
	for {
		old := n.reg.Load()
		if old == nil || n.reg.CompareAndSwap(old, &ttlRegistration{fleet: old.fleet, fleetUntil: old.fleetUntil}) {
			return
		}
	}
}

// registered makes sure n's register accounts for ttl before a call that
// sets our key with it there: at once from what the client raised before,
// raising it again in the background when half its window passed, or, when
// the raise is too old, with a round trip first.
func (c *Client) registered(ctx context.Context, n *node, ttl, nodeTimeout time.Duration) error {
	if n.rdb == nil {
		return nil // a test fake: no guards
	}
	now := c.clock.Now()
	if r := n.reg.Load(); r != nil && ttl <= r.raised && now.Before(r.until) {
		if now.After(r.refreshAt) && n.raising.CompareAndSwap(false, true) {
			c.bg.add()
			go func() {
				defer c.bg.done()
				defer n.raising.Store(false)
				ctx, cancel := context.WithTimeout(context.Background(), c.releaseTimeout())
				defer cancel()
				_ = c.raiseRegister(ctx, n, nodeTimeout)
			}()
		}
		return nil
	}
	return c.raiseRegister(ctx, n, nodeTimeout)
}

// raiseRegister raises n's register to the largest TTL this client uses.
func (c *Client) raiseRegister(ctx context.Context, n *node, nodeTimeout time.Duration) error {
	ttl := time.Duration(c.maxTTL.Load())
	g := n.guard.Load()
	sent := c.clock.Now()
	vals, err := n.run.run(ctx, ttlRegisterScript, c.registerArgs(ttl))
	if err != nil {
		c.failed(n, err, nodeTimeout)
		return err
	}
	if len(vals) != 1 {
		return fmt.Errorf("redlock: unexpected reply %v from the TTL register", vals)
	}
	// A raise that may have reached a server we have not probed yet proves
	// nothing about it: the probe after the reconnection raises it again.
	if n.guard.Load() == g && !n.stale.Load() {
		c.heard(n, sent, ttl, time.Duration(vals[0])*time.Millisecond)
	}
	return nil
}

// learnFleetTTL reads the registers of every node but skip, in parallel,
// so that the grace of a server we just met accounts for the locks the
// others know of. Nodes that do not answer in time keep what was read of
// them before.
func (c *Client) learnFleetTTL(ctx context.Context, skip *node) {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		if n == skip || n.rdb == nil || c.down(n) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := c.clock.Now()
			vals, err := n.run.run(ctx, ttlRegisterScript, c.registerArgs(0))
			if err == nil && len(vals) == 1 {
				c.heard(n, sent, 0, time.Duration(vals[0])*time.Millisecond)
			}
		}()
	}
	wg.Wait()
}
