package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quorumlabs/redlock"
)

var statusHelp = cmdHelp{
	name:     "status",
	synopsis: "NAME",
	about: `Show, node by node, who holds the lock NAME, the key's remaining TTL and the node's fence
register, then the verdict: the lock is held only if one owner holds it on a quorum of nodes,
and what the holder recorded with it (redlock exec records its host, pid, start time and
command).
The highest fence register bounds the tokens handed out so far: the next holder's token is
higher. The verdict is yes, no, or unknown when the nodes that did not answer could give an
owner a quorum. Like nodes, status checks that the nodes are independent (no replica, no
server listed twice): a key counted twice would make the verdict wrong. Exits 0 when the lock
is held or not held, 1 when the verdict is unknown, the nodes are not independent, or fewer
than a quorum of nodes answered.`,
	examples: `
redlock status nightly-report
redlock status --nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379 deploy`,
}

func runStatus(ctx context.Context, a *app, args []string) error {
	var nf nodeFlags
	fs := newFlagSet(a, statusHelp)
	nf.register(fs)
	timeout := registerTimeout(fs)
	positional, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	name, err := oneLockName(positional)
	if err != nil {
		return err
	}
	if err := positiveDuration("timeout", *timeout); err != nil {
		return err
	}
	client, err := nf.connect(a, nf.options(a, 0))
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	st, err := client.Inspect(ctx, name)
	if st != nil {
		for _, n := range st.Nodes {
			nf.logNodeError(a, n.Node, n.Err)
		}
	}
	var qe *redlock.QuorumError
	if err != nil && !errors.As(err, &qe) || st == nil {
		return err
	}
	// The verdict counts keys per node: a replica or one server listed twice would count
	// one server's key twice. exec refuses such a set; status says so, as nodes does.
	notIndependent := notIndependentNodes(judgeNodes(client.Nodes(ctx), client.KeySlot(name)))
	printStatus(a.stdout, client, st, notIndependent)
	switch {
	case len(notIndependent) > 0:
		return fmt.Errorf("not independent: %s", strings.Join(notIndependent, "; "))
	case qe != nil:
		return fmt.Errorf("only %s answered, fewer than the quorum of %d: whether the lock is held is unknown", answeredOf(st), qe.Needed)
	case st.Unknown:
		return fmt.Errorf("%s answered: whether the lock is held is unknown", answeredOf(st))
	}
	return nil
}

// notIndependentNodes lists the nodes judged a replica or another entry's server, with why.
func notIndependentNodes(rows []nodeRow) []string {
	var out []string
	for _, r := range rows {
		if r.info.Err == nil && r.independent != "yes" {
			out = append(out, fmt.Sprintf("%s: %s", r.info.Node, strings.TrimPrefix(r.independent, "no: ")))
		}
	}
	return out
}

// answeredOf is "2 of 5 nodes": how many nodes answered the inspection.
func answeredOf(st *redlock.Status) string {
	answered := 0
	for _, n := range st.Nodes {
		if n.Err == nil {
			answered++
		}
	}
	return fmt.Sprintf("%d of %s", answered, plural(len(st.Nodes), "node"))
}

func printStatus(w io.Writer, client *redlock.Client, st *redlock.Status, notIndependent []string) {
	fmt.Fprintf(w, "lock %q: key %s on %s, quorum %d\n\n", st.Name, client.LockKey(st.Name), plural(len(st.Nodes), "node"), client.Quorum())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tOWNER\tTTL\tFENCE")
	for _, n := range st.Nodes {
		if n.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\t\t\n", n.Node, nodeProblem(n.Err))
			continue
		}
		owner, ttl := "-", "-"
		if n.Owner != "" {
			owner, ttl = shortID(n.Owner), formatDuration(n.TTL)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", n.Node, owner, ttl, n.Fence)
	}
	tw.Flush()
	fmt.Fprintln(w)

	holding, withKeys := 0, 0
	for _, n := range st.Nodes {
		if n.Err == nil && n.Owner != "" {
			withKeys++
			if n.Owner == st.Owner {
				holding++
			}
		}
	}
	silent := 0
	for _, n := range st.Nodes {
		if n.Err != nil {
			silent++
		}
	}
	if len(notIndependent) > 0 {
		fmt.Fprintf(w, "independent: no: %s\n", strings.Join(notIndependent, "; "))
		fmt.Fprintln(w, "held: unknown: the nodes are not independent, so the count of nodes holding a key may count one server twice; exec refuses these nodes (exit 69)")
	} else if st.Held {
		fmt.Fprintf(w, "held: yes, by %s on %d of %s, valid for at least %s\n", shortID(st.Owner), holding, plural(len(st.Nodes), "node"), formatDuration(st.Remaining))
		if st.Metadata != "" {
			fmt.Fprintf(w, "holder: %s\n", printableMetadata(st.Metadata))
		} else {
			fmt.Fprintln(w, "holder: recorded nothing (a library client without WithMetadata, or exec --no-metadata)")
		}
	} else if st.Unknown {
		fmt.Fprintf(w, "held: unknown: only %s answered; %s did not, and an owner may hold the lock on them: a quorum is %d\n", answeredOf(st), plural(silent, "node"), client.Quorum())
	} else {
		fmt.Fprintf(w, "held: no, no owner holds a quorum of %s\n", plural(client.Quorum(), "node"))
		if withKeys > 0 {
			fmt.Fprintf(w, "      %s keep keys of an expired or failed attempt; they expire by themselves\n", plural(withKeys, "node"))
		}
	}
	fmt.Fprintf(w, "highest fence: %d (the next holder's token is higher)\n", st.Fence)
}

// shortID abbreviates an opaque owner or run id: enough to tell owners apart in a table.
func shortID(id string) string {
	const keep = 10
	if len(id) <= keep {
		return id
	}
	return id[:keep] + "…"
}

// formatDuration rounds for tables to about three significant digits.
func formatDuration(d time.Duration) string {
	switch abs := max(d, -d); {
	case abs >= time.Minute:
		return d.Round(time.Second).String()
	case abs >= 100*time.Millisecond:
		return d.Round(time.Millisecond).String()
	case abs >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	case abs >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}
