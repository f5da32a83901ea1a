package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/quorumlabs/redlock"
)

var statusHelp = cmdHelp{
	name:     "status",
	synopsis: "NAME",
	about: `Show, node by node, who holds the lock NAME, the key's remaining TTL and the node's fence
register, then the verdict: the lock is held only if one owner holds it on a quorum of nodes.
The highest fence register bounds the tokens handed out so far: the next holder's token is
higher. Then the fair lock's queue (see WithFairness), node by node, head first: each waiter's
ticket, its id and how long its entry lives unless it refreshes it. Exits 1 if fewer than a
quorum of nodes answered.`,
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
	if errors.As(err, &qe) && st != nil {
		printStatus(a.stdout, client, st)
		return fmt.Errorf("only %d of %s answered, fewer than the quorum of %d: the verdict above may be wrong", qe.Won, plural(len(st.Nodes), "node"), qe.Needed)
	}
	if err != nil {
		return err
	}
	printStatus(a.stdout, client, st)
	qs, err := client.Queue(ctx, name)
	for _, q := range qs {
		nf.logNodeError(a, q.Node, q.Err)
	}
	printQueue(a.stdout, qs)
	return nil
}

// printQueue shows the fair lock's queue on every node, head first: the
// waiter served next is the head on a quorum of nodes.
func printQueue(w io.Writer, qs []redlock.NodeQueue) {
	waiting := 0
	for _, q := range qs {
		waiting = max(waiting, len(q.Entries))
	}
	if waiting == 0 {
		fmt.Fprintln(w, "fair-lock queue: empty")
		return
	}
	fmt.Fprintf(w, "\nfair-lock queue (head first; the head of a quorum of queues is served next):\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPOS\tTICKET\tWAITER\tEXPIRES IN")
	for _, q := range qs {
		if q.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\t\t\t\n", q.Node, nodeProblem(q.Err))
			continue
		}
		if len(q.Entries) == 0 {
			fmt.Fprintf(tw, "%s\t-\t\t\t\n", q.Node)
		}
		for i, e := range q.Entries {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", q.Node, i+1, e.Ticket, shortID(e.Waiter), formatDuration(e.Expires))
		}
	}
	tw.Flush()
}

func printStatus(w io.Writer, client *redlock.Client, st *redlock.Status) {
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
	if st.Held {
		fmt.Fprintf(w, "held: yes, by %s on %d of %s, valid for at least %s\n", shortID(st.Owner), holding, plural(len(st.Nodes), "node"), formatDuration(st.Remaining))
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
