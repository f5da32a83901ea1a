package redlock

// Multi-lock: several names held together, all or nothing.
//
// Every name is an ordinary lock (its own keys, in its own hash slot, its
// own fencing token); the multi-lock only fixes the order they are taken in
// and undoes a partial acquisition. Names are taken one by one in sorted
// order: a caller waits for a name only while it holds names that sort
// before it, so a cycle of waiters, each holding what the next one waits
// for, would need a name that sorts before itself (docs/PROTOCOL.md,
// "Multi-lock"). There is no script across names: keys of different names
// live in different cluster slots.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// MultiLock is several locks held together, taken all or nothing. Its
// methods are safe for concurrent use.
type MultiLock struct {
	c     *Client
	locks []*Lock // by name, sorted

	doneOnce sync.Once
	done     chan struct{} // made on first use of Done
	closing  sync.Once
}

// AcquireMulti waits for every one of names, as Acquire does for one, and
// returns them held together, or none. Names are taken in sorted order
// whatever order they are given in, so callers whose sets overlap cannot
// deadlock each other. The options apply to every name; WithMaxWait bounds
// the whole wait. WithAutoExtend keeps every name extended from the moment
// it is taken, through the client's renewal scheduler; without it, a name
// whose validity ran out while a later one was awaited makes the whole
// attempt start again (its Deadline would already have passed).
//
// On failure every name taken so far is released before AcquireMulti
// returns, and no key of the failed attempts stays behind. An empty list,
// an empty or too long name, or a name given twice is a *ConfigError.
func (c *Client) AcquireMulti(ctx context.Context, names []string, opts ...LockOption) (*MultiLock, error) {
	sorted, lc, err := c.multiParams(names, opts)
	if err != nil {
		return nil, err
	}
	if lc.maxWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = withMaxWait(ctx, lc.maxWait)
		defer cancel()
	}
	for {
		m, err := c.takeAll(ctx, sorted, opts, c.Acquire)
		if err == nil || !errors.Is(err, errMemberEnded) || ctx.Err() != nil {
			return m, err
		}
	}
}

// TryAcquireMulti makes one attempt at each of names, in sorted order, and
// returns them held together, or none: it stops at the first name it cannot
// take (ErrLocked, ErrNoQuorum, ...) and releases the names taken before.
// Input is checked as by AcquireMulti.
func (c *Client) TryAcquireMulti(ctx context.Context, names []string, opts ...LockOption) (*MultiLock, error) {
	sorted, _, err := c.multiParams(names, opts)
	if err != nil {
		return nil, err
	}
	return c.takeAll(ctx, sorted, opts, c.TryAcquire)
}

// DoMulti runs fn while holding every one of names: it waits for them as
// AcquireMulti does, keeps them all extended, and releases them when fn
// returns. fn's context carries every name (ContextWithLock), and it is
// cancelled the moment any name is lost, with context.Cause matching
// ErrLockLost. DoMulti returns fn's error, joined with an error matching
// ErrLockLost if a name was lost before fn returned.
func (c *Client) DoMulti(ctx context.Context, names []string, fn func(ctx context.Context, m *MultiLock) error, opts ...LockOption) error {
	m, err := c.AcquireMulti(ctx, names, append(opts[:len(opts):len(opts)], WithAutoExtend())...)
	if err != nil {
		return err
	}
	return runHeld(ctx, m, func(ctx context.Context) error { return fn(ContextWithLock(ctx, m.locks...), m) })
}

// multiParams checks a multi-lock request before anything is taken, and
// returns the names sorted.
func (c *Client) multiParams(names []string, opts []LockOption) ([]string, lockConfig, error) {
	if len(names) == 0 {
		return nil, lockConfig{}, configErr("lock names", "[]", "must list at least one name")
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	var lc lockConfig
	for i, name := range sorted {
		var err error
		if lc, _, err = c.params(name, opts); err != nil {
			return nil, lc, err
		}
		if i > 0 && sorted[i-1] == name {
			return nil, lc, configErr("lock names", fmt.Sprintf("%q", name), "given twice: a multi-lock takes each name once")
		}
	}
	return sorted, lc, nil
}

// errMemberEnded marks a multi-lock attempt undone because a name taken
// earlier ended while a later one was awaited.
var errMemberEnded = errors.New("a name taken earlier ended while a later one was awaited")

// takeAll takes the sorted names one by one with take, and undoes the
// attempt if one fails or one taken earlier ended meanwhile.
func (c *Client) takeAll(ctx context.Context, sorted []string, opts []LockOption, take func(context.Context, string, ...LockOption) (*Lock, error)) (*MultiLock, error) {
	m := &MultiLock{c: c, locks: make([]*Lock, 0, len(sorted))}
	for _, name := range sorted {
		l, err := take(ctx, name, opts...)
		if err != nil {
			m.releaseAll()
			return nil, fmt.Errorf("redlock: multi-lock %q: %w", sorted, err)
		}
		m.locks = append(m.locks, l)
	}
	for _, l := range m.locks {
		if err := l.Err(); err != nil {
			m.releaseAll()
			return nil, fmt.Errorf("redlock: multi-lock %q: %w: %w (%v)", sorted, ErrValidityTooShort, errMemberEnded, err)
		}
	}
	return m, nil
}

// releaseAll releases every lock at once: the release calls of all names
// for a node queue together on its pipe and share writes. It returns each
// lock's error.
func (m *MultiLock) releaseAll() []error {
	errs := make([]error, len(m.locks))
	var wg sync.WaitGroup
	for i, l := range m.locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.Release(context.Background())
		}()
	}
	wg.Wait()
	return errs
}

// names lists the names held, sorted.
func (m *MultiLock) names() []string {
	names := make([]string, len(m.locks))
	for i, l := range m.locks {
		names[i] = l.a.name
	}
	return names
}

// Locks gives the lock of each name, sorted by name. Each has its own
// fencing token: pass a name's token to the resource that name guards. To
// let code under the multi-lock reenter its names, pass them to
// ContextWithLock. Release and extend them through the MultiLock.
func (m *MultiLock) Locks() []*Lock { return slices.Clone(m.locks) }

// Lock gives the lock of name, nil if name is not one of the multi-lock's.
func (m *MultiLock) Lock(name string) *Lock {
	for _, l := range m.locks {
		if l.a.name == name {
			return l
		}
	}
	return nil
}

// Deadline is when the first of the names' validities ends, unless
// extended: past it the multi-lock is no longer held whole.
func (m *MultiLock) Deadline() time.Time {
	d := m.locks[0].Deadline()
	for _, l := range m.locks[1:] {
		if dl := l.Deadline(); dl.Before(d) {
			d = dl
		}
	}
	return d
}

// Done is closed as soon as any name is released or lost.
func (m *MultiLock) Done() <-chan struct{} {
	m.doneOnce.Do(func() {
		m.done = make(chan struct{})
		if m.Err() != nil {
			m.closeDone()
			return
		}
		for _, l := range m.locks {
			go func() {
				select {
				case <-l.Done():
					m.closeDone()
				case <-m.done:
				}
			}()
		}
	})
	return m.done
}

// Err is nil while every name is held. Otherwise it is the error of the
// first name, in sorted order, that was lost (matching ErrLockLost), or,
// after Release, an error matching ErrNotHeld.
func (m *MultiLock) Err() error {
	var released error
	for _, l := range m.locks {
		switch err := l.Err(); {
		case err == nil:
		case errors.Is(err, ErrNotHeld):
			if released == nil {
				released = err
			}
		default:
			return err
		}
	}
	return released
}

// Extend renews every name for its TTL in one round: each node gets the
// extends of all names in one batch, and each name needs its own quorum.
// It returns nil if every name was renewed; otherwise the names' errors
// joined (see Lock.Extend: a name refused by too many nodes, or whose
// quorum answered only after its validity passed, is lost, and then Done
// closes). It fails at once, extending nothing, if a name already ended or
// its validity passed (that name is then lost, and its keys are deleted in
// the background).
func (m *MultiLock) Extend(ctx context.Context) error {
	// A nested member is a view: the lock on the nodes is its outer one.
	batch := make([]*Lock, len(m.locks))
	for i, l := range m.locks {
		if l.outer != nil {
			l = l.outer
		}
		batch[i] = l
	}
	if err := m.endIfExpired(batch); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redlock: extend %q: %w", m.names(), err)
	}
	// In name order, as every multi-lock: two Extends of overlapping
	// multi-locks of one client cannot wait for each other in a cycle.
	var timeout time.Duration
	for _, l := range batch {
		l.extendMu.Lock()
		timeout = max(timeout, l.nodeTimeout())
	}
	defer func() {
		for _, l := range batch {
			l.extendMu.Unlock()
		}
	}()
	if err := m.endIfExpired(batch); err != nil { // released or expired while we waited for the locks
		return err
	}
	start, decided, errs := m.c.extendBatch(context.WithoutCancel(ctx), batch, nil, timeout)
	var all []error
	for i, l := range batch {
		if err := l.extended(ctx, start, decided[i], errs[i], nil); err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// endIfExpired ends as lost every lock of batch (the members' locks on the
// nodes) whose validity passed, as Lock.Extend does before it sends
// anything, and gives the multi-lock's error, nil while every name is held.
func (m *MultiLock) endIfExpired(batch []*Lock) error {
	for _, l := range batch {
		_ = l.endIfExpired()
	}
	return m.Err()
}

// Release releases every name at once (see Lock.Release). It returns nil
// if every name was still held, otherwise the names' errors joined: an
// error matching ErrLockLost means the guarded work may have overlapped
// another holder's of that name; ErrNotHeld, that it was released before.
func (m *MultiLock) Release(ctx context.Context) error {
	errs := m.releaseAll()
	m.Done()
	m.closeDone() // now, not when a watcher gets to it
	return errors.Join(errs...)
}

func (m *MultiLock) closeDone() { m.closing.Do(func() { close(m.done) }) }
