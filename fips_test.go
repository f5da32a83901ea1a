package redlock_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// fipsChild marks the test binary run by TestUnderFIPS140Only.
const fipsChild = "REDLOCK_TEST_FIPS_CHILD"

// TestUnderFIPS140Only runs the package's lock, wake-up, ACL and TLS tests
// again in a child test binary under GODEBUG=fips140=only, where Go refuses
// every algorithm FIPS 140-3 does not approve (SHA-1 among them). The
// package used to hash its scripts with SHA-1 when it was loaded, which
// made it panic there before any test ran.
func TestUnderFIPS140Only(t *testing.T) {
	if os.Getenv(fipsChild) != "" {
		t.Skip("already the child")
	}
	if testing.Short() {
		t.Skip("runs a child test binary")
	}
	run := "^(TestMutualExclusionAndMonotonicTokensAcrossClients|TestFencingSlowPathOnRealNodes|TestWaiterIsWokenByTheRelease|" +
		"TestDoExtendsAcrossSeveralTTLsAndCancelsOnLoss|TestInspectAndForceUnlock|TestScriptsRunByEVALSHAOnceANodeToldTheirSHA|" +
		"TestTLS.*|TestACL.*)$"
	cmd := exec.Command(os.Args[0], "-test.run", run, "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "GODEBUG=fips140=only", fipsChild+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("under GODEBUG=fips140=only: %v\n%s", err, out)
	}
	// The selection must not silently match nothing.
	for _, name := range []string{"TestMutualExclusionAndMonotonicTokensAcrossClients", "TestTLSMutualExclusionAndFencingWithClientCertificates",
		"TestTLSRefusedNodesGiveClearPerNodeErrors", "TestACLRuleAllowsEveryOperation", "TestWaiterIsWokenByTheRelease"} {
		if !strings.Contains(string(out), "--- PASS: "+name) {
			t.Errorf("%s did not pass under fips140=only:\n%s", name, out)
		}
	}
}

// TestScriptsRunByEVALSHAOnceANodeToldTheirSHA: the client learns the
// scripts' SHA from the nodes at the first probe and from then on sends
// EVALSHA, not the whole source.
func TestScriptsRunByEVALSHAOnceANodeToldTheirSHA(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c := newClient(t, cl, redlock.Options{})
	ctx := context.Background()
	takeAndRelease(t, ctx, c.TryAcquire, "evalsha")
	for _, s := range cl.Servers {
		if err := s.Client().ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		takeExtendRelease(t, ctx, c, "evalsha")
	}
	for _, s := range cl.Servers {
		stats, err := s.Client().Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		// The property is which command carries the scripts, not how many
		// runs there were: the pipe may send several of the 15 operations
		// (and the stragglers' releases) as one batched script, so the
		// number of EVALSHA calls depends on timing.
		// A probe (INFO), on every new connection, reads the TTL register
		// with EVAL; an EVALSHA of a script the node does not know yet
		// fails (NOSCRIPT) and is sent again by EVAL. Beyond those, a call
		// built before a concurrent probe told the SHA, or a sweep after a
		// call that timed out on a loaded machine, may still go by EVAL:
		// at most one per script used here (acquire, extend, release).
		extraEvals := calls(stats, "eval") - calls(stats, "info") - stat(stats, "evalsha", "failed_calls")
		if calls(stats, "evalsha") == 0 || extraEvals > 3 {
			t.Errorf("%s: want EVALSHA for the operations, EVAL only for probes, NOSCRIPT retries and at most 3 more:\n%s", s.Addr, stats)
		}
	}
}

// calls reads a command's call count from INFO commandstats.
func calls(stats, cmd string) int { return stat(stats, cmd, "calls") }

// stat reads one figure of a command's line of INFO commandstats.
func stat(stats, cmd, field string) int {
	_, line, ok := strings.Cut(stats, "cmdstat_"+cmd+":")
	if !ok {
		return 0
	}
	line, _, _ = strings.Cut(line, "\n")
	for _, kv := range strings.Split(strings.TrimSpace(line), ",") {
		if k, v, _ := strings.Cut(kv, "="); k == field {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
