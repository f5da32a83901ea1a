//go:build unix

package redlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quorumlabs/redlock/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkRenewalRound measures one renewal round of 1,000 held mutexes
// on 5 local nodes (extendBatch, as the scheduler sends it): per round,
// the client's time and allocations; the servers run on the same cores, so
// the CPU each side spent is reported per renewal too (client-µs/renewal:
// this process, all 5 nodes' calls of a lock; server-µs/call: one node's
// share of one lock's renewal, from INFO cpu).
func BenchmarkRenewalRound(b *testing.B) {
	cl := redistest.StartT(b, 5, redistest.Options{})
	c, locks, cmds := heldForRenewal(b, cl)
	renewalRounds(b, cl, c, locks, cmds)
}

// BenchmarkNativeRenewalRound is BenchmarkRenewalRound (1,000 held
// mutexes, one round as the scheduler sends it) on 3 nodes of each build
// that has SET IFEQ, with the batched script and with the native extend
// (native.go) in one run: the client's time, allocations and CPU per
// renewal, and each node's share of the servers' CPU.
//
//	go test -run '^$' -bench BenchmarkNativeRenewalRound -count 3 .
func BenchmarkNativeRenewalRound(b *testing.B) {
	for _, server := range nativeBuilds {
		b.Run(server, func(b *testing.B) {
			cl := redistest.StartT(b, 3, redistest.Options{Server: server})
			c, locks, cmds := heldForRenewal(b, cl)
			for _, path := range []string{"script", "native"} {
				b.Run(path, func(b *testing.B) {
					if path == "script" {
						scriptsOnly(c)
					} else {
						nativeAgain(c)
					}
					if got := nativeExtendOK(c.nodes[0]); got != (path == "native") {
						b.Fatalf("%s path: native extend %v", path, got)
					}
					renewalRounds(b, cl, c, locks, cmds)
				})
			}
		})
	}
}

// heldForRenewal is a client of cl's servers (closed at b's cleanup)
// holding 1,000 mutexes, each with its extendMu held and its extend
// command built, kept from round to round as the scheduler keeps them.
func heldForRenewal(b *testing.B, cl *redistest.Cluster) (*Client, []*Lock, [][]any) {
	b.Helper()
	c, err := New(cl.Clients(), Options{TTL: time.Minute, RestartGrace: NoRestartGrace})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
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
	return c, locks, cmds
}

// renewalRounds runs b's loop of renewal rounds of locks (extendBatch),
// each lock of which must be renewed, and reports the CPU per renewal:
// client-µs/renewal, this process, all nodes' calls of a lock;
// server-µs/call, one node's share of one lock's renewal.
func renewalRounds(b *testing.B, cl *redistest.Cluster, c *Client, locks []*Lock, cmds [][]any) {
	b.Helper()
	ctx := context.Background()
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
}

// selfCPU is the CPU time this process used so far.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serversCPU is the CPU time the servers used so far (INFO cpu's
// used_cpu_sys and used_cpu_user, in seconds).
func serversCPU(b *testing.B, rdbs []redis.UniversalClient) time.Duration {
	var sum time.Duration
	for _, rdb := range rdbs {
		sum += infoCPU(b, rdb, "used_cpu_sys", "used_cpu_user")
	}
	return sum
}

// infoCPU is the sum of the named fields of rdb's INFO cpu (seconds), each
// of which must be there.
func infoCPU(b *testing.B, rdb redis.UniversalClient, fields ...string) time.Duration {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum time.Duration
	found := 0
	for line := range strings.Lines(info) {
		name, val, _ := strings.Cut(strings.TrimSpace(line), ":")
		if slices.Contains(fields, name) {
			s, err := strconv.ParseFloat(val, 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %v", line, err)
			}
			sum += time.Duration(s * float64(time.Second))
			found++
		}
	}
	if found != len(fields) {
		b.Fatalf("INFO cpu has not all of %v: %q", fields, info)
	}
	return sum
}
