package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/fence"
)

// The resource the clients guard lives on the resource server: a hash
// written only through the library's fenced write, and a plain counter
// (the unfenced register) incremented by read-modify-write.
const (
	resourceKey = "chaos:resource"
	registerKey = "chaos:register"
)

// workload makes K clients contend for one lock. Every step of every
// client goes into the history; the workload never judges what it sees.
type workload struct {
	rec *Recorder
	// lockers are the clients' lockers, by client; nil for a late client
	// not made yet (Scenario.Late). A Fresh step replaces one: use
	// locker(c) once the workload runs.
	lockers []Locker
	// arrived[c] is closed once client c has a locker.
	arrived  []chan struct{}
	mu       sync.Mutex
	resource *redis.Client
	control  *clientControl
	ttl      time.Duration
	hold     time.Duration // "work" done while holding, between read and write of the register
	margin   time.Duration // act only with at least this much validity left
	useDo    bool
}

// run drives every client until ctx ends, then waits for each to finish
// the hold it is in (holds and stalls are bounded, so this ends).
func (w *workload) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range w.lockers {
		wg.Go(func() { w.client(ctx, i) })
	}
	wg.Wait()
}

func (w *workload) client(ctx context.Context, c int) {
	// A late client waits for its first locker, parked meanwhile.
	w.control.park(ctx, w.arrived[c])
	for ctx.Err() == nil {
		w.control.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		hold := w.rec.NewHold()
		ev := func(k EventKind) Event { return Event{Kind: k, Client: c, Hold: hold} }
		invoked := w.rec.Record(ev(AcquireInvoke)).At
		if w.useDo {
			w.doOnce(ctx, c, hold, invoked, ev)
			w.think(ctx)
			continue
		}
		attemptCtx, stop := w.control.attemptContext(ctx)
		h, err := w.locker(c).Acquire(attemptCtx)
		stop()
		if err != nil {
			e := ev(AcquireFail)
			e.Err = err.Error()
			w.rec.Record(e)
			continue
		}
		w.acquired(ev, h, invoked)
		w.body(ctx, c, hold, h)
		w.rec.Record(ev(ReleaseInvoke))
		// Release outlives the workload's end: a client that stops still
		// gives its lock back.
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*w.ttl)
		err = h.Release(relCtx)
		cancel()
		w.recordRelease(ev, err)
		w.think(ctx)
	}
}

// locker is client c's locker now.
func (w *workload) locker(c int) Locker {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lockers[c]
}

// setLocker gives client c the locker l, a new process that has met no
// node, and returns the one it replaces (nil for a late client's first).
// The client takes it at its next attempt: replace only a parked client's.
func (w *workload) setLocker(c int, l Locker) Locker {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.lockers[c]
	w.lockers[c] = l
	if old == nil {
		close(w.arrived[c])
	}
	return old
}

// think pauses a client between a release and its next attempt for a
// random time up to the hold time: without it a naive lock that is polled
// goes straight back to whoever just released it, and the other clients
// starve.
func (w *workload) think(ctx context.Context) {
	if w.hold <= 0 {
		return
	}
	select {
	case <-time.After(rand.N(w.hold)):
	case <-ctx.Done():
	}
}

func (w *workload) acquired(ev func(EventKind) Event, h Held, invoked time.Duration) {
	e := ev(AcquireOK)
	e.Token = h.Token()
	e.Slot = slotOf(h)
	e.Deadline = w.rec.Since(h.Deadline())
	if isShared(h) {
		e.Detail = SharedHold
	}
	w.rec.Record(e)
	if w.control.claimPin(e.Client, e.Hold, invoked) {
		n := ev(NemesisNote)
		n.Detail = "hold pinned by the nemesis"
		w.rec.Record(n)
	}
}

func (w *workload) recordRelease(ev func(EventKind) Event, err error) {
	if err != nil {
		e := ev(ReleaseFail)
		e.Err = err.Error()
		w.rec.Record(e)
		return
	}
	w.rec.Record(ev(ReleaseOK))
}

// doOnce is one hold through the library's Do, which keeps the lock
// extended while the body runs and cancels the body's ctx on loss.
func (w *workload) doOnce(ctx context.Context, c, hold int, invoked time.Duration, ev func(EventKind) Event) {
	acquired := false
	// A quiesce ends the wait for the lock, and a hold under way too (Do
	// hands its ctx to the body): the holder stops early and releases.
	ctx, stop := w.control.attemptContext(ctx)
	defer stop()
	err := w.locker(c).Do(ctx, func(fnCtx context.Context, h Held) error {
		acquired = true
		w.acquired(ev, h, invoked)
		w.body(fnCtx, c, hold, h)
		// Do releases after fn returns: from here the client stops acting.
		w.rec.Record(ev(ReleaseInvoke))
		return nil
	})
	switch {
	case !acquired:
		e := ev(AcquireFail)
		e.Err = errString(err)
		w.rec.Record(e)
	default:
		w.recordRelease(ev, err)
	}
}

// body is what a holder does: check that its validity covers the work
// ahead, (stall, if a client pause is armed), write the fenced resource
// with its token, read the register, work, write the register. Like a real
// client it checks once, then acts: a stall after the check goes unnoticed.
func (w *workload) body(ctx context.Context, c, hold int, h Held) {
	ev := func(k EventKind) Event { return Event{Kind: k, Client: c, Hold: hold} }
	var seen time.Time
	observe := func() time.Time {
		d := h.Deadline()
		if !d.Equal(seen) {
			seen = d
			e := ev(ValidityObserved)
			e.Deadline = w.rec.Since(d)
			w.rec.Record(e)
		}
		return d
	}
	need := w.margin
	if !w.useDo {
		need += w.hold // without extension the validity must cover the work
	}
	if left := time.Until(observe()); left < need || ctx.Err() != nil {
		e := ev(Abandoned)
		e.Detail = fmt.Sprintf("%s of validity left, need %s", left.Round(time.Millisecond), need)
		w.rec.Record(e)
		return
	}
	if d := w.control.stallFor(c); d > 0 {
		e := ev(ClientStall)
		e.Duration = d
		w.rec.Record(e)
		time.Sleep(d) // the injected pause itself: nothing to wait for
	}
	if isShared(h) {
		// A reader only reads: it holds the lock for the work's time.
		w.work(ctx, hold, observe)
		return
	}
	// The writes go out even if the lock was lost during a stall: the
	// stalled client does not know. Only the fence can stop it.
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.ttl)
	defer cancel()
	e := ev(FencedWriteInvoke)
	e.Token = h.Token()
	w.rec.Record(e)
	err := fence.Set(opCtx, w.resource, fencedKey(h), h.Token(), fmt.Sprintf("c%d/h%d", c, hold))
	e = ev(FencedWriteOK)
	e.Token = h.Token()
	switch {
	case errors.Is(err, fence.ErrStaleToken):
		e.Kind = FencedWriteStale
		e.Err = err.Error()
	case err != nil:
		e.Kind = FencedWriteFail
		e.Err = err.Error()
	}
	w.rec.Record(e)

	w.rec.Record(ev(RegisterInvoke))
	v, err := w.resource.Get(opCtx, registerKey).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		w.registerFail(ev, err)
		return
	}
	w.work(ctx, hold, observe)
	if ctx.Err() != nil && w.useDo {
		// Do cancels the body's ctx when the lock is lost: stop there.
		w.registerFail(ev, fmt.Errorf("abandoned: %w", context.Cause(ctx)))
		return
	}
	if err := w.resource.Set(opCtx, registerKey, v+1, 0).Err(); err != nil {
		w.registerFail(ev, err)
		return
	}
	e = ev(RegisterOK)
	e.Value = v + 1
	w.rec.Record(e)
}

// work spends the hold time, looking at the validity deadline now and
// then (under Do it moves as the library extends the lock). A hold the
// nemesis pinned goes on until unpinned, but never into the last margin
// of its validity.
func (w *workload) work(ctx context.Context, hold int, observe func() time.Time) {
	end := time.Now().Add(w.hold)
	for {
		left := time.Until(end)
		if w.control.isPinned(hold) {
			left = time.Until(observe()) - w.margin
		}
		if left <= 0 {
			return
		}
		select {
		case <-time.After(min(left, w.ttl/10)):
			observe()
		case <-ctx.Done():
			return
		}
	}
}

func (w *workload) registerFail(ev func(EventKind) Event, err error) {
	e := ev(RegisterFail)
	e.Err = err.Error()
	w.rec.Record(e)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
