// Command fair serves waiters in the order they began to wait, the release
// handing the lock straight to the next one.
//
// Start three local masters first (or set REDLOCK_NODES to your own):
//
//	for p in 7001 7002 7003; do redis-server --port $p --save '' --daemonize yes; done
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/examples/internal/setup"
)

func main() {
	setup.Run(run)
}

func run(ctx context.Context, client *redlock.Client) error {
	l, err := client.Acquire(ctx, "invoices", redlock.WithFairness(), redlock.WithMaxWait(10*time.Second))
	if err != nil {
		return err // gave up: our place in the queue is gone on every node
	}

	// A second caller queues behind the holder.
	served := make(chan error, 1)
	go func() {
		served <- client.Do(ctx, "invoices", func(ctx context.Context, next *redlock.Lock) error {
			fmt.Printf("the waiter was handed the lock, token %d > %d\n", next.Token(), l.Token())
			return nil
		}, redlock.WithFairness(), redlock.WithMaxWait(10*time.Second))
	}()

	// Queue reads each node's queue: the waiter shows up there.
	for deadline := time.Now().Add(10 * time.Second); ; {
		queues, err := client.Queue(ctx, "invoices")
		if err != nil {
			return err
		}
		if len(queues[0].Entries) > 0 {
			fmt.Printf("queue on %s: %d entries\n", queues[0].Node, len(queues[0].Entries))
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the waiter never joined the queue")
		}
		time.Sleep(20 * time.Millisecond) // polling a read-only view, not synchronising
	}
	if err := l.Release(ctx); err != nil { // hands the lock to the head of the queue
		return err
	}
	return <-served
}
