package redlock

import (
	"context"
	"crypto/rand"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ownerValueLen is the length of rand.Text: 26 base32 characters, 130 bits.
const ownerValueLen = 26

// ownerValue makes the random value that marks our keys, new for every
// attempt (DESIGN §1): a retry never reuses the value being cleaned up.
func (c *Client) ownerValue() string { return rand.Text() }

// waiters wakes blocked Acquire calls when a lock they wait for is released.
//
// Releases are announced on one pub/sub channel per key prefix, from inside
// the release script. The client subscribes once per node, lazily, when the
// first Acquire has to wait, and shares that subscription among all locks.
// A release by this client wakes its local waiters directly, with no round
// trip. Each release wakes one waiter of the lock per client: the others
// would only compete for it and split the votes.
type waiters struct {
	c       *Client
	mu      sync.Mutex
	queues  map[string]*waitQueue
	subs    []*redis.PubSub
	started bool
	closed  bool
	ready   chan struct{} // closed once a node confirmed the subscription
}

// waiter is one blocked Acquire. It is woken with true for a release by
// this client, false for one announced by another.
type waiter struct{ ch chan bool }

type waitQueue struct {
	list []*waiter
	last string // owner value of the last release that woke a waiter
}

// add registers a waiter for name. The first waiter subscribes; every
// waiter then waits (up to timeout) until a node confirmed the
// subscription, so that a release published afterwards reaches it.
func (w *waiters) add(ctx context.Context, name string, timeout time.Duration) *waiter {
	wt := &waiter{ch: make(chan bool, 1)}
	w.mu.Lock()
	if !w.started && !w.closed {
		w.started = true
		w.ready = make(chan struct{})
		w.subscribe()
	}
	ready := w.ready
	w.register(name, wt)
	w.mu.Unlock()
	if ready != nil {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select { // without a confirmation, the retries still find the lock free
		case <-ready:
		case <-timer.C:
		case <-ctx.Done():
		}
	}
	return wt
}

func (w *waiters) register(name string, wt *waiter) {
	if w.queues == nil {
		w.queues = make(map[string]*waitQueue)
	}
	q := w.queues[name]
	if q == nil {
		q = &waitQueue{}
		w.queues[name] = q
	}
	q.list = append(q.list, wt)
}

func (w *waiters) remove(name string, wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queues[name]
	if q == nil {
		return
	}
	for i, x := range q.list {
		if x == wt {
			q.list = append(q.list[:i], q.list[i+1:]...)
			break
		}
	}
	if len(q.list) == 0 {
		delete(w.queues, name)
	}
}

// notify wakes one waiter of name for the release of the owner value. The
// same release comes from every node (and from ourselves first, if we held
// it): only the first copy wakes anyone. The woken waiter goes to the back,
// so waiters take turns.
func (w *waiters) notify(name, value string, local bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queues[name]
	if q == nil || q.last == value {
		return
	}
	q.last = value
	for i, wt := range q.list {
		select {
		case wt.ch <- local:
			q.list = append(append(q.list[:i:i], q.list[i+1:]...), wt)
			return
		default: // already woken, not yet back to waiting
		}
	}
}

// subscribe starts one subscription per node.
func (w *waiters) subscribe() {
	var confirmed sync.Once
	for _, n := range w.c.nodes {
		if n.rdb == nil {
			continue
		}
		ps := n.rdb.Subscribe(context.Background(), w.c.channel)
		w.subs = append(w.subs, ps)
		w.c.bg.add()
		go func() {
			defer w.c.bg.done()
			// The first reply is the confirmation; go-redis resubscribes
			// by itself after a reconnection.
			if _, err := ps.Receive(context.Background()); err != nil {
				return // closed
			}
			confirmed.Do(func() { close(w.ready) })
			for msg := range ps.Channel() {
				if name, ok := w.c.nameOf(msg.Payload[min(ownerValueLen, len(msg.Payload)):]); ok {
					w.notify(name, msg.Payload[:ownerValueLen], false)
				}
			}
		}()
	}
}

func (w *waiters) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, ps := range w.subs {
		_ = ps.Close()
	}
	w.subs = nil
}
