// Command semaphore lets at most 2 workers encode at once, across every
// process that uses the same lock nodes.
//
// Start three local masters first (or set REDLOCK_NODES to your own):
//
//	for p in 7001 7002 7003; do redis-server --port $p --save '' --daemonize yes; done
package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/examples/internal/setup"
)

func main() {
	setup.Run(run)
}

func run(ctx context.Context, client *redlock.Client) error {
	const permits = 2 // a *ConfigError for K < 1, K > 256 or fewer than 3 nodes
	sem, err := client.Semaphore("encoder", permits)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = sem.Do(ctx, func(ctx context.Context, p *redlock.Permit) error {
				// At most 2 workers run here at once. Tokens rise per slot:
				// a resource keeps the highest token it saw for each slot.
				fmt.Printf("worker %d encodes in slot %d\n", i, p.Slot())
				st, err := sem.Holders(ctx) // per slot: owner, remaining validity, fence
				if err != nil {
					return err
				}
				if st.Held() > permits {
					return fmt.Errorf("%d holders of %d permits", st.Held(), permits)
				}
				return encode(ctx, p.Slot(), p.Token())
			})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// encode stands for the guarded work.
func encode(ctx context.Context, slot int, token int64) error {
	select {
	case <-time.After(50 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
