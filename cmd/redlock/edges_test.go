package main

import (
	"strings"
	"testing"
)

// The rough edges a new user meets first: a flag after the lock name works (or, without
// "--", says what to write), a node address without a scheme gets the URL to write, a port
// that is not a number is named, and unlock says what its help says about the holder.
func TestCLIEdgesSayWhatToDo(t *testing.T) {
	if r := run(t, "exec", ttlFlag, lockName(t), "--wait", "1s", "--", "true"); r.code != 0 {
		t.Errorf("a flag between NAME and --: %v", r)
	}
	for _, tc := range []struct {
		args    []string
		mention string
	}{
		{[]string{"exec", "job", "--wait", "1s", "true"}, `"--wait" after the lock name "job" looks like a flag, but no "--" says where COMMAND starts`},
		{[]string{"exec", "job", "--wait", "1s", "stray", "--", "true"}, `"stray" between the lock name "job" and "--" is not a flag`},
		{[]string{"exec", "job", "--bogus", "--", "true"}, "unknown flag --bogus"},
		{[]string{"status", "--nodes", "127.0.0.1:7601", "job"}, "has no scheme: write redis://127.0.0.1:7601"},
		{[]string{"status", "--nodes", "redis://127.0.0.1:76o1", "job"}, `has port "76o1": want a number from 1 to 65535`},
		{[]string{"unlock", "job"}, "learns only at its next extension"},
	} {
		r := run(t, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.mention) {
			t.Errorf("%q: want exit %d and %q, got %v", tc.args, exitUsage, tc.mention, r)
		}
		if strings.Contains(r.stderr, "without telling the holder") {
			t.Errorf("%q: %q contradicts unlock's help", tc.args, r.stderr)
		}
	}
}
