package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// Nodes that are deployments, given as URLs: a Redis Cluster whose masters have replicas and
// a master managed by Sentinel, with one plain master. nodes shows each node's kind, the
// master that serves the lock, its replicas and whether votes are durable; exec refuses where
// the library refuses (the Sentinel node at New), and status warns there but still shows the
// lock; with --allow-failover-nodes or --durable-votes exec takes the lock.
func TestDeploymentNodesView(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rc, ss := redistest.StartDeploymentsT(t, ctx, 1)
	urls := []string{
		shared.URLs()[0],
		"redis+cluster://" + rc.Addrs()[0] + "?addr=" + rc.Addrs()[1],
		"redis+sentinel://" + ss.SentinelAddrs()[0] + "?master_name=" + ss.Name + "&addr=" + ss.SentinelAddrs()[1],
	}
	nodes := "--nodes=" + strings.Join(urls, ",")
	name := lockName(t)
	probe, err := redlock.NewFromURLs(urls, redlock.Options{AllowFailoverNodes: true})
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	slotMaster, err := rc.MasterFor(ctx, probe.Keys(name).Slot)
	if err != nil {
		t.Fatal(err)
	}
	sentinelMaster, err := ss.CurrentMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}

	r := run(t, "nodes", ttlFlag, noGrace, nodes, name)
	for _, want := range []string{"MASTER_OF_LOCK", "cluster", "sentinel", slotMaster.Addr, sentinelMaster.Addr, "no: refused, exec exits 64", "locks: no", "--allow-failover-nodes"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("nodes without --allow-failover-nodes: %q missing from\n%s", want, r.stdout)
		}
	}
	if r.code != exitFailure {
		t.Errorf("nodes without --allow-failover-nodes: exit %d, want %d", r.code, exitFailure)
	}
	e := run(t, "exec", ttlFlag, noGrace, nodes, name, "--", "true")
	if e.code != exitUsage || !strings.Contains(e.stderr, "FailoverClient#3") || !strings.Contains(e.stderr, "--allow-failover-nodes") {
		t.Errorf("exec without --allow-failover-nodes: want exit %d naming the Sentinel node and the flag, got %v", exitUsage, e)
	}
	s := run(t, "status", nodes, name)
	if !strings.Contains(s.stderr, "warning") || !strings.Contains(s.stderr, "FailoverClient#3") || !strings.Contains(s.stdout, "held: no") {
		t.Errorf("status without --allow-failover-nodes: want a warning naming the Sentinel node and the lock's status, got %v", s)
	}

	// The new servers sit out a grace of one TTL, and a replica acknowledges once a second.
	var v result
	for deadline := time.Now().Add(20 * time.Second); ; {
		v = run(t, "nodes", ttlFlag, noGrace, "--allow-failover-nodes", nodes, name)
		if v.code == 0 && strings.Count(v.stdout, " online ") == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes --allow-failover-nodes: not every node votes with its replica online within 20s:\n%s", v.stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(v.stdout, "no: accepted (--allow-failover-nodes)") || !strings.Contains(v.stdout, "locks: yes") {
		t.Errorf("nodes --allow-failover-nodes: want accepted, not durable votes and locks yes, got\n%s", v.stdout)
	}
	if x := run(t, "exec", ttlFlag, noGrace, "--allow-failover-nodes", nodes, name, "--", "true"); x.code != 0 {
		t.Errorf("exec --allow-failover-nodes: got %v", x)
	}
	// Durable votes: the nodes with replicas are accepted, and their votes wait for them.
	d := run(t, "nodes", ttlFlag, noGrace, "--durable-votes", nodes, name)
	if d.code != 0 || strings.Count(d.stdout, "yes: every vote waits for the master's replicas") != 2 || !strings.Contains(d.stdout, "n/a: no replica") {
		t.Errorf("nodes --durable-votes: want exit 0, the two nodes with replicas durable and the plain master n/a, got %v", d)
	}
	if x := run(t, "exec", ttlFlag, noGrace, "--durable-votes", nodes, name, "--", "true"); x.code != 0 {
		t.Errorf("exec --durable-votes: got %v", x)
	}
}
