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
server listed twice): a key counted twice would make the verdict wrong. Then the fair lock's
queue (see WithFairness), node by node, head first: each waiter's ticket, its id and how long
its entry lives unless it refreshes it. Exits 0 when the lock is held or not held, 1 when the
verdict is unknown, the nodes are not independent, or fewer than a quorum of nodes answered.

For a semaphore (see exec --permits), it shows every slot the same way: its holder on each node,
and whether one owner holds it on a quorum. With --permits K it reads slots 0 to K-1, and exits
64 if a quorum of nodes record another number of permits for the live permits (as exec would be
refused). Without --permits, when NAME has no lock, it looks for a semaphore NAME: while permits
are held, the number the nodes record; otherwise the slots it finds traces of (a key, or a fence
register, which outlives the holders by a day): the slots used lately.`,
	examples: `
redlock status nightly-report
redlock status --nodes redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379 deploy
redlock status --permits 4 encoder`,
}

func runStatus(ctx context.Context, a *app, args []string) error {
	var nf nodeFlags
	fs := newFlagSet(a, statusHelp)
	nf.register(fs)
	timeout := registerTimeout(fs)
	permits := fs.Int("permits", 0, "show the semaphore NAME of `K` permits; 0: the lock NAME, or a semaphore found by its traces")
	name, err := parseLockName(fs, args)
	if err != nil {
		return err
	}
	if err := positiveDuration("timeout", *timeout); err != nil {
		return err
	}
	if *permits < 0 || *permits > redlock.MaxPermits {
		return usagef("--permits must be from 0 to %d, got %d", redlock.MaxPermits, *permits)
	}
	client, refused, err := nf.connectForView(a, nf.options(a, 0))
	if err != nil {
		return err
	}
	defer client.Close()
	if refused != nil {
		fmt.Fprintf(a.stderr, "redlock status: warning: %v: exec refuses these nodes; shown anyway\n", failoverHint(refused))
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	if *permits > 0 {
		return semaphoreStatus(ctx, a, &nf, client, name, *permits, false)
	}
	st, err := client.Inspect(ctx, name)
	if err == nil && unused(st) {
		// No trace of a lock NAME: maybe it is a semaphore.
		if serr := semaphoreStatus(ctx, a, &nf, client, name, redlock.MaxPermits, true); !errors.Is(serr, errNoSemaphore) {
			return serr
		}
	}
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
	infos, err := client.NodesFor(ctx, name)
	if err != nil {
		return err
	}
	for _, n := range infos {
		if errors.Is(n.Refused, redlock.ErrFailoverNode) {
			fmt.Fprintf(a.stderr, "redlock status: warning: %v: exec refuses this node\n", failoverHint(n.Refused))
		}
		if n.Err == nil && (n.EvictedKeys > 0 || n.MaxMemory > 0 && n.MaxMemoryPolicy != "noeviction") {
			// An evicted lock key is a lock another client can take.
			fmt.Fprintf(a.stderr, "redlock status: warning: %s: eviction %s (a node that may evict is refused unless --allow-evicting-nodes)\n", n.Node, eviction(n))
		}
	}
	notIndependent := notIndependentNodes(judgeNodes(infos, client.Keys(name).Slot))
	printStatus(a.stdout, client, st, notIndependent)
	qs, _ := client.Queue(ctx, name) // per-node errors are in the entries
	for _, q := range qs {
		nf.logNodeError(a, q.Node, q.Err)
	}
	printQueue(a.stdout, qs)
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
	fmt.Fprintf(w, "lock %q: key %s on %s, quorum %d\n\n", st.Name, client.Keys(st.Name).Lock, plural(len(st.Nodes), "node"), client.Quorum())
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
		fmt.Fprintln(w, "held: unknown: the nodes are not independent (a replica holds a copy of its master's key, a server listed twice is read twice), so a key may be counted twice; exec refuses these nodes (exit 69)")
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

// unused tells whether no node has a key or a fence register of the lock.
func unused(st *redlock.Status) bool {
	for _, n := range st.Nodes {
		if n.Owner != "" || n.Fence != 0 {
			return false
		}
	}
	return true
}

// errNoSemaphore is semaphoreStatus's answer, when looking, to a name without a semaphore.
var errNoSemaphore = errors.New("no semaphore")

// semaphoreStatus prints the slots of the semaphore name of the given permits. When looking
// (the number of permits is unknown), it shows only the slots up to the last with a trace, and
// returns errNoSemaphore, with nothing printed, if there is none.
func semaphoreStatus(ctx context.Context, a *app, nf *nodeFlags, client *redlock.Client, name string, permits int, looking bool) error {
	sem, err := client.Semaphore(name, permits) // only reads
	if err != nil {
		return withExitCode(exitUsage, err)
	}
	st, err := sem.Holders(ctx)
	var pm *redlock.PermitsMismatchError
	if looking && errors.As(err, &pm) && pm.Recorded >= 1 && pm.Recorded <= redlock.MaxPermits {
		// The nodes record the number of permits of the live permits: show that many.
		return semaphoreStatus(ctx, a, nf, client, name, int(pm.Recorded), false)
	}
	var qe *redlock.QuorumError
	if err != nil && !errors.As(err, &qe) {
		return err
	}
	if looking {
		last := -1
		for i, slot := range st.Slots {
			if !unused(&slot) {
				last = i
			}
		}
		if last < 0 {
			return errNoSemaphore
		}
		st.Slots = st.Slots[:last+1]
	}
	for _, n := range st.Slots[0].Nodes {
		nf.logNodeError(a, n.Node, n.Err)
	}
	printSemaphore(a.stdout, client, sem, st, looking)
	if qe != nil {
		return fmt.Errorf("only %d of %s answered, fewer than the quorum of %d: the verdict above may be wrong", qe.Won, plural(len(st.Slots[0].Nodes), "node"), qe.Needed)
	}
	return nil
}

func printSemaphore(w io.Writer, client *redlock.Client, sem *redlock.Semaphore, st *redlock.SemaphoreStatus, looking bool) {
	nodes := len(st.Slots[0].Nodes)
	if looking {
		fmt.Fprintf(w, "semaphore %q: no lock of that name; slots 0 to %d have traces (pass --permits K for all K), keys %s..., on %s, quorum %d\n\n",
			st.Name, len(st.Slots)-1, client.Keys(sem.Name()).Permit(0), plural(nodes, "node"), client.Quorum())
	} else {
		fmt.Fprintf(w, "semaphore %q: %d permits, keys %s..., on %s, quorum %d\n\n", st.Name, st.Permits, client.Keys(sem.Name()).Permit(0), plural(nodes, "node"), client.Quorum())
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SLOT\tNODE\tOWNER\tTTL\tFENCE")
	for i, slot := range st.Slots {
		for _, n := range slot.Nodes {
			if n.Err != nil {
				fmt.Fprintf(tw, "%d\t%s\t%s\t\t\n", i, n.Node, nodeProblem(n.Err))
				continue
			}
			owner, ttl := "-", "-"
			if n.Owner != "" {
				owner, ttl = shortID(n.Owner), formatDuration(n.TTL)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\n", i, n.Node, owner, ttl, n.Fence)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	held := 0
	for i, slot := range st.Slots {
		if slot.Held {
			held++
			fmt.Fprintf(w, "slot %d: held by %s, valid for at least %s, highest fence %d\n", i, shortID(slot.Owner), formatDuration(slot.Remaining), slot.Fence)
		} else {
			fmt.Fprintf(w, "slot %d: free, highest fence %d\n", i, slot.Fence)
		}
	}
	fmt.Fprintf(w, "held: %d of %d permits\n", held, len(st.Slots))
}
