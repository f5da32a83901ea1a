package main

import (
	"strings"
	"testing"
)

// TestHelpHasNoTrailingSpaceOrStrayValueName: a bool flag has no value, so
// its line is "--otel", not "--otel " or "--no-metadata status" (a word in
// backquotes in a usage becomes the flag's value name).
func TestHelpHasNoTrailingSpaceOrStrayValueName(t *testing.T) {
	for _, cmd := range []string{"exec", "status", "nodes", "unlock", "demo"} {
		r := run(t, cmd, "--help")
		if r.code != 0 {
			t.Fatalf("%s --help: exit %d, stderr %q", cmd, r.code, r.stderr)
		}
		for _, line := range strings.Split(r.stdout, "\n") {
			if strings.HasSuffix(line, " ") {
				t.Errorf("%s --help: trailing space in %q", cmd, line)
			}
			if strings.HasPrefix(strings.TrimSpace(line), "--no-metadata ") || strings.HasPrefix(strings.TrimSpace(line), "--v ") {
				t.Errorf("%s --help: a bool flag shown with a value: %q", cmd, line)
			}
		}
	}
}

func TestUnlockSaysWhyNodesHadNothingDeleted(t *testing.T) {
	for _, c := range []struct {
		noKey, silent int
		want          string
	}{
		{0, 0, ""},
		{2, 0, " (2 had no key)"},
		{0, 1, " (1 did not answer)"},
		{1, 2, " (1 had no key, 2 did not answer)"},
	} {
		if got := unlockRest(c.noKey, c.silent); got != c.want {
			t.Errorf("unlockRest(%d, %d) = %q, want %q", c.noKey, c.silent, got, c.want)
		}
	}
}
