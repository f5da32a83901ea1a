// Command acquire takes a lock by hand: TryAcquire for one attempt, Acquire to
// wait, and the Lock handle's Token, Deadline, Extend, Done and Release.
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
)

func main() {
	setup.Run(run)
}

func run(ctx context.Context, client *redlock.Client) error {
	// Acquire waits (here at most 10s) and is woken by the holder's release.
	l, err := client.Acquire(ctx, "cron:billing",
		redlock.WithMaxWait(10*time.Second),
		redlock.WithMetadata("host=web-1 job=billing"), // shown by Inspect and `redlock status`
	)
	if err != nil {
		return err
	}
	defer l.Release(ctx)
	fmt.Printf("token %d, valid for %v\n", l.Token(), time.Until(l.Deadline()).Round(100*time.Millisecond))

	// A second attempt meets the holder: ErrLocked (a *LockedError), not a failure.
	_, err = client.TryAcquire(ctx, "cron:billing")
	var held *redlock.LockedError
	if errors.As(err, &held) {
		fmt.Println("another owner holds cron:billing; skipping")
	} else if err != nil {
		return err
	}

	// Inspect shows who holds the lock, on which nodes, with what metadata.
	st, err := client.Inspect(ctx, "cron:billing")
	if err != nil {
		return err
	}
	fmt.Printf("held: %v, by %q\n", st.Held, st.Metadata)

	// Without WithAutoExtend, the holder extends before Deadline itself.
	if err := l.Extend(ctx); err != nil {
		return err // redlock.ErrLockLost: stop the guarded work
	}
	select {
	case <-l.Done(): // closes the moment the lock is lost
		return l.Err()
	default:
	}
	return l.Release(ctx)
}
