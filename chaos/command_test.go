package chaos

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Bad flags are refused before anything starts, naming the bad value.
func TestRunCommandRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-scenarios", "no-such-scenario"}, "no-such-scenario"},
		{[]string{"-duration", "-1s"}, "-1s"},
		{[]string{"-no-such-flag"}, "no-such-flag"},
		{[]string{"stray"}, `unexpected argument "stray"`},
	} {
		var stdout, stderr bytes.Buffer
		err := RunCommand(context.Background(), "chaos-soak", c.args, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error()+stderr.String(), c.want) {
			t.Errorf("%q: error %v (stderr %q), want one naming %q", c.args, err, stderr.String(), c.want)
		}
	}
}

func TestRunCommandListsTheScenarios(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := RunCommand(context.Background(), "chaos-soak", []string{"-list"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, s := range Scenarios() {
		if !strings.Contains(stdout.String(), s.Name) {
			t.Errorf("-list lacks %s", s.Name)
		}
	}
}
