package main

import (
	"bufio"
	"context"
	"fmt"
	"strings"

	"github.com/quorumlabs/redlock"
	"golang.org/x/term"
)

var unlockHelp = cmdHelp{
	name:     "unlock",
	synopsis: "--force NAME",
	about: `Delete the lock NAME on every node, whoever holds it, for operators clearing a lock left by a
job that is known to be dead (the keys would expire by themselves within the TTL anyway).
It also raises each fence register by one, so the next holder gets a higher token than the
old one, and a holder that still runs learns at its next extension that its lock is gone
(it does not take it back): for it the lock is lost, and redlock exec stops its command.

Asks for confirmation on the terminal unless --yes is given; without a terminal and without
--yes it refuses.`,
	examples: `
redlock unlock --force nightly-report
redlock unlock --force --yes nightly-report     # in scripts`,
}

// nodeErrors lists the per-node failures inside err.
func nodeErrors(err error) []*redlock.NodeError {
	var out []*redlock.NodeError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *redlock.NodeError:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

func runUnlock(ctx context.Context, a *app, args []string) error {
	var nf nodeFlags
	fs := newFlagSet(a, unlockHelp)
	nf.register(fs)
	force := fs.Bool("force", false, "required: acknowledge that the lock is deleted whoever holds it")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	timeout := registerTimeout(fs)
	name, err := parseLockName(fs, args)
	if err != nil {
		return err
	}
	if !*force {
		return usagef("unlock deletes the lock whoever holds it; a holder that still runs learns only at its next extension that the lock is gone: add --force to say you mean it")
	}
	if err := positiveDuration("timeout", *timeout); err != nil {
		return err
	}
	// Refuse before touching the network: a script without --yes must fail fast, not hang
	// waiting for an answer nobody will type.
	if !*yes && !term.IsTerminal(int(a.stdin.Fd())) {
		return usagef("stdin is not a terminal, so nobody can confirm: add --yes to unlock %q without asking", name)
	}
	client, err := nf.connect(a, nf.options(a, 0))
	if err != nil {
		return err
	}
	defer client.Close()
	urls, _ := nf.urls(a) // connect has checked them
	total := len(urls)

	inspectCtx, cancel := context.WithTimeout(ctx, *timeout)
	st, err := client.Inspect(inspectCtx, name)
	cancel()
	switch {
	case err != nil:
		fmt.Fprintf(a.stdout, "lock %q: could not inspect it (%v)\n", name, err)
	case st.Held:
		fmt.Fprintf(a.stdout, "lock %q is held by %s, valid for at least %s\n", name, shortID(st.Owner), formatDuration(st.Remaining))
	default:
		fmt.Fprintf(a.stdout, "lock %q is not held by a quorum\n", name)
	}
	if !*yes {
		fmt.Fprintf(a.stdout, "Delete lock %q on all %s? [y/N] ", name, plural(total, "node"))
		answer, _ := bufio.NewReader(a.stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return withExitCode(exitFailure, fmt.Errorf("not confirmed: lock %q left as it is", name))
		}
	}
	unlockCtx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	deleted, err := client.ForceUnlock(unlockCtx, name)
	// ForceUnlock deletes the key and raises the fence register in one pipeline per node:
	// every node that answered did both, the others neither.
	answered := total - len(nodeErrors(err))
	fmt.Fprintf(a.stdout, "deleted the lock key on %d of %s%s\n", deleted, plural(total, "node"), unlockRest(answered-deleted, total-answered))
	fmt.Fprintf(a.stdout, "raised the fence register by one on %d of %s: the next holder's token is higher than the old holder's\n", answered, plural(total, "node"))
	if err == nil && deleted > 0 {
		// As the help says: nothing is sent to the holder, which finds out by itself.
		fmt.Fprintf(a.stdout, "a holder that still runs learns at its next extension that its lock is gone (redlock exec then stops its command)\n")
	}
	return err
}

// unlockRest says why the nodes where unlock deleted nothing did not:
// " (2 had no key, 1 did not answer)", or "" when it deleted everywhere.
func unlockRest(noKey, silent int) string {
	var parts []string
	if noKey > 0 {
		parts = append(parts, fmt.Sprintf("%d had no key", noKey))
	}
	if silent > 0 {
		parts = append(parts, fmt.Sprintf("%d did not answer", silent))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
