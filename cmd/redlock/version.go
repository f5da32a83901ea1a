package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

var versionHelp = cmdHelp{
	name:     "version",
	synopsis: "",
	about: `Print redlock's module version and the Go version it was built with. A binary built from a
clone (go build, go install .) says "(devel)": only go install ...@version records a version.`,
	examples: `
redlock version`,
}

func runVersion(_ context.Context, a *app, args []string) error {
	fs := newFlagSet(a, versionHelp)
	positional, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(positional) != 0 {
		return usagef("version takes no arguments, got %q", positional)
	}
	fmt.Fprintf(a.stdout, "redlock %s, built with %s\n", moduleVersion(), runtime.Version())
	return nil
}

// moduleVersion is the version of the main module as the build recorded it; "(devel)" when
// the build did not record one (a build from a checkout) or has no build info at all.
func moduleVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}
