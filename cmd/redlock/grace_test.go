package main

import (
	"strings"
	"testing"

	"github.com/quorumlabs/redlock/redistest"
)

// TestExecWarnsWhenTheGraceIsOffOnNodesThatDoNotPersist: --restart-grace off
// is safe only on nodes with appendonly yes and appendfsync always. exec says
// so, naming the other nodes, and says nothing on nodes that persist.
func TestExecWarnsWhenTheGraceIsOffOnNodesThatDoNotPersist(t *testing.T) {
	volatile := redistest.StartT(t, 3, redistest.Options{})
	r := run(t, "exec", ttlFlag, noGrace, "--nodes="+strings.Join(volatile.URLs(), ","), lockName(t), "--", "true")
	if r.code != 0 {
		t.Fatalf("exec: exit %d, stderr %q", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "WARNING: ") || !strings.Contains(r.stderr, "the restart grace is off") || !strings.Contains(r.stderr, volatile.Addrs()[0]) {
		t.Errorf("no warning naming the nodes that do not persist:\n%s", r.stderr)
	}

	persistent := redistest.StartT(t, 3, redistest.Options{Persistence: true})
	r = run(t, "exec", ttlFlag, noGrace, "--nodes="+strings.Join(persistent.URLs(), ","), lockName(t), "--", "true")
	if r.code != 0 || strings.Contains(r.stderr, "WARNING") {
		t.Errorf("nodes that persist every write: exit %d, want 0 and no warning; stderr:\n%s", r.code, r.stderr)
	}
}
