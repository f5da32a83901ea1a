package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// A node in Redis Cluster mode takes only the keys of the hash slots it serves. nodes judges
// it for the named lock's slot, exec refuses (69) a lock the node cannot take and says why,
// and the two agree.
func TestClusterNodeVerdictsAgreeWithExec(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartT(t, 1, redistest.Options{ClusterMode: true})
	node := cl.Servers[0]
	urls := append(shared.URLs()[:2:2], cl.URLs()[0])
	nodes := "--nodes=" + strings.Join(urls, ",")
	slots, err := redlock.New(cl.Clients(), redlock.Options{AllowNoFaultTolerance: true}) // for Keys(name).Slot only
	if err != nil {
		t.Fatal(err)
	}
	defer slots.Close()

	// Serving no slot: no lock at all can be taken on it.
	r := run(t, "nodes", ttlFlag, noGrace, nodes, lockName(t))
	if r.code != exitFailure || !strings.Contains(r.stdout, "cluster slots: no") || !strings.Contains(r.stdout, "serves no hash slot") || !strings.Contains(r.stdout, "locks: no") {
		t.Errorf("nodes with a cluster node serving no slot: want exit %d and a NO, got %v", exitFailure, r)
	}
	e := run(t, "exec", ttlFlag, noGrace, nodes, lockName(t), "--", "true")
	if e.code != exitUnavailable || !strings.Contains(e.stderr, node.Addr) || !strings.Contains(e.stderr, "serves no hash slot") {
		t.Errorf("exec with a cluster node serving no slot: want exit %d naming it, got %v", exitUnavailable, e)
	}

	if err := node.ServeSlots(ctx, 0, 8191); err != nil {
		t.Fatal(err)
	}
	var served, unserved string
	for i := 0; served == "" || unserved == ""; i++ {
		name := fmt.Sprintf("%s-%d", lockName(t), i)
		if slots.Keys(name).Slot <= 8191 {
			served = firstOf(served, name)
		} else {
			unserved = firstOf(unserved, name)
		}
	}

	r = run(t, "nodes", ttlFlag, noGrace, nodes)
	if r.code != 0 || !strings.Contains(r.stdout, "serves hash slots 0-8191") || !strings.Contains(r.stdout, "give a lock NAME") {
		t.Errorf("nodes without a NAME: want exit 0 and the node's slots, got %v", r)
	}
	r = run(t, "nodes", ttlFlag, noGrace, nodes, served)
	if r.code != 0 || !strings.Contains(r.stdout, "cluster slots: yes") || !strings.Contains(r.stdout, "locks: yes") {
		t.Errorf("nodes %s (a slot it serves): want exit 0 and yes, got %v", served, r)
	}
	if e := run(t, "exec", ttlFlag, noGrace, nodes, served, "--", "true"); e.code != 0 {
		t.Errorf("exec %s: nodes said yes, want exit 0, got %v", served, e)
	}

	slot := strconv.Itoa(slots.Keys(unserved).Slot)
	r = run(t, "nodes", ttlFlag, noGrace, nodes, unserved)
	if r.code != exitFailure || !strings.Contains(r.stdout, "cluster slots: no") || !strings.Contains(r.stdout, "not the lock's slot "+slot) || !strings.Contains(r.stdout, "locks: no") {
		t.Errorf("nodes %s (slot %s, not served): want exit %d and a NO, got %v", unserved, slot, exitFailure, r)
	}
	marker := t.TempDir() + "/ran"
	e = run(t, "exec", ttlFlag, noGrace, nodes, unserved, "--", "touch", marker)
	if e.code != exitUnavailable || !strings.Contains(e.stderr, "not the lock's slot "+slot) || !strings.Contains(e.stderr, node.Addr) {
		t.Errorf("exec %s: nodes said no, want exit %d with the reason, got %v", unserved, exitUnavailable, e)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran although a node cannot take the lock")
	}

	// Serving every slot, in two ranges: it takes every lock, and nodes says so without a NAME.
	if err := node.ServeSlots(ctx, 8192, 16383); err != nil {
		t.Fatal(err)
	}
	r = run(t, "nodes", ttlFlag, noGrace, nodes)
	if r.code != 0 || !strings.Contains(r.stdout, "cluster slots: yes: the 1 node in cluster mode serves any lock") ||
		!strings.Contains(r.stdout, "locks: yes\n") || strings.Contains(r.stdout, "only for some locks") {
		t.Errorf("nodes with a cluster node serving every slot: want yes, got %v", r)
	}
}

// firstOf keeps the first name found.
func firstOf(have, name string) string {
	if have != "" {
		return have
	}
	return name
}

// exec records who holds the lock, and status shows it: the host, redlock's pid, when it
// started and the command. --no-metadata records nothing.
func TestStatusShowsWhoHoldsAnExecLock(t *testing.T) {
	name := lockName(t)
	// The command asks for the status of its own lock while it holds it.
	pid, _, wait := startExec(t, []string{"exec", ttlFlag, name, "--", binary, "status", name})
	r := wait()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^holder: host=` + regexp.QuoteMeta(host) + ` pid=` + strconv.Itoa(pid) +
		` started=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ cmd=` + regexp.QuoteMeta(binary+" status "+name) + `$`)
	if r.code != 0 || !want.MatchString(r.stdout) {
		t.Fatalf("status under exec: want a holder line matching %s, got %v", want, r)
	}

	r = run(t, "exec", ttlFlag, "--no-metadata", name, "--", binary, "status", name)
	if r.code != 0 || !strings.Contains(r.stdout, "holder: recorded nothing") || strings.Contains(r.stdout, "pid=") {
		t.Fatalf("exec --no-metadata: want nothing recorded, got %v", r)
	}
	// The metadata goes with the lock.
	c := libClient(t)
	for _, s := range shared.Servers {
		if n := s.Client().Exists(context.Background(), c.Keys(name).Holder).Val(); n != 0 {
			t.Fatalf("%s: the holder key outlived the lock", s.Addr)
		}
	}
}
