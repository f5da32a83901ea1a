package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlabs/redlock/redistest"
)

// BenchmarkRenewalRound measures one renewal round of 1,000 held mutexes
// on 5 local nodes (extendBatch, as the scheduler sends it): per round,
// the client's time and allocations; the servers run on the same cores.
func BenchmarkRenewalRound(b *testing.B) {
	cl := redistest.StartT(b, 5, redistest.Options{})
	c, err := New(cl.Clients(), Options{TTL: time.Minute, RestartGrace: NoRestartGrace})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	locks := make([]*Lock, 1000)
	for i := range locks {
		if locks[i], err = c.TryAcquire(ctx, fmt.Sprint("round-", i)); err != nil {
			b.Fatal(err)
		}
		locks[i].extendMu.Lock()
	}
	b.ReportAllocs()
	for b.Loop() {
		_, _, errs := c.extendBatch(ctx, locks, 5*time.Second)
		for i, err := range errs {
			if err != nil {
				b.Fatalf("round-%d: %v", i, err)
			}
		}
	}
}
