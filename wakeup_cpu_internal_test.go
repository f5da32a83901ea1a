package redlock

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/redistest"
)

// TestWakeupServerCPU measures the servers' CPU per acquire+release on a
// standalone node and on Cluster nodes of 1, 2 and 3 masters, with
// releases announced by classic PUBLISH (the "before", classicWakeups) and
// by SPUBLISH, in one run. It is a measurement, not a check: it runs only
// with REDLOCK_WAKEUP_CPU set (its value the number of operations, 20000
// if not a number), and logs a table:
//
//	REDLOCK_WAKEUP_CPU=20000 go test -run TestWakeupServerCPU -count=1 -v .
//
// Two figures per row, summed over every server: the usec of the scripts'
// own commands in INFO commandstats (evalsha and eval, whose time includes
// the PUBLISH they call, but not what a broadcast costs the other masters),
// and used_cpu_sys+used_cpu_user from INFO cpu, which also counts the
// other masters' handling of the cluster bus.
func TestWakeupServerCPU(t *testing.T) {
	env := os.Getenv("REDLOCK_WAKEUP_CPU")
	if env == "" {
		t.Skip("a measurement: set REDLOCK_WAKEUP_CPU (the number of operations) to run it")
	}
	ops, err := strconv.Atoi(env)
	if err != nil || ops <= 0 {
		ops = 20000
	}
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		t.Logf("load average at the start: %s", strings.TrimSpace(string(la)))
	}
	ctx := context.Background()
	type row struct {
		setup           string
		scriptUs, cpuUs float64
	}
	var rows []row
	measure := func(setup string, servers []*redistest.Server, rdb redis.UniversalClient) {
		c, err := New([]redis.UniversalClient{rdb}, Options{AllowNoFaultTolerance: true, RestartGrace: NoRestartGrace})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Verify(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 200 { // warm: scripts loaded, connections made
			l, err := c.TryAcquire(ctx, fmt.Sprintf("warm-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			_ = l.Release(ctx)
		}
		before := serverCPU(t, servers, "evalsha", "eval")
		for i := range ops {
			l, err := c.TryAcquire(ctx, fmt.Sprintf("cpu-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		after := serverCPU(t, servers, "evalsha", "eval")
		rows = append(rows, row{setup, (after[0] - before[0]) / float64(ops), (after[1] - before[1]) / float64(ops)})
	}

	standalone := redistest.StartT(t, 1, redistest.Options{})
	measure("standalone", standalone.Servers, standalone.Clients()[0])
	for _, masters := range []int{1, 2, 3} {
		rc := redistest.StartRedisClusterT(t, masters, 0, redistest.Options{})
		for _, classic := range []bool{true, false} {
			classicWakeups.Store(classic)
			cc := rc.ClusterClient()
			how := "SPUBLISH"
			if classic {
				how = "PUBLISH (before)"
			}
			measure(fmt.Sprintf("cluster, %d masters, %s", masters, how), rc.Servers, cc)
			_ = cc.Close()
		}
		classicWakeups.Store(false)
	}
	base := rows[0]
	t.Logf("%d acquire+release per row; server time per op, and as a ratio of standalone", ops)
	t.Logf("%-36s %14s %8s %14s %8s", "node", "scripts µs/op", "ratio", "CPU µs/op", "ratio")
	for _, r := range rows {
		t.Logf("%-36s %14.2f %8.2f %14.2f %8.2f", r.setup, r.scriptUs, r.scriptUs/base.scriptUs, r.cpuUs, r.cpuUs/base.cpuUs)
	}
}

// serverCPU sums over servers the usec INFO commandstats gives cmds, and
// used_cpu_sys+used_cpu_user in INFO cpu, in µs.
func serverCPU(tb testing.TB, servers []*redistest.Server, cmds ...string) [2]float64 {
	tb.Helper()
	var out [2]float64
	for _, s := range servers {
		info, err := s.Client().Info(context.Background(), "commandstats", "cpu").Result()
		if err != nil {
			tb.Fatalf("%s: INFO: %v", s.Addr, err)
		}
		f := parseInfo(info)
		for _, cmd := range cmds {
			for _, kv := range strings.Split(f["cmdstat_"+cmd], ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					us, _ := strconv.ParseFloat(v, 64)
					out[0] += us
				}
			}
		}
		for _, k := range []string{"used_cpu_sys", "used_cpu_user"} {
			sec, _ := strconv.ParseFloat(f[k], 64)
			out[1] += sec * 1e6
		}
	}
	return out
}
