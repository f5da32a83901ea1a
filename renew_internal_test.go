package redlock

// A renewal or an extension whose quorum answers after the lock's validity
// ended must not revive the lock: past its deadline another holder may have
// come and gone, and the holder has to hear that its lock is lost. The
// schedules are driven with a clock the test moves (manualClock) and by
// holding the nodes' answers back (fakeNode.hold); the scheduler is woken
// by hand, so its real-time timer never decides the order.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/observe"
	"github.com/quorumlabs/redlock/redistest"
)

// eventLog records a client's events and tells a waiter of each one.
type eventLog struct {
	mu     sync.Mutex
	events []observe.Event
	signal chan struct{}
}

func newEventLog() *eventLog { return &eventLog{signal: make(chan struct{}, 1)} }

func (e *eventLog) Observe(ev observe.Event) {
	e.mu.Lock()
	e.events = append(e.events, ev)
	e.mu.Unlock()
	select {
	case e.signal <- struct{}{}:
	default:
	}
}

// await waits for the first event of name of one of kinds, and returns it.
// The timeout only keeps a broken build from hanging; it decides nothing.
func (e *eventLog) await(t *testing.T, name string, kinds ...observe.Kind) observe.Event {
	t.Helper()
	failsafe := time.After(time.Minute)
	for {
		e.mu.Lock()
		for _, ev := range e.events {
			for _, k := range kinds {
				if ev.Name == name && ev.Kind == k {
					e.mu.Unlock()
					return ev
				}
			}
		}
		e.mu.Unlock()
		select {
		case <-e.signal:
		case <-failsafe:
			t.Fatalf("no %v event for %q: saw %v", kinds, name, e.kinds(name))
		}
	}
}

// kinds lists the kinds of name's events, in order.
func (e *eventLog) kinds(name string) []observe.Kind {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ks []observe.Kind
	for _, ev := range e.events {
		if ev.Name == name {
			ks = append(ks, ev.Kind)
		}
	}
	return ks
}

// wakeRenewals makes the renewal scheduler look at its queue now, with the
// test's clock, instead of when its real-time timer fires.
func wakeRenewals(c *Client) {
	c.renewals.mu.Lock()
	wake := c.renewals.wake
	c.renewals.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// mustBeLost checks that l ended as lost: Err matches ErrLockLost and Done
// is closed already (no wait: it closes when the loss is recorded).
func mustBeLost(t *testing.T, l *Lock, what string) {
	t.Helper()
	if err := l.Err(); !errors.Is(err, ErrLockLost) {
		t.Fatalf("%s: the lock was revived: Err() = %v, deadline now +%v, want ErrLockLost", what, err, l.Deadline().Sub(l.c.clock.Now()))
	}
	select {
	case <-l.Done():
	default:
		t.Fatalf("%s: Done is still open after the loss", what)
	}
}

// holdAll holds back the acquire and extend answers of every node and gives
// the gates to open them, and a function that waits until a call waits at
// each node.
func holdAll(fs []*fakeNode) (open func(), arrivedEverywhere func()) {
	gates := make([]chan struct{}, len(fs))
	arrived := make([]<-chan struct{}, len(fs))
	for i, f := range fs {
		gates[i], arrived[i] = f.hold()
	}
	return func() {
			for _, g := range gates {
				close(g)
			}
		}, func() {
			for _, a := range arrived {
				<-a
			}
		}
}

// extendsSent lists the extend calls the nodes ran.
func extendsSent(fs []*fakeNode) []string {
	var sent []string
	for _, f := range fs {
		for _, call := range f.history() {
			if strings.HasPrefix(call, "extend:") {
				sent = append(sent, call)
			}
		}
	}
	return sent
}

// keysKept lists the nodes that still hold the lock key of name.
func keysKept(fs []*fakeNode, c *Client, name string) []int {
	var kept []int
	for i, f := range fs {
		if _, held := f.get(c.lockKey(name)); held {
			kept = append(kept, i)
		}
	}
	return kept
}

// A client paused past its lock's validity finds the renewal due when it
// wakes: the scheduler must end the lock as lost instead of extending it.
func TestRenewalDueAfterTheValidityPassedIsNotSent(t *testing.T) {
	fs := fakes(3)
	clock := &manualClock{t: time.Unix(1_700_000_000, 0)}
	log := newEventLog()
	c := newFakeClient(t, fs, Options{TTL: time.Minute, Clock: clock, Observer: log})
	l, err := c.TryAcquire(context.Background(), "paused", WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	clock.advance(l.Deadline().Sub(clock.Now()) + time.Second) // the pause
	wakeRenewals(c)
	log.await(t, "paused", observe.Lost, observe.Extended)
	if sent := extendsSent(fs); len(sent) > 0 {
		t.Fatalf("a renewal due after the validity passed was sent: %v (events %v)", sent, log.kinds("paused"))
	}
	mustBeLost(t, l, "renewal due after the validity")
	c.bg.wait() // the background release, and the scheduler, which has nothing left
	if kept := keysKept(fs, c, "paused"); len(kept) > 0 {
		t.Fatalf("nodes %v kept the lost lock's key", kept)
	}
}

// A renewal sent in time whose answers come after the validity ended must
// not set a new deadline: the lock is lost, and the keys the late renewal
// extended are deleted.
func TestRenewalAnsweredAfterTheValidityPassedDoesNotRevive(t *testing.T) {
	fs := fakes(3)
	clock := &manualClock{t: time.Unix(1_700_000_000, 0)}
	log := newEventLog()
	c := newFakeClient(t, fs, Options{TTL: time.Minute, Clock: clock, Observer: log})
	l, err := c.TryAcquire(context.Background(), "late", WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	deadline := l.Deadline()
	open, arrived := holdAll(fs)
	clock.advance(deadline.Sub(clock.Now()) / 2) // the renewal is due, the lock still valid
	wakeRenewals(c)
	arrived()                                              // the renewal reached every node before the deadline
	clock.advance(deadline.Sub(clock.Now()) + time.Second) // its answers come after it
	open()
	ev := log.await(t, "late", observe.Lost, observe.Extended)
	if ev.Kind != observe.Lost {
		t.Fatalf("a renewal answered after the validity passed renewed the lock (events %v)", log.kinds("late"))
	}
	mustBeLost(t, l, "renewal answered after the validity")
	failed := log.await(t, "late", observe.ExtendFailed)
	if !errors.Is(failed.Err, ErrLockLost) {
		t.Fatalf("EventExtendFailed carries %v, want ErrLockLost", failed.Err)
	}
	c.bg.wait()
	if kept := keysKept(fs, c, "late"); len(kept) > 0 {
		t.Fatalf("nodes %v kept the key the late renewal extended", kept)
	}
}

// Extend called in time whose quorum answers after the validity ended
// returns ErrLockLost and ends the lock.
func TestExtendAnsweredAfterTheValidityPassedIsLost(t *testing.T) {
	fs := fakes(3)
	clock := &manualClock{t: time.Unix(1_700_000_000, 0)}
	log := newEventLog()
	c := newFakeClient(t, fs, Options{TTL: time.Minute, Clock: clock, Observer: log})
	l, err := c.TryAcquire(context.Background(), "extend-late")
	if err != nil {
		t.Fatal(err)
	}
	deadline := l.Deadline()
	clock.advance(deadline.Sub(clock.Now()) / 2)
	open, arrived := holdAll(fs)
	result := make(chan error, 1)
	go func() { result <- l.Extend(context.Background()) }()
	arrived()
	clock.advance(deadline.Sub(clock.Now()) + time.Second)
	open()
	if err := <-result; !errors.Is(err, ErrLockLost) {
		t.Fatalf("Extend answered after the validity passed: got %v, want ErrLockLost (deadline now +%v)", err, l.Deadline().Sub(clock.Now()))
	}
	mustBeLost(t, l, "extend answered after the validity")
	log.await(t, "extend-late", observe.Lost)
	if got := log.kinds("extend-late"); len(got) < 2 || got[len(got)-2] != observe.ExtendFailed {
		t.Fatalf("events %v, want EventExtendFailed before EventLost", got)
	}
	c.bg.wait()
	if kept := keysKept(fs, c, "extend-late"); len(kept) > 0 {
		t.Fatalf("nodes %v kept the key the late extend renewed", kept)
	}
}

// A multi-lock's member whose renewal falls due after its validity is lost,
// and with it the multi-lock: Err says so and Done is closed.
func TestMultiLockMemberRenewedAfterTheValidityPassedIsLost(t *testing.T) {
	fs := fakes(3)
	clock := &manualClock{t: time.Unix(1_700_000_000, 0)}
	log := newEventLog()
	c := newFakeClient(t, fs, Options{TTL: time.Minute, Clock: clock, Observer: log})
	m, err := c.AcquireMulti(context.Background(), []string{"m-a", "m-b"}, WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	clock.advance(m.Deadline().Sub(clock.Now()) + time.Second)
	wakeRenewals(c)
	for _, name := range m.names() {
		log.await(t, name, observe.Lost, observe.Extended)
	}
	if err := m.Err(); !errors.Is(err, ErrLockLost) {
		t.Fatalf("multi-lock renewed after the validity passed: Err() = %v, want ErrLockLost (extends sent: %v)", err, extendsSent(fs))
	}
	select {
	case <-m.Done():
	default:
		t.Fatal("the multi-lock's Done is still open after its members were lost")
	}
	if sent := extendsSent(fs); len(sent) > 0 {
		t.Fatalf("renewals due after the validity were sent: %v", sent)
	}
	c.bg.wait()
	for _, name := range m.names() {
		if kept := keysKept(fs, c, name); len(kept) > 0 {
			t.Fatalf("%s: nodes %v kept the lost member's key", name, kept)
		}
	}
}

// MultiLock.Extend whose quorums answer after the validity ended fails
// with ErrLockLost for every member, and the multi-lock ends.
func TestMultiLockExtendAnsweredAfterTheValidityPassedIsLost(t *testing.T) {
	fs := fakes(3)
	clock := &manualClock{t: time.Unix(1_700_000_000, 0)}
	c := newFakeClient(t, fs, Options{TTL: time.Minute, Clock: clock})
	m, err := c.AcquireMulti(context.Background(), []string{"x-a", "x-b"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := m.Deadline()
	clock.advance(deadline.Sub(clock.Now()) / 2)
	open, arrived := holdAll(fs)
	result := make(chan error, 1)
	go func() { result <- m.Extend(context.Background()) }()
	arrived()
	clock.advance(deadline.Sub(clock.Now()) + time.Second)
	open()
	if err := <-result; !errors.Is(err, ErrLockLost) {
		t.Fatalf("MultiLock.Extend answered after the validity passed: got %v, want ErrLockLost", err)
	}
	for _, l := range m.Locks() {
		mustBeLost(t, l, l.Name())
	}
	if err := m.Err(); !errors.Is(err, ErrLockLost) {
		t.Fatalf("multi-lock Err() = %v, want ErrLockLost", err)
	}
	select {
	case <-m.Done():
	default:
		t.Fatal("the multi-lock's Done is still open after the loss")
	}
	c.bg.wait()
	for _, name := range m.names() {
		if kept := keysKept(fs, c, name); len(kept) > 0 {
			t.Fatalf("%s: nodes %v kept the key the late extend renewed", name, kept)
		}
	}
}

// On real servers without fencing, the extend script re-creates a missing
// key (the repair of a node that restarted empty). A renewal that comes
// after the validity ended, when the key expired and another holder took
// and released the lock, must not re-create it: the lock is lost.
func TestRenewalAfterTheValidityPassedRecreatesNoKeyWithoutFencing(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	clock := &manualClock{t: time.Now()} // A's clock stands still until the test moves it
	log := newEventLog()
	a, err := New(cl.Clients(), Options{
		TTL: time.Second, DisableFencing: true, Clock: clock, Observer: log,
		// The nodes were just started; A's clock does not follow theirs.
		RestartGrace: NoRestartGrace, ClockJumpThreshold: noClockGuard,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	b, err := New(cl.Clients(), Options{TTL: time.Second, DisableFencing: true, RestartGrace: NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()

	l, err := a.TryAcquire(ctx, "unfenced", WithAutoExtend())
	if err != nil {
		t.Fatal(err)
	}
	// A stands still (its renewal never falls due on its clock); its keys
	// expire on the servers, and B takes the lock and lets it go.
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	other, err := b.Acquire(wait, "unfenced")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A wakes past its validity, and its renewal is due.
	clock.advance(l.Deadline().Sub(clock.Now()) + time.Second)
	wakeRenewals(a)
	log.await(t, "unfenced", observe.Lost, observe.Extended)
	// A's own value, not any key: B's call to its slowest node may still
	// be running after B's Release returned (the release owed to that node
	// goes out when the call ends), and its key is not A's doing.
	var recreated []string
	for _, s := range cl.Servers {
		v, err := s.Client().Get(ctx, a.lockKey("unfenced")).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		if v == l.a.value {
			recreated = append(recreated, s.Addr)
		}
	}
	if len(recreated) > 0 {
		t.Fatalf("the late renewal re-created the key on %v after another holder came and went (events %v)", recreated, log.kinds("unfenced"))
	}
	mustBeLost(t, l, "late renewal without fencing")
}

// Renewals that fall due together go out most urgent first: by the lock's
// deadline, not by when the renewal fell due. When the scheduler runs late
// (a busy client, nodes that cannot keep up) a round carries every overdue
// renewal, and the ones nearest their deadline must reach the nodes first.
// B fell due after A but its validity ends first (a shorter TTL).
func TestOverdueRenewalsGoOutByDeadline(t *testing.T) {
	fs := fakes(3)
	clock := &manualClock{t: time.Unix(1_700_000_000, 0)}
	log := newEventLog()
	c := newFakeClient(t, fs, Options{TTL: time.Minute, Clock: clock, Observer: log})
	ctx := context.Background()
	a, err := c.TryAcquire(ctx, "a", WithAutoExtend()) // due at about +20s, valid until about +59s
	if err != nil {
		t.Fatal(err)
	}
	clock.advance(15 * time.Second)
	b, err := c.TryAcquire(ctx, "b", WithAutoExtend(), WithTTL(24*time.Second)) // due at about +23s, valid until about +39s
	if err != nil {
		t.Fatal(err)
	}
	if !b.Deadline().Before(a.Deadline()) {
		t.Fatalf("b's deadline %v is not before a's %v", b.Deadline(), a.Deadline())
	}
	aDeadline, bDeadline := a.Deadline().Sub(clock.Now()), b.Deadline().Sub(clock.Now())
	clock.advance(8 * time.Second) // both overdue: one round
	wakeRenewals(c)
	log.await(t, "a", observe.Extended)
	log.await(t, "b", observe.Extended)
	for i, f := range fs {
		var order []string
		for _, call := range f.history() {
			switch call {
			case "extend:" + a.a.value:
				order = append(order, "a")
			case "extend:" + b.a.value:
				order = append(order, "b")
			}
		}
		if len(order) != 2 || order[0] != "b" {
			t.Fatalf("node %d renewed %v, want b (valid until +%v) before a (+%v)", i, order, bDeadline, aDeadline)
		}
	}
}

// The scheduler's heap gives renewals by due time, whatever order they
// were queued in, with pushes between the pops as the scheduler makes them.
func TestRenewalHeapGivesTheEarliestDueFirst(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	var h renewalHeap
	due := map[*renewal]time.Time{}
	push := func(ms int) {
		rn := &renewal{}
		due[rn] = base.Add(time.Duration(ms) * time.Millisecond)
		h.push(due[rn], rn)
	}
	for i := range 200 {
		push((i * 7919) % 1000) // every residue once, in a scrambled order, and some twice
	}
	var last time.Time
	for popped := 0; len(h) > 0; popped++ {
		rn := h.pop()
		if due[rn].Before(last) {
			t.Fatalf("pop %d gave a renewal due at +%v after one due at +%v", popped, due[rn].Sub(base), last.Sub(base))
		}
		last = due[rn]
		if popped%10 == 0 {
			push(int(last.Sub(base)/time.Millisecond) + popped) // due no earlier than the last pop, as a reschedule
		}
	}
}
