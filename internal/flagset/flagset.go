// Package flagset parses the command-line flags of the redlock tools (the
// CLI's bench and chaos subcommands share their parsers with the bench and
// chaos modules) the way the redlock command spells them everywhere.
package flagset

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Parse parses args with flags spelled --name: -h prints the flag list
// once, on stdout; a bad flag is one line, not the flag list.
func Parse(flags *flag.FlagSet, name string, args []string, stdout io.Writer) error {
	flags.SetOutput(io.Discard)
	flags.Usage = func() {}
	err := flags.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, "Usage of %s:\n", name)
		flags.VisitAll(func(f *flag.Flag) {
			kind, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(stdout, "  %s\n        %s", strings.TrimSpace("--"+f.Name+" "+kind), usage) // a bool flag has no kind
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
				fmt.Fprintf(stdout, " (default %s)", f.DefValue)
			}
			fmt.Fprintln(stdout)
		})
		return err
	case err != nil:
		msg := strings.Replace(err.Error(), " -", " --", 1)
		return fmt.Errorf("%s (run '%s --help' for the flags)", msg, name)
	}
	return nil
}
