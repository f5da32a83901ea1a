package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quorumlabs/redlock"
)

var nodesHelp = cmdHelp{
	name:     "nodes",
	synopsis: "",
	about: `Probe every node: reachability, role, run id, uptime, persistence, clock offset against this
host and round-trip time, and whether its vote counts now (a node that restarted recently, or
whose clock jumped, sits out for a while). Then check that the set is independent: no replica,
no server listed twice. Exits 1 if the set is not independent or fewer than a quorum of nodes
vote.

A node without appendfsync always loses its keys and fence register when it crashes; the
restart grace (on by default, one lock TTL) keeps it out until every lock it knew about has
expired. Turning the grace off on such nodes is unsafe, and this command says so.`,
	examples: `
redlock nodes
redlock nodes --ttl 30s          # the TTL your jobs use: the restart grace follows it
REDLOCK_NODES=rediss://:secret@a:6380,rediss://:secret@b:6380,rediss://:secret@c:6380 redlock nodes`,
}

func runNodes(ctx context.Context, a *app, args []string) error {
	var nf nodeFlags
	var grace graceFlag
	fs := newFlagSet(a, nodesHelp)
	nf.register(fs)
	grace.register(fs)
	ttl := fs.Duration("ttl", 10*time.Second, "the lock `TTL` your clients use; the default restart grace is one TTL")
	timeout := registerTimeout(fs)
	positional, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(positional) != 0 {
		return usagef("nodes takes no arguments, got %q", positional)
	}
	if err := positiveDuration("ttl", *ttl); err != nil {
		return err
	}
	if err := positiveDuration("timeout", *timeout); err != nil {
		return err
	}
	opts := nf.options(a, *ttl)
	opts.RestartGrace = grace.d
	client, err := nf.connect(a, opts)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	infos := client.Nodes(ctx)
	printNodes(a.stdout, infos)
	voting := 0
	for _, n := range infos {
		if n.Err == nil && n.Voting {
			voting++
		}
	}
	fmt.Fprintln(a.stdout)
	for _, warning := range persistenceWarnings(infos, grace.d, *ttl) {
		fmt.Fprintln(a.stdout, warning)
	}

	var problems []error
	if voting >= client.Quorum() {
		fmt.Fprintf(a.stdout, "quorum: %d of %d nodes vote, %d needed: locks can be acquired\n", voting, len(infos), client.Quorum())
	} else {
		fmt.Fprintf(a.stdout, "quorum: only %d of %d nodes vote, %d needed: locks cannot be acquired now\n", voting, len(infos), client.Quorum())
		problems = append(problems, fmt.Errorf("only %d of %d nodes vote, quorum is %d", voting, len(infos), client.Quorum()))
	}
	if err := client.Verify(ctx); err != nil {
		fmt.Fprintf(a.stdout, "independent: NO: %v\n", err)
		problems = append(problems, err)
	} else {
		fmt.Fprintf(a.stdout, "independent: yes, %d distinct masters\n", len(infos))
	}
	if len(problems) > 0 {
		// A problem the probe found, not a mistake in how redlock was called: exit 1 even
		// when the error also matches ErrInvalidConfig (ErrNotIndependent does).
		return withExitCode(exitFailure, errors.Join(problems...))
	}
	return nil
}

func printNodes(w io.Writer, infos []redlock.NodeInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tRUN_ID\tUPTIME\tAOF\tCLOCK_OFFSET\tRTT\tVOTES")
	for _, n := range infos {
		if n.Err != nil {
			fmt.Fprintf(tw, "%s\tunreachable: %v\t\t\t\t\t\tno\n", n.Node, n.Err)
			continue
		}
		votes := "yes"
		if !n.Voting {
			votes = "no: " + n.SitOutReason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, n.Role, shortID(n.RunID),
			n.Uptime.Round(time.Second), persistence(n), signedDuration(n.ClockOffset), formatDuration(n.RTT), votes)
	}
	tw.Flush()
}

// persistence summarises what a node keeps across a crash: with "fsync always" every lock
// key and fence register survives.
func persistence(n redlock.NodeInfo) string {
	switch {
	case !n.AppendOnly:
		return "off"
	case n.AppendFsync == "":
		return "fsync ?"
	}
	return "fsync " + n.AppendFsync
}

func signedDuration(d time.Duration) string {
	if d >= 0 {
		return "+" + formatDuration(d)
	}
	return formatDuration(d)
}

// persistenceWarnings explains the risk of nodes that can lose keys in a crash, one line per
// kind of setting, louder when the restart grace that covers that risk is off.
func persistenceWarnings(infos []redlock.NodeInfo, grace, ttl time.Duration) []string {
	byKind := make(map[string][]string)
	var kinds []string
	for _, n := range infos {
		if n.Err != nil || (n.AppendOnly && n.AppendFsync == "always") {
			continue
		}
		kind := "no append-only file"
		if n.AppendOnly {
			kind = "appendfsync " + cmp.Or(n.AppendFsync, "unknown (CONFIG GET refused)")
		}
		if byKind[kind] == nil {
			kinds = append(kinds, kind)
		}
		byKind[kind] = append(byKind[kind], n.Node)
	}
	covered := cmp.Or(grace, ttl)
	var out []string
	for _, kind := range kinds {
		nodes := strings.Join(byKind[kind], ", ")
		if grace == redlock.NoRestartGrace {
			out = append(out, fmt.Sprintf("WARNING: %s persist with %s and the restart grace is off: after a crash such a node rejoins without its keys and can hand a held lock to a second owner", nodes, kind))
			continue
		}
		out = append(out, fmt.Sprintf("note: %s persist with %s: a crash loses keys; the restart grace keeps a restarted node out for %v, safe only if no client uses a longer TTL", nodes, kind, covered))
	}
	return out
}
