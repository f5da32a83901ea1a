package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// BenchmarkMultiLock compares a multi-lock of three names (acquire and
// release as one) with three mutexes taken and released one after another,
// uncontended, on 5 local nodes.
func BenchmarkMultiLock(b *testing.B) {
	names := []string{"bench-multi-a", "bench-multi-b", "bench-multi-c"}
	cl := redistest.StartT(b, 5, redistest.Options{})
	c, err := redlock.New(cl.Clients(), redlock.Options{TTL: 10 * time.Second, RestartGrace: redlock.NoRestartGrace})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.Run(fmt.Sprintf("multi/names=%d", len(names)), func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m, err := c.AcquireMulti(ctx, names)
			if err != nil {
				b.Fatal(err)
			}
			if err := m.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(fmt.Sprintf("sequential/names=%d", len(names)), func(b *testing.B) {
		b.ReportAllocs()
		locks := make([]*redlock.Lock, len(names))
		for b.Loop() {
			for i, n := range names {
				if locks[i], err = c.Acquire(ctx, n); err != nil {
					b.Fatal(err)
				}
			}
			for _, l := range locks {
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
