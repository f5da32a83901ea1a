package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/quorumlabs/redlock"
)

func TestParseFlagsAcceptsFlagsAnywhere(t *testing.T) {
	cases := []struct {
		args       []string
		positional []string
		yes        bool
	}{
		{[]string{"NAME"}, []string{"NAME"}, false},
		{[]string{"--yes", "NAME"}, []string{"NAME"}, true},
		{[]string{"NAME", "--yes"}, []string{"NAME"}, true},
		{[]string{"A", "--yes", "B"}, []string{"A", "B"}, true},
		{[]string{"--", "--yes"}, []string{"--yes"}, false},
		{[]string{"A", "--", "-x", "B"}, []string{"A", "-x", "B"}, false},
		{nil, nil, false},
	}
	for _, tc := range cases {
		a := &app{stdout: &bytes.Buffer{}}
		fs := newFlagSet(a, cmdHelp{name: "test"})
		yes := fs.Bool("yes", false, "")
		got, err := parseFlags(fs, tc.args)
		if err != nil || !slices.Equal(got, tc.positional) || *yes != tc.yes {
			t.Fatalf("%q: got %q yes=%v err=%v, want %q yes=%v", tc.args, got, *yes, err, tc.positional, tc.yes)
		}
	}
}

func TestParseFlagsErrors(t *testing.T) {
	var out bytes.Buffer
	fs := newFlagSet(&app{stdout: &out}, cmdHelp{name: "test", about: "About.", examples: "redlock test x"})
	fs.Bool("yes", false, "say yes")
	var usage *usageError
	if _, err := parseFlags(fs, []string{"NAME", "--nope"}); !errors.As(err, &usage) || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("an unknown flag gave %v, want a usage error naming it", err)
	}
	if _, err := parseFlags(fs, []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help gave %v, want flag.ErrHelp", err)
	}
	if !strings.Contains(out.String(), "--yes") || !strings.Contains(out.String(), "Examples:\n  redlock test x") {
		t.Fatalf("the help lacks the flags or the examples:\n%s", out.String())
	}
}

func TestNodeURLs(t *testing.T) {
	env := map[string]string{}
	a := &app{getenv: func(k string) string { return env[k] }}

	nf := nodeFlags{}
	if _, err := nf.urls(a); exitCode(err) != exitUsage || !strings.Contains(err.Error(), "REDLOCK_NODES") {
		t.Fatalf("no nodes anywhere: got %v, want a usage error that names REDLOCK_NODES", err)
	}

	env["REDLOCK_NODES"] = " redis://127.0.0.1:1 , rediss://127.0.0.1:2,"
	got, err := nf.urls(a)
	if err != nil || !slices.Equal(got, []string{"redis://127.0.0.1:1", "rediss://127.0.0.1:2"}) {
		t.Fatalf("from REDLOCK_NODES: got %q, %v", got, err)
	}

	nf.nodes = "redis://127.0.0.1:3"
	if got, err := nf.urls(a); err != nil || !slices.Equal(got, []string{"redis://127.0.0.1:3"}) {
		t.Fatalf("--nodes must win over REDLOCK_NODES: got %q, %v", got, err)
	}

	nf.nodes = "redis://127.0.0.1:3,redis://user:s3cret@127.0.0.1:x"
	_, err = nf.urls(a)
	if exitCode(err) != exitUsage || !errors.Is(err, redlock.ErrInvalidConfig) {
		t.Fatalf("a bad URL gave %v, want a configuration error", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "--nodes: node 2 of 2") || strings.Contains(msg, "s3cret") {
		t.Fatalf("the message must name the entry and hide the password: %s", msg)
	}
}

func TestExitCode(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errors.New("boom"), exitFailure},
		{usagef("bad"), exitUsage},
		{fmt.Errorf("wrapped: %w", &redlock.ConfigError{Field: "TTL", Value: "0", Reason: "too short"}), exitUsage},
		{withExitCode(exitNotAcquired, redlock.ErrLocked), exitNotAcquired},
		{&silentExit{42}, 42},
	}
	for _, tc := range cases {
		if got := exitCode(tc.err); got != tc.want {
			t.Fatalf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestReportPrintsOnce(t *testing.T) {
	var stderr bytes.Buffer
	a := &app{stderr: &stderr, stdout: &bytes.Buffer{}, getenv: os.Getenv}
	if code := a.report("exec", &silentExit{3}); code != 3 || stderr.Len() != 0 {
		t.Fatalf("a silent exit printed %q and gave %d", stderr.String(), code)
	}
	if code := a.report("exec", usagef("missing NAME")); code != exitUsage || !strings.Contains(stderr.String(), "redlock exec: missing NAME\nRun 'redlock exec --help'") {
		t.Fatalf("a usage error printed %q and gave %d", stderr.String(), code)
	}
}
