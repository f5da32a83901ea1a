// Command rwlock lets many readers render a report at once while a writer
// updating it has it alone.
//
// Start three local masters first (or set REDLOCK_NODES to your own):
//
//	for p in 7001 7002 7003; do redis-server --port $p --save '' --daemonize yes; done
package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/examples/internal/setup"
	"github.com/quorumlabs/redlock/fence"
)

func main() {
	setup.Run(run)
}

func run(ctx context.Context, client *redlock.Client) error {
	var report fence.Guard // the resource: refuses a token below its last write's
	rw := client.RWLock("report:42")

	// A writer has the lock alone; its token comes from the name's fence register.
	err := rw.DoWrite(ctx, func(ctx context.Context, l *redlock.Lock) error {
		fmt.Println("writing report:42")
		return report.Admit(l.Token())
	})
	if err != nil {
		return err
	}
	// Readers share it. A reader's token is at least the last writer's, so the
	// resource can refuse a reader that stalled past a later write.
	err = rw.DoRead(ctx, func(ctx context.Context, l *redlock.Lock) error {
		if l.Token() < report.Highest() {
			return fmt.Errorf("stale reader: token %d below the last write's %d", l.Token(), report.Highest())
		}
		fmt.Println("reading report:42")
		return nil
	})
	if err != nil {
		return err
	}

	// One attempt, while a writer holds the lock: ErrLocked, and no handle.
	w, err := rw.Lock(ctx, redlock.WithMaxWait(10*time.Second))
	if err != nil {
		return err
	}
	r, err := rw.TryRLock(ctx)
	switch {
	case errors.Is(err, redlock.ErrLocked):
		fmt.Println("a writer holds report:42; reading later")
	case err != nil:
		return err
	default:
		// Not reached while w is held; shown for the shape of the code.
		defer r.Release(ctx)
	}
	return w.Release(ctx)
}
