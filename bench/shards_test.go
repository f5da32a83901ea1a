package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestCommandCalls(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_eval:calls=3,usec=30,usec_per_call=10.00\r\ncmdstat_evalsha:calls=120,usec=900,usec_per_call=7.50,rejected_calls=0\r\n"
	if got := commandCalls(info, "evalsha"); got != 120 {
		t.Errorf("evalsha: %d, want 120", got)
	}
	if got := commandCalls(info, "eval"); got != 3 {
		t.Errorf("eval: %d, want 3 (not evalsha's)", got)
	}
	if got := commandCalls(info, "get"); got != 0 {
		t.Errorf("a command never run: %d", got)
	}
}

// One node that is a Cluster of two masters against one standalone master:
// the names spread over both masters, and every operation ran scripts.
func TestRunShardsSpreadsNamesOverMasters(t *testing.T) {
	rows, err := RunShards(context.Background(), ShardsConfig{Nodes: 1, Shards: []int{0, 2}, Workers: 4, Names: 64, Duration: 300 * time.Millisecond, Repeats: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || len(rows[0].Scripts[0]) != 1 || len(rows[1].Scripts[0]) != 2 {
		t.Fatalf("want a standalone row of 1 master and a cluster row of 2, got %+v", rows)
	}
	for _, r := range rows {
		if r.OpsPerSec <= 0 || r.ServerCPUPerOp <= 0 {
			t.Errorf("%s: %.0f ops/s, %v server CPU per op", layoutName(r.Shards), r.OpsPerSec, r.ServerCPUPerOp)
		}
	}
	for m, calls := range rows[1].Scripts[0] {
		if calls == 0 {
			t.Errorf("master %d of the cluster ran no script: the names did not spread (%v)", m, rows[1].Scripts[0])
		}
	}
	var out strings.Builder
	WriteShardsTable(&out, rows)
	if !strings.Contains(out.String(), "cluster of 2") || !strings.Contains(out.String(), "1.00x") {
		t.Errorf("table:\n%s", out.String())
	}
}
