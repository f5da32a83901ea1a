package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/quorumlabs/redlock/redistest"
)

// These tests hold the CLI to telling operators the truth: exit codes that tell a busy lock
// from a lock service that is down, node verdicts that say what was and was not checked, a
// -v that shows node problems, and one clear line for each kind of bad input.

// noGrace lets nodes the test just started vote at once: a fresh server cannot be told from
// one that restarted and forgot its locks, and these tests are not about that guard.
const noGrace = "--restart-grace=off"

// nodeSets are the node sets an operator meets, built once per test from real servers.
type nodeSet struct {
	name  string
	urls  []string
	node  string // the node the set is about (the bad one), if any
	locks bool   // whether exec gets the lock on these nodes now
}

func nodeSets(t *testing.T) []nodeSet {
	t.Helper()
	urls := shared.URLs()
	dead := func() string { return "redis://" + deadAddr(t) }
	down := dead()

	// A replica: Redis answers, but it is not independent. Its master is not
	// a shared node: a master with a replica is refused too (ErrFailoverNode),
	// and the other sets need the shared nodes to vote.
	replicated := redistest.StartT(t, 1, redistest.Options{})
	replica := redistest.StartT(t, 1, redistest.Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(replicated.Servers[0].Port)}})

	// A node that refuses to authenticate: the password is set once it runs, because
	// redistest's readiness check does not log in.
	auth := redistest.StartT(t, 1, redistest.Options{})
	if err := auth.Servers[0].Client().ConfigSet(context.Background(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	port := shared.Servers[0].Port
	return []nodeSet{
		{"healthy", urls, "", true},
		{"one node down", append(append([]string{}, urls...), down), strings.TrimPrefix(down, "redis://"), true},
		{"majority down", []string{urls[0], dead(), dead()}, "", false},
		{"a replica", []string{urls[0], urls[1], replica.URLs()[0]}, replica.Addrs()[0], false},
		{"a duplicate", []string{fmt.Sprintf("redis://127.0.0.1:%d", port), fmt.Sprintf("redis://localhost:%d", port), urls[1]}, fmt.Sprintf("localhost:%d", port), false},
		{"a node refusing auth", []string{urls[0], urls[1], auth.URLs()[0]}, auth.Addrs()[0], true},
	}
}

// Every verdict of `nodes` is yes, no or unknown with its reason, and its last line agrees
// with what exec then does on the same nodes.
func TestNodesVerdictsAgreeWithExec(t *testing.T) {
	want := map[string][]string{
		"healthy":       {"quorum: yes: 3 of 3 nodes vote", "independent: yes: 3 distinct masters", "locks: yes"},
		"one node down": {"quorum: yes: 3 of 4 nodes vote, 3 needed", "independent: unknown: 1 of 4 nodes could not be checked", "connection refused", "locks: yes, 3 of 4 nodes vote"},
		"majority down": {"quorum: no: none of the 3 nodes votes, 2 needed", "its clock is not yet compared with enough of the other nodes", "independent: unknown: 2 of 3 nodes could not be checked", "unreachable: dial tcp", "connect: connection refused", "locks: no"},
		"a replica":     {"independent: no: ", "a replica (role slave), not a master", "locks: no: exec refuses"},
		"a duplicate":   {"independent: no: ", "same server as 127.0.0.1:", "locks: no: exec refuses"},
		"a node refusing auth": {"quorum: yes: 2 of 3 nodes vote", "independent: unknown: 1 of 3 nodes could not be checked", "no password sent, the node requires one (NOAUTH", "write it as redis://:PASSWORD@host",
			"the 2 checked are distinct masters", "locks: yes, 2 of 3 nodes vote"},
	}
	for _, set := range nodeSets(t) {
		t.Run(set.name, func(t *testing.T) {
			nodes := "--nodes=" + strings.Join(set.urls, ",")
			r := run(t, "nodes", ttlFlag, noGrace, nodes)
			for _, w := range want[set.name] {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("nodes output lacks %q: %v", w, r)
				}
			}
			// What was not checked is never reported as checked, nor blamed on a timeout
			// or an empty name.
			for _, never := range []string{`verify ""`, "deadline exceeded", "independent: yes"} {
				if set.name != "healthy" && strings.Contains(r.stdout, never) {
					t.Errorf("nodes output says %q: %v", never, r)
				}
			}
			if set.node != "" && !strings.Contains(r.stdout, set.node) {
				t.Errorf("nodes output does not name %s: %v", set.node, r)
			}
			if wantCode := map[bool]int{true: 0, false: exitFailure}[set.name == "healthy"]; r.code != wantCode {
				t.Errorf("nodes: want exit %d, got %v", wantCode, r)
			}

			e := run(t, "exec", ttlFlag, noGrace, nodes, lockName(t), "--", "true")
			wantExec := exitUnavailable
			if set.locks {
				wantExec = 0
			}
			if e.code != wantExec {
				t.Fatalf("nodes said locks %v, exec: want exit %d, got %v", set.locks, wantExec, e)
			}
		})
	}
}

// exec exits 75 only when another owner holds the lock; when no quorum can be reached the
// lock service is down, nobody holds the lock, and it exits 69.
func TestExecTellsABusyLockFromADownService(t *testing.T) {
	cl := redistest.StartT(t, 5, redistest.Options{})
	for _, s := range cl.Servers[2:] {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	marker := filepath.Join(t.TempDir(), "ran")
	r := run(t, "exec", ttlFlag, noGrace, "--nodes="+strings.Join(cl.URLs(), ","), lockName(t), "--", "touch", marker)
	if r.code != exitUnavailable {
		t.Fatalf("3 of 5 nodes stopped: want exit %d, got %v", exitUnavailable, r)
	}
	for _, want := range []string{"no quorum: ", " needed", "connection refused"} {
		if !strings.Contains(r.stderr, want) {
			t.Fatalf("the message lacks %q: %v", want, r)
		}
	}
	if strings.Contains(r.stderr, "needed)") {
		t.Fatalf("the old quorum wording is back: %v", r)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran without the lock")
	}

	name := lockName(t) + "-held"
	holdLock(t, libClient(t), name)
	r = run(t, "exec", ttlFlag, name, "--", "touch", marker)
	if r.code != exitNotAcquired || !strings.Contains(r.stderr, "held by another owner") {
		t.Fatalf("held elsewhere: want exit %d, got %v", exitNotAcquired, r)
	}
}

// With -v, a node that refuses to authenticate shows up on stderr, named, with the cause;
// go-redis' own lines go to the same log, and without -v nowhere.
func TestVerboseShowsNodeProblems(t *testing.T) {
	var auth, down nodeSet
	for _, s := range nodeSets(t) {
		switch s.name {
		case "a node refusing auth":
			auth = s
		case "one node down":
			down = s
		}
	}
	for _, cmd := range [][]string{{"nodes", ttlFlag}, {"status", lockName(t)}} {
		args := append(cmd, "-v", "--nodes="+strings.Join(auth.urls, ","))
		r := run(t, args...)
		line := ""
		for _, l := range lines(r.stderr) {
			if strings.Contains(l, auth.node) && strings.Contains(l, "NOAUTH") {
				line = l
			}
		}
		if line == "" {
			t.Fatalf("%s -v: no line names %s and its cause: %v", cmd[0], auth.node, r)
		}
		r = run(t, append(cmd, "--nodes="+strings.Join(auth.urls, ","))...)
		if strings.Contains(r.stderr, "NOAUTH") {
			t.Fatalf("%s without -v logs node problems: %v", cmd[0], r)
		}
	}

	r := run(t, "exec", ttlFlag, noGrace, "-v", "--nodes="+strings.Join(auth.urls, ","), lockName(t), "--", "true")
	if r.code != 0 || !regexp.MustCompile(`node problem.*`+regexp.QuoteMeta(auth.node)+`.*NOAUTH`).MatchString(r.stderr) {
		t.Fatalf("exec -v with a node refusing auth: want exit 0 and a line naming it: %v", r)
	}

	// A refused connection: one dial, reported at once (go-redis says how many it made).
	r = run(t, "nodes", ttlFlag, "-v", "--nodes="+strings.Join(down.urls, ","))
	if !strings.Contains(r.stderr, "failed to dial after 1 attempts") || !strings.Contains(r.stderr, "from=go-redis") {
		t.Fatalf("-v: want go-redis' line about a single dial of %s: %v", down.node, r)
	}
	r = run(t, "nodes", ttlFlag, "--nodes="+strings.Join(down.urls, ","))
	if strings.Contains(r.stderr, "dial") || strings.Contains(r.stderr, "go-redis") {
		t.Fatalf("without -v, go-redis' lines reach stderr: %v", r)
	}
}

// --help prints once; the flags are spelled --flag everywhere; a bad value is one line with
// a hint, not the whole help.
func TestHelpAndFlags(t *testing.T) {
	for _, c := range commands() {
		r := run(t, c.name, "--help")
		if n := strings.Count(r.stdout, "Usage: "); n != 1 {
			t.Errorf("%s --help prints its text %d times:\n%s", c.name, n, r.stdout)
		}
		for _, l := range lines(r.stdout) {
			if strings.HasPrefix(strings.TrimSpace(l), "-") && !strings.HasPrefix(strings.TrimSpace(l), "--") && strings.HasPrefix(l, "  -") {
				t.Errorf("%s --help spells a flag with one dash: %q", c.name, l)
			}
			if strings.Count(l, "(default") > 1 {
				t.Errorf("%s --help gives two defaults: %q", c.name, l)
			}
		}
	}
	r := run(t, "nodes", "--help")
	if !regexp.MustCompile(`--node-timeout timeout\n\s+per-node call timeout \(default min\(200ms, TTL/10\)\)\n`).MatchString(r.stdout) {
		t.Errorf("--node-timeout: want exactly one default:\n%s", r.stdout)
	}

	r = run(t, "exec", "--ttl", "1", "job", "--", "true")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--ttl 1: a duration needs a unit: write 1s") || len(lines(r.stderr)) > 2 || strings.Contains(r.stderr, "Flags:") {
		t.Errorf("--ttl 1: want exit %d and one line with a hint, got %v", exitUsage, r)
	}
	r = run(t, "status", "--timeout", "soon", "job")
	if r.code != exitUsage || !strings.Contains(r.stderr, `--timeout "soon": not a duration`) || len(lines(r.stderr)) > 2 {
		t.Errorf("--timeout soon: want exit %d and one line, got %v", exitUsage, r)
	}
	// A flag of redlock's own type (no flag.Getter) with a bad value: one line, no panic.
	r = run(t, "exec", "--restart-grace", "bogus", "job", "--", "true")
	if r.code != exitUsage || !strings.Contains(r.stderr, `--restart-grace "bogus": want a positive duration such as 30s, or off`) || len(lines(r.stderr)) > 2 {
		t.Errorf("--restart-grace bogus: want exit %d and one line, got %v", exitUsage, r)
	}
	r = run(t, "chaos", "--no-such-flag")
	if r.code == 0 || !strings.Contains(r.stderr, "--no-such-flag") || strings.Contains(r.stderr, "--duration") {
		t.Errorf("chaos with an unknown flag: want one line naming it, got %v", r)
	}
	r = run(t, "bench", "--nodes", "5")
	if r.code == 0 || !strings.Contains(r.stderr, "--sizes 5") {
		t.Errorf("bench --nodes 5: want a hint at --sizes, got %v", r)
	}

	r = run(t, "version")
	if r.code != 0 || !regexp.MustCompile(`^redlock \S+, built with go\d`).MatchString(r.stdout) {
		t.Errorf("version: got %v", r)
	}
}

// Small input cases get one clear line naming the bad value, with the exit code of a usage
// error, and what is legal but risky gets a warning.
func TestSmallInputCases(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		mention    string
		mustNotSay string
	}{
		{"port out of range", []string{"status", "--nodes", "redis://127.0.0.1:99999", "job"}, "has port 99999: want 1 to 65535", ""},
		{"password in the user slot", []string{"status", "--nodes", "redis://s3cretpw@127.0.0.1:99999", "job"}, "redis://xxxxx@127.0.0.1:99999", "s3cretpw"},
		{"exec without a lock name", []string{"exec", "--", "echo", "x"}, `missing lock NAME before "--"`, ""},
		{"exec without --", []string{"exec", "echo", "x"}, `missing "--" between the lock name "echo" and the command "x"`, ""},
		{"TTL too short", []string{"exec", "--ttl", "5ms", "job", "--", "true"}, "TTL 5ms: is below the minimum TTL of 100ms", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.mention) {
				t.Fatalf("want exit %d and %q, got %v", exitUsage, tc.mention, r)
			}
			if len(lines(r.stderr)) > 2 {
				t.Fatalf("want one line (and a hint), got %v", r)
			}
			if tc.mustNotSay != "" && strings.Contains(r.stdout+r.stderr, tc.mustNotSay) {
				t.Fatalf("the output shows %q: %v", tc.mustNotSay, r)
			}
		})
	}
	if r := run(t, "exec", "--ttl", "5ms", "job", "--", "true"); !strings.Contains(r.stderr, "minimum TTL of 100ms") {
		t.Errorf("--ttl 5ms: no smallest TTL that works: %v", r)
	}

	urls := shared.URLs()
	r := run(t, "status", "--nodes", urls[0]+","+urls[1], lockName(t))
	if !strings.Contains(r.stderr, "warning: with 2 nodes, no node may fail") {
		t.Errorf("2 nodes: want a warning, got %v", r)
	}
	r = run(t, "status", "--nodes", urls[0], lockName(t))
	if !strings.Contains(r.stderr, "warning: with 1 node, no node may fail") || !strings.Contains(r.stdout, "on 1 node, quorum 1") || strings.Contains(r.stdout+r.stderr, "1 nodes") {
		t.Errorf("1 node: want a warning and '1 node', got %v", r)
	}
	if r := run(t, "status", lockName(t)); strings.Contains(r.stderr, "warning") {
		t.Errorf("3 nodes: no warning expected, got %v", r)
	}
}
