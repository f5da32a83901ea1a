package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// interruptSignals end a waiting or running redlock cleanly (stop what it started, release
// what it holds) instead of killing it with its servers or its lock left behind.
var interruptSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// interrupts cancels a context on the first interrupt signal and remembers which one came,
// so the exit code can say 128+N as a shell would.
type interrupts struct {
	ch     chan os.Signal
	done   chan struct{}
	mu     sync.Mutex
	caught os.Signal
}

// watchInterrupts returns a context cancelled by the first SIGINT, SIGTERM or SIGHUP. Later
// signals are swallowed while the command winds down (a second Ctrl-C must not orphan the
// Redis servers the demo started). Call stop when done.
func watchInterrupts(parent context.Context) (context.Context, *interrupts) {
	ctx, cancel := context.WithCancel(parent)
	in := &interrupts{ch: make(chan os.Signal, 4), done: make(chan struct{})}
	signal.Notify(in.ch, interruptSignals...)
	go func() {
		defer cancel()
		select {
		case sig := <-in.ch:
			in.mu.Lock()
			in.caught = sig
			in.mu.Unlock()
			cancel()
		case <-in.done:
			return
		}
		for {
			select {
			case <-in.ch:
			case <-in.done:
				return
			}
		}
	}()
	return ctx, in
}

// signal returns the interrupt that arrived, or nil.
func (in *interrupts) signal() os.Signal {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.caught
}

// err returns an error carrying exit code 128+N for the interrupt that arrived, or nil.
func (in *interrupts) err() error {
	sig := in.signal()
	if sig == nil {
		return nil
	}
	return withExitCode(signalExitCode(sig), fmt.Errorf("interrupted by %v", sig))
}

// stop restores default signal handling.
func (in *interrupts) stop() {
	signal.Stop(in.ch)
	close(in.done)
}

// signalExitCode is the shell's convention for "ended by signal N".
func signalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return exitSignalBase + int(s)
	}
	return exitFailure
}
