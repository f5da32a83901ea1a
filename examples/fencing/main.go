// Command fencing shows the resource side of a lock: a write carries the
// holder's fencing token, and the resource refuses a token lower than the
// highest it has seen, so a holder that stalled past its lock cannot write.
//
// Start three local lock masters and one Redis as the resource (or set
// REDLOCK_NODES and REDLOCK_RESOURCE to your own):
//
//	for p in 7001 7002 7003 7004; do redis-server --port $p --save '' --daemonize yes; done
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
	store, err := setup.Redis("REDLOCK_RESOURCE", "redis://127.0.0.1:7004") // not a lock node: the data the lock guards
	if err != nil {
		return err
	}
	defer store.Close()

	// Two holders one after the other: the second's token is higher.
	first, err := client.Acquire(ctx, "balance:alice", redlock.WithMaxWait(10*time.Second))
	if err != nil {
		return err
	}
	if err := first.Release(ctx); err != nil {
		return err
	}
	second, err := client.Acquire(ctx, "balance:alice", redlock.WithMaxWait(10*time.Second))
	if err != nil {
		return err
	}
	defer second.Release(ctx)

	// fence.Set writes the value and the token in one script, and only if
	// the token is at least the highest the key has seen.
	if err := fence.Set(ctx, store, "balance:alice", second.Token(), "100"); err != nil {
		return err
	}
	// The first holder, paused past its lock (a GC, a VM freeze), wakes up
	// and writes with its old token: refused.
	err = fence.Set(ctx, store, "balance:alice", first.Token(), "0")
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) {
		return fmt.Errorf("the stale write was not refused: %v", err)
	}
	fmt.Printf("refused token %d: the key saw %d\n", stale.Token, stale.Highest)
	value, token, err := fence.Get(ctx, store, "balance:alice")
	if err != nil {
		return err
	}
	fmt.Printf("balance:alice = %s, written under token %d\n", value, token)

	// In-process resources keep a fence.Guard: one per resource, in the process
	// that owns it.
	var guard fence.Guard
	fmt.Println(guard.Admit(second.Token()))                                // <nil>
	fmt.Println(errors.Is(guard.Admit(first.Token()), fence.ErrStaleToken)) // true
	return nil
}
