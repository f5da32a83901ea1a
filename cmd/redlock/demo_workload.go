package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/fence"
	"github.com/redis/go-redis/v9"
)

// workload is the demo's job: workers that take the lock and, holding it, do a fenced
// read-modify-write increment of a counter kept on a separate Redis. It records what happened
// for judge; it judges nothing itself.
type workload struct {
	lockName   string
	counterKey string
	counter    *redis.Client // the resource the lock guards
	ttl        time.Duration
	out        *progress
	started    time.Time

	// stallNext, set by the fault schedule, makes the next holder stall past its TTL between
	// reading the counter and writing it: the case fencing tokens exist for.
	stallNext atomic.Bool

	acquired, applied, rejected atomic.Int64 // live figures for the progress line

	mu      sync.Mutex
	history []acquisition
	gaveUp  int // Acquire calls that ran out of their wait
}

// counterTimeout bounds each counter read or write. The counter's Redis is local and never
// faulted, so this only fires if something is badly wrong.
const counterTimeout = 2 * time.Second

// elapsed formats the time since the run started, for event lines.
func (w *workload) elapsed() string {
	return fmt.Sprintf("%6.1fs", time.Since(w.started).Seconds())
}

// run is one worker: acquire, increment, release, until ctx is done.
func (w *workload) run(ctx context.Context, id int, client *redlock.Client) {
	for ctx.Err() == nil {
		invoked := time.Now()
		lock, err := client.Acquire(ctx, w.lockName, redlock.WithMaxWait(3*w.ttl))
		acquired := time.Now()
		if err != nil {
			if ctx.Err() == nil {
				w.mu.Lock()
				w.gaveUp++
				w.mu.Unlock()
			}
			continue
		}
		w.acquired.Add(1)
		stall := w.stallNext.CompareAndSwap(true, false)
		result := w.increment(ctx, id, lock, stall)
		releasing := time.Now()
		heldUntil := lock.Deadline()
		if releasing.Before(heldUntil) {
			heldUntil = releasing
		}
		// A stalled holder's lock has expired: its release finds nothing, as expected.
		_ = lock.Release(context.WithoutCancel(ctx))

		w.mu.Lock()
		w.history = append(w.history, acquisition{
			worker: id, token: lock.Token(), invoked: invoked, acquired: acquired,
			heldUntil: heldUntil, write: result, stalled: stall,
		})
		w.mu.Unlock()
		// A short pause between jobs keeps the load light on a shared machine.
		sleepCtx(ctx, time.Duration(5+rand.IntN(20))*time.Millisecond)
	}
}

// increment reads the counter and writes it back plus one, fenced with the lock's token.
func (w *workload) increment(ctx context.Context, id int, lock *redlock.Lock, stall bool) writeResult {
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), counterTimeout)
	value, _, err := fence.Get(opCtx, w.counter, w.counterKey)
	cancel()
	if err != nil {
		return writeNotTried
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if value != "" && err != nil {
		return writeNotTried
	}
	if stall {
		w.out.eventf("%s  worker %d holds token %d, reads %d, then stalls past its %v TTL (think: a long GC pause)", w.elapsed(), id, lock.Token(), n, w.ttl)
		if !w.stallUntilOvertaken(ctx, lock.Token()) {
			w.out.eventf("%s  worker %d: no newer holder wrote while it stalled; it drops its write", w.elapsed(), id)
			return writeNotTried
		}
	}
	opCtx, cancel = context.WithTimeout(context.WithoutCancel(ctx), counterTimeout)
	defer cancel()
	err = fence.Set(opCtx, w.counter, w.counterKey, lock.Token(), strconv.FormatInt(n+1, 10))
	var stale *fence.StaleTokenError
	switch {
	case err == nil:
		w.applied.Add(1)
		if stall {
			w.out.eventf("%s  worker %d wakes and writes %d with stale token %d: ACCEPTED, fencing failed", w.elapsed(), id, n+1, lock.Token())
		}
		return writeApplied
	case errors.As(err, &stale):
		w.rejected.Add(1)
		who := "a holder that outlived its validity"
		if stall {
			who = fmt.Sprintf("worker %d wakes and", id)
		}
		w.out.eventf("%s  %s writes %d with stale token %d: rejected, the counter has seen token %d", w.elapsed(), who, n+1, stale.Token, stale.Highest)
		return writeRejected
	}
	// A timeout or a broken connection: the write may or may not have landed.
	return writeAmbiguous
}

// stallUntilOvertaken waits until a newer holder has written the counter: the stalled holder
// then wakes up with a stale token, the situation to show. It gives up after a few TTLs or
// when the run ends.
func (w *workload) stallUntilOvertaken(ctx context.Context, token int64) bool {
	giveUp := time.Now().Add(5 * w.ttl)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for time.Now().Before(giveUp) {
		opCtx, cancel := context.WithTimeout(ctx, counterTimeout)
		_, fence, err := fence.Get(opCtx, w.counter, w.counterKey)
		cancel()
		if err == nil && fence > token {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-poll.C:
		}
	}
	return false
}

// results returns the history and the number of acquisitions that gave up waiting.
func (w *workload) results() ([]acquisition, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]acquisition(nil), w.history...), w.gaveUp
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
