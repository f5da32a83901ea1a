package main

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
)

// waitStatus is what exec --wait shows on a terminal while it waits: a one-line status,
// redrawn in place, saying what it waits for and how long it has left. Off a terminal it
// shows nothing (a pipe, a CI log): the outcome is told once, at the end.
type waitStatus struct {
	mu         sync.Mutex
	graceUntil time.Time // when the nodes' restart grace lets a quorum vote, if it is awaited
	graceNodes string    // how many nodes sit it out, for the line
	last       error     // the last failed attempt's error
}

// Observe implements observe.Observer: it keeps what the line needs.
func (w *waitStatus) Observe(e observe.Event) {
	switch e.Kind {
	case observe.GraceWait:
		w.mu.Lock()
		w.graceUntil = time.Now().Add(e.Wait)
		w.graceNodes = graceNodes(e.Err)
		w.mu.Unlock()
	case observe.AcquireFailed:
		w.mu.Lock()
		w.last = e.Err
		w.mu.Unlock()
	}
}

// graceNodes takes "3 of 5 nodes" out of an observe.GraceWait's error.
func graceNodes(err error) string {
	var n, of int
	if err != nil {
		msg := err.Error()
		for i := range msg {
			if _, scanErr := fmt.Sscanf(msg[i:], "%d of %d nodes", &n, &of); scanErr == nil {
				return fmt.Sprintf("%d of %d nodes", n, of)
			}
		}
	}
	return "nodes"
}

// line is the status line at now, for the lock name that exec waits for until deadline.
func (w *waitStatus) line(name string, now, deadline time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	left := deadline.Sub(now).Round(100 * time.Millisecond)
	what := "waiting"
	var locked *redlock.LockedError
	switch {
	case now.Before(w.graceUntil):
		what = fmt.Sprintf("%s in their restart grace, a quorum votes in %v", w.graceNodes, w.graceUntil.Sub(now).Round(100*time.Millisecond))
	case errors.As(w.last, &locked):
		what = "held by another owner"
		if locked.Remaining > 0 {
			what += fmt.Sprintf(", its keys expire in %v at the latest", locked.Remaining)
		}
	case errors.Is(w.last, redlock.ErrNoQuorum):
		what = "waiting for a quorum of the nodes"
	}
	// What comes first: a narrow terminal cuts the end of the line.
	return fmt.Sprintf("redlock exec: %s; gives up in %v (lock %q)", what, max(left, 0), name)
}

// show redraws the status line on p every tick until stop is closed, then removes it.
func (w *waitStatus) show(p *progress, name string, deadline time.Time, stop <-chan struct{}) {
	if !p.tty {
		return
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		p.status(w.line(name, time.Now(), deadline))
		select {
		case <-stop:
			p.clearStatus()
			return
		case <-tick.C:
		}
	}
}
