package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad flags are refused before any redis-server starts, with an error that
// names the bad value.
func TestRunRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sizes", "3,five"}, `"five" is not a number`},
		{[]string{"--sizes", "0"}, "node count 0"},
		{[]string{"--nodes", "5"}, "write --sizes 5"},
		{[]string{"--repeats", "x"}, `--repeats: parse error`},
		{[]string{"-workloads", "uncontended-1,bogus"}, `workload "bogus"`},
		{[]string{"-contenders", "redsinc"}, `contender "redsinc"`},
		{[]string{"-duration", "-1s"}, "duration -1s"},
		{[]string{"-slow-latency", "2500us"}, "slow latency 2.5ms"},
		{[]string{"stray"}, `unexpected argument "stray"`},
		{[]string{"-no-such-flag"}, "no-such-flag"},
		{[]string{"-render", "/nonexistent/matrix.json"}, "/nonexistent/matrix.json"},
	} {
		var stdout, stderr bytes.Buffer
		err := RunCommand(context.Background(), "redlock-bench", c.args, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error()+stderr.String(), c.want) {
			t.Errorf("run %q: error %v (stderr %q), want one naming %q", c.args, err, stderr.String(), c.want)
		}
		if stdout.Len() != 0 {
			t.Errorf("run %q printed a table after an error: %q", c.args, stdout.String())
		}
	}
}

func TestSplitList(t *testing.T) {
	if got := splitList(" all "); got != nil {
		t.Errorf(`splitList("all") = %q, want nil (everything)`, got)
	}
	if got := strings.Join(splitList("a, b ,c"), "|"); got != "a|b|c" {
		t.Errorf(`splitList("a, b ,c") = %q, want a|b|c`, got)
	}
}

// -render prints the table of a results file without running anything.
func TestRenderPrintsSavedResults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "matrix.json")
	saved := `{"config":{"repeats":3,"duration_ns":2000000000},"machine":{"cpus":2,"redis_version":"7.0.15"},
		"cells":[{"nodes":5,"workload":"uncontended-1","contender":"redlock","repeats":3,"ops_per_sec":4321,"vs_redsync":1.7}]}`
	if err := os.WriteFile(path, []byte(saved), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := RunCommand(context.Background(), "redlock-bench", []string{"-render", path, "-markdown"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 5 | uncontended-1 | redlock | 4321 | 1.70 |", "redis 7.0.15"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("rendered table lacks %q:\n%s", want, stdout.String())
		}
	}
}
