package main

import (
	"strings"
	"testing"

	"github.com/quorumlabs/redlock/redistest"
)

// nodes shows each node's eviction policy, limit and evictions, exec
// refuses nodes that may evict keys naming the opt-in, and status warns of
// them.
func TestNodesShowEvictionAndExecRefusesEvictingNodes(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{Args: []string{"--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru"}})
	nodes := "--nodes=" + strings.Join(cl.URLs(), ",")
	r := run(t, "nodes", ttlFlag, noGrace, nodes)
	if !strings.Contains(r.stdout, "EVICTION") || !strings.Contains(r.stdout, "allkeys-lru 8388608B, 0 evicted") {
		t.Fatalf("nodes: want the EVICTION column with allkeys-lru, its limit and the evictions, got %v", r)
	}
	name := lockName(t)
	r = run(t, "exec", ttlFlag, noGrace, nodes, name, "--", "true")
	if r.code != exitUsage || !strings.Contains(r.stderr, "maxmemory-policy allkeys-lru") || !strings.Contains(r.stderr, "--allow-evicting-nodes") {
		t.Fatalf("exec on evicting nodes: want exit %d naming the policy and --allow-evicting-nodes, got %v", exitUsage, r)
	}
	r = run(t, "exec", ttlFlag, noGrace, "--allow-evicting-nodes", nodes, name, "--", "true")
	if r.code != 0 {
		t.Fatalf("exec on evicting nodes with --allow-evicting-nodes: %v", r)
	}
	r = run(t, "status", nodes, name)
	if !strings.Contains(r.stderr, "eviction allkeys-lru 8388608B, 0 evicted") {
		t.Fatalf("status on evicting nodes: want a warning naming the policy, got %v", r)
	}
}
