//go:build unix

package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlabs/redlock/redistest"
)

// BenchmarkNativeRenewalRound is BenchmarkRenewalRound (1,000 held
// mutexes, one round as the scheduler sends it) on 3 nodes of each build
// that has SET IFEQ, with the batched script and with the native extend
// (native.go) in one run: the client's time, allocations and CPU per
// renewal, and each node's share of the servers' CPU.
//
//	go test -run '^$' -bench BenchmarkNativeRenewalRound -count 3 .
func BenchmarkNativeRenewalRound(b *testing.B) {
	for _, server := range []string{redistest.Redis86, redistest.Valkey91} {
		b.Run(server, func(b *testing.B) {
			cl := redistest.StartT(b, 3, redistest.Options{Server: server})
			c, err := New(cl.Clients(), Options{TTL: time.Minute, RestartGrace: NoRestartGrace})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			locks := make([]*Lock, 1000)
			cmds := make([][]any, len(locks))
			for i := range locks {
				if locks[i], err = c.TryAcquire(ctx, fmt.Sprint("round-", i)); err != nil {
					b.Fatal(err)
				}
				locks[i].extendMu.Lock()
				cmds[i] = (&renewal{l: locks[i]}).extendArgs()
			}
			for _, path := range []string{"script", "native"} {
				b.Run(path, func(b *testing.B) {
					for _, n := range c.nodes {
						if path == "script" {
							n.pipes.nativeRefused.Store(^uint32(0))
						} else {
							n.pipes.nativeRefused.Store(0)
						}
					}
					if got := nativeExtendOK(c.nodes[0]); got != (path == "native") {
						b.Fatalf("%s path: native extend %v", path, got)
					}
					b.ReportAllocs()
					client0, servers0 := selfCPU(b), serversCPU(b, cl.Clients())
					rounds := 0
					for b.Loop() {
						_, _, errs := c.extendBatch(ctx, locks, cmds, 5*time.Second)
						for i, err := range errs {
							if err != nil {
								b.Fatalf("round-%d: %v", i, err)
							}
						}
						rounds++
					}
					renewals := float64(rounds * len(locks))
					b.ReportMetric(float64((selfCPU(b)-client0).Microseconds())/renewals, "client-µs/renewal")
					b.ReportMetric(float64((serversCPU(b, cl.Clients())-servers0).Microseconds())/renewals/float64(len(c.nodes)), "server-µs/call")
				})
			}
		})
	}
}
