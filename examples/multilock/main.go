// Command multilock takes two accounts' locks together, all or nothing, in an
// order that cannot deadlock with another caller taking them the other way.
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
	m, err := client.AcquireMulti(ctx, []string{"account:42", "account:7"}, redlock.WithMaxWait(5*time.Second))
	if err != nil {
		return err // nothing is held: names taken before the failure were released
	}
	defer m.Release(ctx)
	from, to := m.Lock("account:42"), m.Lock("account:7")
	fmt.Printf("moving 100 from account:42 (token %d) to account:7 (token %d)\n", from.Token(), to.Token())

	// DoMulti is Do for a set: every name auto-extended, ctx cancelled as soon
	// as any name is lost, all released when the function returns.
	return client.DoMulti(ctx, []string{"account:1", "account:2"}, func(ctx context.Context, m *redlock.MultiLock) error {
		for _, l := range m.Locks() { // sorted by name
			fmt.Println("holding", l.Name(), "with token", l.Token())
		}
		return nil
	}, redlock.WithMaxWait(5*time.Second))
}
