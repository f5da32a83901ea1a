package chaos

import (
	"context"
	"sync"
	"time"
)

// clientControl is how the nemesis reaches into the workload: it arms
// client pauses, and it pins a hold so the holder keeps the lock while the
// nemesis works (as long as its validity allows).
type clientControl struct {
	mu     sync.Mutex
	stalls map[int]time.Duration
	pinReq *pinRequest
	pinned int // hold number, 0 if none
	// gate, when non-nil, holds clients back before their next attempt
	// until it is closed (the workload is quiesced); parked counts the
	// clients waiting at it.
	gate   chan struct{}
	parked int
	// waiting is cancelled when the gate closes: it ends the attempts
	// of clients still waiting for the lock, so that they park too.
	waiting       context.Context
	cancelWaiting context.CancelFunc
}

// closeGate stops clients from starting new attempts and ends the
// attempts under way.
func (c *clientControl) closeGate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate == nil {
		c.gate = make(chan struct{})
	}
	if c.cancelWaiting != nil {
		c.cancelWaiting()
	}
}

// openGate lets parked clients go on.
func (c *clientControl) openGate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate != nil {
		close(c.gate)
		c.gate = nil
		c.waiting, c.cancelWaiting = nil, nil
	}
}

// attemptContext is the context for one acquisition attempt: ctx, also
// cancelled when the gate closes. Call stop when the attempt is over.
func (c *clientControl) attemptContext(ctx context.Context) (_ context.Context, stop func()) {
	c.mu.Lock()
	if c.waiting == nil {
		c.waiting, c.cancelWaiting = context.WithCancel(context.Background())
	}
	waiting := c.waiting
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(waiting, cancel)
	return ctx, func() { unhook(); cancel() }
}

// parkedClients is how many clients wait at the gate.
func (c *clientControl) parkedClients() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.parked
}

// pass is called by a client before each attempt: it returns at once
// unless the gate is closed, then when it opens or ctx ends.
func (c *clientControl) pass(ctx context.Context) {
	c.mu.Lock()
	gate := c.gate
	if gate == nil {
		c.mu.Unlock()
		return
	}
	c.parked++
	c.mu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
	}
	c.mu.Lock()
	c.parked--
	c.mu.Unlock()
}

// park counts the caller as parked until ready is closed or ctx ends (a
// late client before it exists; a nil or closed ready returns at once).
func (c *clientControl) park(ctx context.Context, ready <-chan struct{}) {
	select {
	case <-ready:
		return
	default:
	}
	c.mu.Lock()
	c.parked++
	c.mu.Unlock()
	select {
	case <-ready:
	case <-ctx.Done():
	}
	c.mu.Lock()
	c.parked--
	c.mu.Unlock()
}

type pinRequest struct {
	client  int           // or AnyClient
	since   time.Duration // only acquisitions invoked from here on
	claimed chan int      // receives the pinned hold's number
}

// armStall makes each hold of client stall for d until disarmed.
func (c *clientControl) armStall(client int, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stalls == nil {
		c.stalls = map[int]time.Duration{}
	}
	c.stalls[client] = d
}

func (c *clientControl) disarmStall(client int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.stalls, client)
}

// stallFor tells how long client must stall now (0: not armed).
func (c *clientControl) stallFor(client int) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stalls[client]
}

// requestPin asks that the next acquisition by client (or any), invoked
// at or after since, be pinned. The channel yields its hold number.
func (c *clientControl) requestPin(client int, since time.Duration) <-chan int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pinReq = &pinRequest{client: client, since: since, claimed: make(chan int, 1)}
	return c.pinReq.claimed
}

// claimPin is called by a client that just acquired: it pins this hold
// if a request matches.
func (c *clientControl) claimPin(client, hold int, invoked time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.pinReq
	if r == nil || invoked < r.since || (r.client != AnyClient && r.client != client) {
		return false
	}
	c.pinReq = nil
	c.pinned = hold
	r.claimed <- hold
	return true
}

func (c *clientControl) isPinned(hold int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pinned == hold
}

// pinnedHold is the pinned hold's number, 0 if none.
func (c *clientControl) pinnedHold() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pinned
}

// unpin lets the pinned holder go, and drops an unclaimed request.
func (c *clientControl) unpin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pinned = 0
	c.pinReq = nil
}
