package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

func TestMultiLockHoldsEveryNameWithItsOwnToken(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	bg := context.Background()

	m, err := c.AcquireMulti(bg, []string{"m-zeta", "m-alpha", "m-mu"})
	if err != nil {
		t.Fatal(err)
	}
	if got := lockNames(m); !slices.Equal(got, []string{"m-alpha", "m-mu", "m-zeta"}) {
		t.Fatalf("names %v, want them sorted", got)
	}
	for _, l := range m.Locks() {
		if l.Token() <= 0 || l.Err() != nil {
			t.Fatalf("%s: token %d, err %v", l.Name(), l.Token(), l.Err())
		}
		if left := keysLeft(t, cl, c, l.Name()); len(left) < c.Quorum() {
			t.Fatalf("%s held on %v only", l.Name(), left)
		}
		if !m.Deadline().After(time.Now()) || m.Deadline().After(l.Deadline()) {
			t.Fatalf("multi deadline %v is not the earliest member's (%s: %v)", m.Deadline(), l.Name(), l.Deadline())
		}
	}
	// Each name has its own token: another acquisition of one name gets a
	// token above that name's.
	before := m.Lock("m-mu").Token()
	if err := m.Extend(bg); err != nil {
		t.Fatalf("extend: %v", err)
	}
	if err := m.Release(bg); err != nil {
		t.Fatalf("release: %v", err)
	}
	endedWith(t, "release", m.Done(), m.Err, redlock.ErrNotHeld)
	for _, name := range lockNames(m) {
		keysGone(t, cl, c, name)
	}
	l, err := c.TryAcquire(bg, "m-mu")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(bg)
	if l.Token() <= before {
		t.Fatalf("next token of m-mu %d, not above the multi-lock's %d", l.Token(), before)
	}
}

func TestMultiLockIsAllOrNothing(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	other := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	bg := context.Background()

	held, err := other.Acquire(bg, "aon-b")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(bg)
	if _, err := c.TryAcquireMulti(bg, []string{"aon-c", "aon-b", "aon-a"}); !errors.Is(err, redlock.ErrLocked) {
		t.Fatalf("TryAcquireMulti with b held: %v, want ErrLocked", err)
	}
	_, err = c.AcquireMulti(bg, []string{"aon-c", "aon-b", "aon-a"}, redlock.WithMaxWait(300*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, redlock.ErrLocked) {
		t.Fatalf("AcquireMulti with b held past MaxWait: %v, want the deadline and ErrLocked", err)
	}
	for _, name := range []string{"aon-a", "aon-c"} {
		keysGone(t, cl, c, name)
	}
}

func TestMultiLockRefusesBadInput(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	bg := context.Background()
	cases := []struct {
		names []string
		value string // what the error must name
	}{
		{nil, "[]"},
		{[]string{}, "[]"},
		{[]string{"bad-a", ""}, `""`},
		{[]string{"bad-a", "bad-b", "bad-a"}, `"bad-a"`},
	}
	for _, tc := range cases {
		for _, call := range []func(context.Context, []string, ...redlock.LockOption) (*redlock.MultiLock, error){c.AcquireMulti, c.TryAcquireMulti} {
			m, err := call(bg, tc.names)
			var ce *redlock.ConfigError
			if m != nil || !errors.As(err, &ce) || !errors.Is(err, redlock.ErrInvalidConfig) || ce.Value != tc.value {
				t.Fatalf("names %q: %v, %v; want a ConfigError naming %s", tc.names, m, err, tc.value)
			}
		}
	}
	keysGone(t, cl, c, "bad-a")
}

func TestMultiLockOverlappingSetsInOppositeOrdersDoNotDeadlock(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	const rounds = 15
	sets := [][]string{
		{"ov-a", "ov-b", "ov-c"},
		{"ov-c", "ov-b", "ov-a"}, // the same names, the opposite order
		{"ov-c", "ov-d"},
	}
	var (
		holders = map[string]*atomic.Int32{}
		overlap atomic.Int32
		wg      sync.WaitGroup
		errs    = make(chan error, len(sets))
	)
	for _, n := range []string{"ov-a", "ov-b", "ov-c", "ov-d"} {
		holders[n] = new(atomic.Int32)
	}
	for _, set := range sets {
		c := newClient(t, cl, redlock.Options{TTL: 5 * time.Second})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				// Auto-extended, a deadlock would not dissolve with the TTL:
				// it would last until MaxWait and fail the test.
				m, err := c.AcquireMulti(context.Background(), set, redlock.WithAutoExtend(), redlock.WithMaxWait(30*time.Second))
				if err != nil {
					errs <- fmt.Errorf("%v: %w", set, err)
					return
				}
				for _, n := range set {
					if holders[n].Add(1) != 1 {
						overlap.Add(1)
					}
				}
				for _, n := range set {
					holders[n].Add(-1)
				}
				if err := m.Release(context.Background()); err != nil {
					errs <- fmt.Errorf("%v release: %w", set, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := overlap.Load(); n > 0 {
		t.Fatalf("%d times two callers held a common name together", n)
	}
}

func TestMultiLockDoneClosesWhenAnyNameIsLost(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	bg := context.Background()
	m, err := c.AcquireMulti(bg, []string{"lose-a", "lose-b"})
	if err != nil {
		t.Fatal(err)
	}
	done := m.Done()
	// Another owner takes lose-b on every node, as after an expiry.
	for _, s := range cl.Servers {
		if err := s.Client().Set(bg, c.Keys("lose-b").Lock, "someone-else", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Extend(bg); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("extend: %v, want ErrLockLost", err)
	}
	<-done
	if err := m.Err(); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Err: %v", err)
	}
	if err := m.Release(bg); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("release: %v, want the loss", err)
	}
	keysGone(t, cl, c, "lose-a")
}

func TestMultiLockAutoExtendsEveryName(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	bg := context.Background()
	const ttl = 300 * time.Millisecond
	m, err := c.AcquireMulti(bg, []string{"auto-a", "auto-b", "auto-c"}, redlock.WithTTL(ttl), redlock.WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	first := m.Deadline()
	select {
	case <-m.Done():
		t.Fatalf("lost while auto-extended: %v", m.Err())
	case <-time.After(4 * ttl):
	}
	if !m.Deadline().After(first) || m.Err() != nil {
		t.Fatalf("not extended: deadline %v -> %v, err %v", first, m.Deadline(), m.Err())
	}
	if err := m.Release(bg); err != nil {
		t.Fatal(err)
	}
}

func TestMultiLockNamesCanBeReentered(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	bg := context.Background()
	m, err := c.AcquireMulti(bg, []string{"re-a", "re-b"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release(bg)
	ctx := redlock.ContextWithLock(bg, m.Locks()...)
	nested, err := c.Acquire(ctx, "re-b", noSelfWait)
	if err != nil {
		t.Fatalf("reentering a member: %v", err)
	}
	if nested.Token() != m.Lock("re-b").Token() {
		t.Fatal("nested handle of a member has another token")
	}
	if err := nested.Release(bg); err != nil || m.Err() != nil {
		t.Fatalf("nested release %v, multi %v", err, m.Err())
	}
}

func TestDoMultiHoldsEveryNameAndStopsOnALoss(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{TTL: 10 * time.Second})
	bg := context.Background()

	err := c.DoMulti(bg, []string{"do-b", "do-a"}, func(ctx context.Context, m *redlock.MultiLock) error {
		nested, err := c.Acquire(ctx, "do-a", noSelfWait) // the callback's context carries every name
		if err != nil {
			return err
		}
		if nested.Token() != m.Lock("do-a").Token() {
			return errors.New("nested handle of do-a has another token")
		}
		return nested.Release(ctx)
	})
	if err != nil {
		t.Fatalf("DoMulti: %v", err)
	}
	for _, n := range []string{"do-a", "do-b"} {
		keysGone(t, cl, c, n)
	}

	err = c.DoMulti(bg, []string{"lost-a", "lost-b"}, func(ctx context.Context, m *redlock.MultiLock) error {
		// Another owner takes lost-b everywhere; the next renewal finds it.
		for _, s := range cl.Servers {
			if err := s.Client().Set(bg, c.Keys("lost-b").Lock, "someone-else", time.Minute).Err(); err != nil {
				return err
			}
		}
		<-ctx.Done()
		if cause := context.Cause(ctx); !errors.Is(cause, redlock.ErrLockLost) {
			return fmt.Errorf("callback context ended with %v, want ErrLockLost", cause)
		}
		return nil
	}, redlock.WithTTL(300*time.Millisecond))
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("DoMulti after a loss: %v, want ErrLockLost", err)
	}
	keysGone(t, cl, c, "lost-a")
}

// lockNames lists the names a MultiLock holds, sorted.
func lockNames(m *redlock.MultiLock) []string {
	var names []string
	for _, l := range m.Locks() {
		names = append(names, l.Name())
	}
	return names
}
