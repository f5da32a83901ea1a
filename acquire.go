package redlock

// The acquire loop, apart from the Client and its Options (redlock.go):
// a lock's options, TryAcquire, Acquire and Do, the wait every kind of
// lock shares (a kind may bring its own strategy: kind.go), and one
// attempt with its decision, fencing and validity.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlabs/redlock/observe"
)

// LockOption adjusts one lock.
type LockOption func(*lockConfig)

type lockConfig struct {
	ttl           time.Duration
	maxWait       time.Duration
	autoExtend    bool
	leanRenewal   bool     // WithLeanRenewal
	maxExtensions int      // 0: no bound
	metadata      string   // WithMetadata, "" if none
	kind          lockKind // what kind of lock: mutexKind unless an option or a primitive sets another
}

// WithTTL sets this lock's TTL instead of Options.TTL.
func WithTTL(ttl time.Duration) LockOption { return func(lc *lockConfig) { lc.ttl = ttl } }

// WithMaxWait bounds how long Acquire waits, instead of Options.MaxWait;
// the error then matches ErrMaxWait.
func WithMaxWait(d time.Duration) LockOption { return func(lc *lockConfig) { lc.maxWait = d } }

// WithAutoExtend keeps the lock extended in the background, every third of
// its validity, until it is released or lost; Done tells of a loss at once.
func WithAutoExtend() LockOption { return func(lc *lockConfig) { lc.autoExtend = true } }

// WithLeanRenewal auto-extends, as WithAutoExtend, but renews once two
// thirds of the remaining validity have passed instead of one third: half
// the renewals, so half what held locks cost the nodes and the client
// (renewals by the ten thousand), at the price of the margin. With a third
// of the validity left when a renewal goes out there is room for one more
// try before the lock expires, not two; a renewal that cannot make it in
// time loses the lock, and Done tells of it, as always. The guarantee is
// the same: no renewal is counted past the validity it was sent in.
func WithLeanRenewal() LockOption {
	return func(lc *lockConfig) { lc.autoExtend, lc.leanRenewal = true, true }
}

// WithMaxExtensions auto-extends at most n times; after that the lock
// expires at the end of its validity and Done closes.
func WithMaxExtensions(n int) LockOption {
	return func(lc *lockConfig) { lc.autoExtend, lc.maxExtensions = true, n }
}

// applyLockOptions is apart from params so that only calls with options pay
// for the config escaping to the heap.
func applyLockOptions(lc lockConfig, opts []LockOption) lockConfig {
	for _, o := range opts {
		o(&lc)
	}
	return lc
}

// params checks a lock request and gives its settings and node timeout.
func (c *Client) params(name string, opts []LockOption) (lockConfig, time.Duration, error) {
	lc := lockConfig{ttl: c.opts.TTL, maxWait: c.opts.MaxWait, kind: mutexKind}
	if len(opts) > 0 {
		lc = applyLockOptions(lc, opts)
	}
	if name == "" {
		return lc, 0, configErr("lock name", `""`, "must not be empty")
	}
	if len(name) > maxNameLen {
		return lc, 0, configErr("lock name", fmt.Sprintf("%.20q... (%d bytes)", name, len(name)), fmt.Sprintf("is longer than %d bytes", maxNameLen))
	}
	if why := emptyTagReason(c.opts.KeyPrefix, name); why != "" {
		return lc, 0, configErr("lock name", fmt.Sprintf("%q", name), why)
	}
	if lc.maxWait < 0 {
		return lc, 0, configErr("MaxWait", lc.maxWait, "must not be negative")
	}
	if lc.maxExtensions < 0 {
		return lc, 0, configErr("MaxExtensions", lc.maxExtensions, "must not be negative")
	}
	if lc.metadata != "" {
		if err := checkMetadata(lc.metadata); err != nil {
			return lc, 0, err
		}
	}
	if c.closed.Load() {
		return lc, 0, configErr("client", "", "is closed")
	}
	timeout, err := c.opts.nodeTimeout(lc.ttl, "TTL")
	return lc, timeout, err
}

// TryAcquire makes one attempt at the lock. It fails with an error matching
// ErrLocked if another owner holds it, ErrNoQuorum if too many nodes failed,
// ErrValidityTooShort if the attempt took too long to leave any validity.
// On failure no key of the attempt stays behind: it is deleted on every
// node, in the background for nodes that have not answered yet. If ctx
// carries this client's lock of the same name (ContextWithLock), it returns
// a nested handle of it instead.
func (c *Client) TryAcquire(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return c.takeLock(ctx, name, opts, false)
}

// takeLock is TryAcquire, and Acquire if wait: the options checked, then a
// nested handle if ctx carries this client's lock of name, or else the
// lock taken in one attempt or waited for.
func (c *Client) takeLock(ctx context.Context, name string, opts []LockOption, wait bool) (*Lock, error) {
	lc, timeout, err := c.params(name, opts)
	if err != nil {
		return nil, err
	}
	if l, ok, err := c.reenter(ctx, name); ok {
		return l, err
	}
	if wait {
		return c.acquire(ctx, name, lc, timeout)
	}
	return c.tryOnce(ctx, name, lc, timeout)
}

// tryOnce makes one attempt at a lock of any kind, as the kind tries
// (lockKind.waiting).
func (c *Client) tryOnce(ctx context.Context, name string, lc lockConfig, timeout time.Duration) (*Lock, error) {
	s, err := lc.kind.waiting(ctx, c, name, lc, timeout, false)
	if err != nil {
		return nil, err
	}
	if s == nil { // the plain wait tries once as any attempt does
		l, _, err := c.attemptLock(ctx, name, lc, timeout)
		return l, err
	}
	l, _, err := s.try(ctx)
	return s.stop(ctx, l, err)
}

// Acquire waits for the lock until it is acquired, ctx is done or MaxWait
// passes. A waiter is woken as soon as the holder releases (the client
// listens to the lock's own release channel while it waits); jittered
// retries cover lost wake-ups. When it gives up, the error matches both the
// context's error and the last attempt's (ErrLocked, say). If ctx carries
// this client's lock of the same name (ContextWithLock), it returns a nested
// handle of it at once: the options then do not apply.
func (c *Client) Acquire(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	return c.takeLock(ctx, name, opts, true)
}

// acquire waits for a lock of any kind (lc.kind), timed for an
// Observer's observe.Waited.
func (c *Client) acquire(ctx context.Context, name string, lc lockConfig, timeout time.Duration) (*Lock, error) {
	if c.opts.Observer == nil {
		return c.waitFor(ctx, name, lc, timeout)
	}
	start := c.clock.Now()
	l, err := c.waitFor(ctx, name, lc, timeout)
	e := observe.Event{Kind: observe.Waited, Name: name, Elapsed: c.clock.Now().Sub(start), Err: err, Context: ctx}
	if l != nil {
		e.Token = l.token
	}
	c.emit(e)
	return l, err
}

// waitFor is Acquire's waiting loop, the same for every kind: attempts,
// as the kind tries and waits between them (lockKind.waiting), until one
// wins, ctx is done or an error no retry can cure. It tells the caller what
// it waits for when that is not the holder (waitReport), and ends a wait
// with no bound of its own on nodes that stay unreachable.
func (c *Client) waitFor(ctx context.Context, name string, lc lockConfig, timeout time.Duration) (*Lock, error) {
	_, deadline := ctx.Deadline()
	report := waitReport{c: c, name: name, unbounded: !deadline && lc.maxWait == 0, graceUntil: &c.graceToldUntil}
	if lc.maxWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = withMaxWait(ctx, lc.maxWait)
		defer cancel()
	}
	s, err := lc.kind.waiting(ctx, c, name, lc, timeout, true)
	if err != nil {
		return nil, err
	}
	var plain retrying // the plain wait, on this frame
	if s == nil {
		plain = c.retrying(name, lc, timeout)
	}
	// Through the kind's strategy, or the plain wait's methods called
	// directly: a value in an interface would be one allocation more per
	// Acquire.
	try := func() (*Lock, attemptInfo, error) {
		if s != nil {
			return s.try(ctx)
		}
		return plain.try(ctx)
	}
	pause := func(err error, info attemptInfo) {
		if s != nil {
			s.pause(ctx, err, info)
		} else {
			plain.pause(ctx, err, info)
		}
	}
	stop := func(l *Lock, err error) (*Lock, error) {
		if s != nil {
			return s.stop(ctx, l, err)
		}
		return plain.stop(ctx, l, err)
	}
	var last error // the last attempt's failure, for the caller to see when we give up
	gaveUp := func() error {
		if last == nil {
			return fmt.Errorf("redlock: acquire %q: %w", name, waitErr(ctx))
		}
		return fmt.Errorf("redlock: acquire %q: gave up waiting: %w: %w", name, waitErr(ctx), last)
	}
	for {
		l, info, err := try()
		switch {
		case err == nil:
			return stop(l, nil)
		case ctx.Err() != nil:
			return stop(nil, gaveUp())
		case !retryable(err):
			return stop(nil, err)
		}
		if err := report.failed(err); err != nil {
			return stop(nil, err)
		}
		last = err
		if pause(err, info); ctx.Err() != nil {
			return stop(nil, gaveUp())
		}
	}
}

// retrying is the plain wait: after a failed attempt, it subscribes to the
// lock's releases and tries again at once (a release that comes after that
// attempt cannot be missed); then it waits for a release, or a jittered,
// doubling backoff, between attempts.
type retrying struct {
	c       *Client
	name    string
	lc      lockConfig
	timeout time.Duration
	topic   string // what the lock's releases are announced under (see waiters)
	wake    *waiter
	backoff time.Duration
}

func (c *Client) retrying(name string, lc lockConfig, timeout time.Duration) retrying {
	return retrying{c: c, name: name, lc: lc, timeout: timeout, topic: topicOf(lc.kind, name), backoff: c.opts.RetryDelayMin}
}

func (r *retrying) try(ctx context.Context) (*Lock, attemptInfo, error) {
	if r.wake != nil {
		r.c.waiters.attempting(r.topic, r.wake)
	}
	return r.c.attemptLock(ctx, r.name, r.lc, r.timeout)
}

func (r *retrying) stop(_ context.Context, l *Lock, err error) (*Lock, error) {
	if r.wake != nil {
		r.c.waiters.remove(r.topic, r.wake)
	}
	return l, err
}

func (r *retrying) pause(ctx context.Context, err error, info attemptInfo) {
	c := r.c
	if r.wake == nil {
		// Subscribe, then try again at once: a release that comes
		// after that attempt cannot be missed.
		r.wake = c.waiters.add(ctx, r.topic, r.timeout)
		return
	}
	// Contenders that reach the nodes at the same moment can split the
	// votes so that nobody wins. Spread their next attempts over a few
	// of our round trips: the first to go usually wins alone.
	spread := min(max(4*info.elapsed, 100*time.Microsecond), c.opts.RetryDelayMin)
	var delay time.Duration
	if info.split {
		delay = info.elapsed + rand.N(2*spread) // the split keys are being deleted meanwhile
	} else {
		delay = jitter(r.backoff)
		r.backoff = min(2*r.backoff, c.opts.RetryDelayMax)
		var locked *LockedError
		if errors.As(err, &locked) && locked.Remaining > 0 && locked.Remaining < delay {
			delay = locked.Remaining + jitter(c.opts.RetryDelayMin)
		}
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case local := <-r.wake.ch:
		// A release by this client wakes one of its waiters alone;
		// one announced by pub/sub wakes a waiter in every client.
		if !local {
			timer.Reset(rand.N(spread))
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
		}
	case <-timer.C:
	}
}

// jitter spreads retries of competing clients over [d/2, d).
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// attemptLock is one try: the parallel acquire, the decision, fencing and
// the validity check (DESIGN §1, §2), for a lock of any kind: the kind
// makes the attempt's commands, counts its replies and names its refusals.
func (c *Client) attemptLock(ctx context.Context, name string, lc lockConfig, nodeTimeout time.Duration) (*Lock, attemptInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, attemptInfo{}, fmt.Errorf("redlock: acquire %q: %w", name, err)
	}
	c.noteTTL(lc.ttl)
	if err := c.checkIndependence(ctx, nodeTimeout); err != nil {
		return nil, attemptInfo{}, err
	}
	if err := c.slotsServed(name); err != nil {
		return nil, attemptInfo{}, err
	}
	a := lc.kind.attempt(c, name, lc.ttl)
	if lc.metadata != "" {
		a.attachMetadata(lc.metadata)
	}
	a.nodeTimeout = nodeTimeout
	// The node calls must outlive a cancelled caller.
	a.calls.start(ctx, nodeTimeout, len(c.nodes))
	start := c.clock.Now()
	for i, n := range c.nodes {
		a.state[i].Store(nodeCall) // counted before the call starts: a release must wait for it
		c.bg.add()
		go a.acquireOn(n)
	}
	d, err := a.decide(ctx, start)
	if d.maxFence > 0 {
		c.noteToken(d.maxFence)
	}
	info := attemptInfo{elapsed: c.clock.Now().Sub(start), split: !d.won && d.winners > 0}
	if err != nil {
		a.abandon()
		err = fmt.Errorf("redlock: acquire %q: %w", name, err)
		c.emit(observe.Event{Kind: observe.AcquireFailed, Name: name, Elapsed: info.elapsed, Err: err, Context: ctx, Nodes: d.nodes})
		return nil, info, err
	}
	if d.won {
		// A node's first probe may have finished after the decision.
		if err := c.lockable(name); err != nil {
			d.won, d.errs = false, multierror.Append(d.errs, err)
		}
	}
	if !d.won {
		// Before the cleanup, which reads the same replies: the error
		// depends on the answers still to come (see refusal).
		a.settle(ctx, &d)
		a.abandon()
		err := a.kind.refused(a, d, c.refusal(a, d))
		c.emit(observe.Event{Kind: observe.AcquireFailed, Name: name, Elapsed: info.elapsed, Err: err, Context: ctx, Nodes: d.nodes})
		return nil, info, err
	}

	a.kind.won(a, d) // the keys won, for the fencing slow path, extend and release
	var token int64
	if !c.opts.DisableFencing {
		if token, err = a.token(d); err != nil {
			a.abandon()
			c.emit(observe.Event{Kind: observe.AcquireFailed, Name: name, Elapsed: c.clock.Now().Sub(start), Err: err, Context: ctx, Nodes: d.nodes})
			return nil, info, err
		}
		c.noteToken(token)
	}

	decided := c.clock.Now()
	elapsed := decided.Sub(start)
	valid := validity(lc.ttl, elapsed, c.opts.DriftFactor)
	if valid <= 0 {
		a.abandon()
		err := fmt.Errorf("%w: acquiring %q took %v of its %v TTL", ErrValidityTooShort, name, elapsed, lc.ttl)
		c.emit(observe.Event{Kind: observe.AcquireFailed, Name: name, Elapsed: elapsed, Err: err, Context: ctx, Nodes: d.nodes})
		return nil, info, err
	}
	l := &Lock{c: c, a: a, token: token, maxExtensions: lc.maxExtensions, deadline: decided.Add(valid)}
	c.emit(observe.Event{Kind: observe.Acquired, Name: name, Token: token, Elapsed: elapsed, Validity: valid, Context: ctx, Nodes: d.nodes})
	if lc.autoExtend {
		c.renewals.add(l, lc.leanRenewal)
	}
	return l, info, nil
}

// attemptInfo is what the retry loop learns from a failed attempt.
type attemptInfo struct {
	elapsed time.Duration // how long the round took: our measure of the nodes' round trip
	split   bool          // we won some nodes but not a quorum: contenders split the votes
}

// refusal turns a lost decision into the error the caller sees. Held by
// another owner when the nodes that said so are alone enough to make a
// quorum impossible (more than N - quorum of them), whatever the other nodes
// did: the lock is busy, and would be with every node up. No quorum when the
// failures and sit-outs were needed to lose: then nobody can be said to hold
// it. Both errors keep every node's error. d must be settled (attempt.settle).
func (c *Client) refusal(a *attempt, d decision) error {
	if d.errs != nil {
		for _, err := range d.errs.Errors {
			if errors.Is(err, ErrNotIndependent) {
				return err
			}
		}
	}
	if d.refused > len(c.nodes)-c.quorum() {
		return &LockedError{Name: a.name, Remaining: time.Duration(d.minPTTL) * time.Millisecond, Refused: d.refused, Nodes: len(c.nodes), Errors: d.errs}
	}
	return &QuorumError{Op: "acquire", Name: a.name, Won: d.winners, Refused: d.refused, Needed: c.quorum(), Errors: d.errs}
}

// checkIndependence refuses a set of nodes with a replica or one server
// reached twice. On first use it probes every node first, so that no vote
// is counted before the duplicates are known, the nodes' clocks can be
// compared with each other and their registers of the largest TTL in use
// were read.
func (c *Client) checkIndependence(ctx context.Context, timeout time.Duration) error {
	if !c.probed.Load() {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		c.each(func(_ int, n *node) { _ = c.ready(pctx, n, "") })
		cancel()
		c.compareClocks()
		c.probed.Store(true)
	}
	for _, n := range c.nodes {
		// A node refused for what changes at run time is looked at again
		// (it cannot vote meanwhile anyway): a cluster node refused for its
		// slots at every attempt, as they move and nothing else would tell
		// (its connection stays up, so it is not stale); a node refused for
		// evicting once its guard is past guardMaxAge, as an operator may
		// set noeviction again or reset its count of evicted keys.
		g := n.guard.Load()
		if g == nil || g.excluded == nil {
			continue
		}
		if g.cluster != nil || errors.Is(g.excluded, ErrEvictingNode) && c.clock.Now().Sub(g.probed) > guardMaxAge {
			pctx, cancel := context.WithTimeout(ctx, timeout)
			_, _ = c.refresh(pctx, n, time.Duration(c.maxTTL.Load()))
			cancel()
		}
	}
	return c.independence()
}

// compareClocks compares every node's clock with the others'.
func (c *Client) compareClocks() {
	c.guardMu.Lock()
	defer c.guardMu.Unlock()
	for _, n := range c.nodes {
		c.compareClocksLocked(n)
	}
}

// independence returns the error of a node refused (see nodeGuard.excluded),
// if any: of the first node that is not independent (a replica, a second
// address of one server) if there is one, else of the first refused for
// another reason. A replica among the nodes also makes its master a master
// with replicas, refused as a node that fails over: the replica is the
// node to remove, so it is the one named.
func (c *Client) independence() error {
	var first error
	for _, n := range c.nodes {
		if g := n.guard.Load(); g != nil && g.excluded != nil {
			if g.cluster != nil {
				n.stale.Store(true) // slots move: look at the node again next time
			}
			if errors.Is(g.excluded, ErrNotIndependent) {
				return g.excluded
			}
			if first == nil {
				first = g.excluded
			}
		}
	}
	return first
}

func (c *Client) noteTTL(ttl time.Duration) {
	for {
		cur := c.maxTTL.Load()
		if int64(ttl) <= cur || c.maxTTL.CompareAndSwap(cur, int64(ttl)) {
			break
		}
	}
	for {
		cur := c.minTTL.Load()
		if int64(ttl) >= cur || c.minTTL.CompareAndSwap(cur, int64(ttl)) {
			return
		}
	}
}

func (c *Client) noteToken(t int64) {
	for {
		cur := c.lastToken.Load()
		if t <= cur || c.lastToken.CompareAndSwap(cur, t) {
			return
		}
	}
}

// Do runs fn while holding the lock: it waits for the lock (as Acquire),
// keeps it extended, and releases it when fn returns. The context fn gets is
// cancelled the moment the lock is lost, with context.Cause matching
// ErrLockLost; fn must then stop touching the guarded resource. Do returns
// fn's error, joined with an error matching ErrLockLost if the lock was lost
// before fn returned. fn's context carries the lock (ContextWithLock): a Do
// or Acquire of the same name inside fn reenters it.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context, l *Lock) error, opts ...LockOption) error {
	l, err := c.Acquire(ctx, name, append(opts[:len(opts):len(opts)], WithAutoExtend())...)
	return c.run(ctx, l, err, func(ctx context.Context, l *Lock) error { return fn(ContextWithLock(ctx, l), l) })
}

// run is Do once the lock was acquired (or not, with err): fn under l,
// cancelled on its loss, and the release.
func (c *Client) run(ctx context.Context, l *Lock, err error, fn func(ctx context.Context, l *Lock) error) error {
	if err != nil {
		return err
	}
	return runHeld(ctx, l, func(ctx context.Context) error { return fn(ctx, l) })
}

// held is what runHeld runs a function under: a lock, a permit's lock or a
// multi-lock.
type held interface {
	Done() <-chan struct{}
	Err() error
	Release(ctx context.Context) error
}

// runHeld runs fn while l is held and releases l when fn returns (see Do).
func runHeld(ctx context.Context, l held, fn func(ctx context.Context) error) error {
	fnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case <-l.Done():
			cancel(l.Err())
		case <-fnCtx.Done():
		}
	}()
	fnErr := fn(fnCtx)
	lost := l.Err()
	relErr := l.Release(context.WithoutCancel(ctx))
	cancel(nil)
	<-watchDone
	switch {
	case lost != nil && !errors.Is(lost, ErrNotHeld):
		return errors.Join(fnErr, lost)
	case errors.Is(relErr, ErrLockLost):
		return errors.Join(fnErr, relErr)
	}
	return fnErr
}
