// Command reentrant takes a lock that a function it calls takes again: the
// held lock travels in the context, so the inner call does not wait for it.
//
// Start three local masters first (or set REDLOCK_NODES to your own):
//
//	for p in 7001 7002 7003; do redis-server --port $p --save '' --daemonize yes; done
package main

import (
	"context"
	"fmt"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/examples/internal/setup"
)

var client *redlock.Client

func main() {
	setup.Run(run)
}

func run(ctx context.Context, c *redlock.Client) error {
	client = c // the program's one lock client: transfer uses it too

	return client.Do(ctx, "account:42", func(ctx context.Context, l *redlock.Lock) error {
		fmt.Printf("outer: token %d\n", l.Token())
		return transfer(ctx) // transfer calls client.Do(ctx, "account:42", ...) itself
	})
}

func transfer(ctx context.Context) error {
	return client.Do(ctx, "account:42", func(ctx context.Context, l *redlock.Lock) error {
		fmt.Printf("inner: token %d, the same lock\n", l.Token()) // no wait for our own release
		return nil
	})
}
