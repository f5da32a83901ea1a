package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quorumlabs/redlock"
)

var nodesHelp = cmdHelp{
	name:     "nodes",
	synopsis: "[NAME]",
	about: `Probe every node: reachability, role, run id, uptime, persistence, clock offset against this
host and round-trip time, and whether its vote counts now (a node that restarted recently, or
whose clock jumped, sits out for a while). Then check that the set is independent: no replica,
no server listed twice. Each verdict is yes, no or unknown (a node that did not answer could
not be checked) with the reason, and the last line says whether exec would get a lock now.

A node in Redis Cluster mode can take only the keys of the hash slots it serves: with NAME,
its vote is judged for that lock's slot, as exec judges it (a node serving no slot, or not
the slot of the register redlock:ttl-in-use that every acquire raises, can take no lock at
all). Without NAME, such a node is shown with the slots it serves.
Exits 1 if any node could not be probed, the set is not independent, or fewer than a quorum
of nodes vote.

A second table shows what each node is (master, cluster, sentinel), the master that holds
the keys (with NAME, a Cluster's master serving that lock's slot; for a Sentinel node the
master Sentinel names now), its replicas with how many bytes of the replication stream each
has not acknowledged and how long ago it last did, and whether the node's votes survive a
failover. Nodes that fail over by themselves (Sentinel masters, Cluster masters with
replicas, masters with replicas) are refused unless --durable-votes or --allow-failover-nodes
is given; nodes shows them anyway.

A node without appendfsync always loses its keys and fence register when it crashes; the
restart grace (on by default, one lock TTL) keeps it out until every lock it knew about has
expired. Turning the grace off on such nodes is unsafe, and this command says so.`,
	examples: `
redlock nodes
redlock nodes --ttl 30s          # the TTL your jobs use: the restart grace follows it
redlock nodes nightly-report     # also judge cluster-mode nodes for this lock's hash slot
redlock nodes --nodes 'redis+cluster://10.0.1.1:6379?addr=10.0.1.2:6379,redis+sentinel://10.0.2.1:26379?master_name=locks,redis://10.0.3.1:6379' job
REDLOCK_NODES=rediss://:secret@a:6380,rediss://:secret@b:6380,rediss://:secret@c:6380 redlock nodes`,
}

func runNodes(ctx context.Context, a *app, args []string) error {
	var nf ttlNodeFlags
	fs := newFlagSet(a, nodesHelp)
	nf.register(fs, "the lock `TTL` your clients use; the default restart grace is one TTL")
	timeout := registerTimeout(fs)
	positional, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(positional) > 1 {
		return usagef("nodes takes at most one lock NAME, got %q", positional)
	}
	name := ""
	if len(positional) == 1 {
		if name = positional[0]; name == "" {
			return usagef("the lock NAME must not be empty")
		}
	}
	if err := positiveDuration("ttl", nf.ttl); err != nil {
		return err
	}
	if err := positiveDuration("timeout", *timeout); err != nil {
		return err
	}
	opts := nf.options(a)
	client, refused, err := nf.connectForView(a, opts)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	// With NAME, votes are judged for that lock and a Cluster node shows its slot's master.
	var infos []redlock.NodeInfo
	if name == "" {
		infos = client.Nodes(ctx)
	} else if infos, err = client.NodesFor(ctx, name); err != nil {
		return withExitCode(exitUsage, err)
	}
	for _, n := range infos {
		nf.logNodeError(a, n.Node, n.Err)
	}
	slot := -1
	if name != "" {
		slot = client.Keys(name).Slot
	}
	rows := judgeNodes(infos, slot)
	printNodes(a.stdout, rows)
	fmt.Fprintln(a.stdout)
	printDeployments(a.stdout, infos, name, refused != nil)
	fmt.Fprintln(a.stdout)
	for _, warning := range persistenceWarnings(infos, nf.grace.d, nf.ttl) {
		fmt.Fprintln(a.stdout, warning)
	}
	for _, warning := range certWarnings(infos, time.Now(), certWarningPeriod) {
		fmt.Fprintln(a.stdout, warning)
	}
	v := verdicts(rows, client.Quorum(), name, slot)
	if name != "" && strings.HasPrefix(v.locks, "yes") {
		// The nodes can take locks, but exec takes this one only if nobody holds it.
		if st, err := client.Inspect(ctx, name); err == nil && st.Held {
			v.locks = fmt.Sprintf("no: the nodes can take locks, but lock %q is held by another owner (%s), valid for at least %s: exec would exit 75 now",
				name, holderOf(st), formatDuration(st.Remaining))
		}
	}
	fmt.Fprintf(a.stdout, "quorum: %s\n", v.quorum)
	fmt.Fprintf(a.stdout, "independent: %s\n", v.independent)
	if v.slots != "" {
		fmt.Fprintf(a.stdout, "cluster slots: %s\n", v.slots)
	}
	if refused != nil {
		// The library refuses the set at New: exec stops there, whatever the probe says.
		v.locks = fmt.Sprintf("no: %v: exec exits %d", failoverHint(refused), exitUsage)
		v.problems = append(v.problems, failoverHint(refused))
	}
	fmt.Fprintf(a.stdout, "locks: %s\n", v.locks)
	if len(v.problems) > 0 {
		// A problem the probe found, not a mistake in how redlock was called: exit 1.
		return withExitCode(exitFailure, errors.Join(v.problems...))
	}
	return nil
}

// holderOf names a lock's holder: its owner value and what it recorded, if anything.
func holderOf(st *redlock.Status) string {
	if st.Metadata == "" {
		return shortID(st.Owner)
	}
	return shortID(st.Owner) + ": " + printableMetadata(st.Metadata)
}

// certWarningPeriod: a node certificate that expires sooner than this is worth a line,
// time enough to renew it before the clients refuse the node.
const certWarningPeriod = 14 * 24 * time.Hour

// nodeRow is one node's line: what the probe learned and the two per-node verdicts.
type nodeRow struct {
	info        redlock.NodeInfo
	votes       string // "yes", or "no: why"
	independent string // "yes", "no: why", or "unknown: why"
	// slot is "" for a node not in cluster mode; otherwise whether it serves the lock's
	// hash slot: "yes: ...", "no: why", or "unknown: ..." when no lock NAME was given.
	slot string
}

// judgeNodes gives every node its verdicts by the rules exec applies: a node's vote counts
// only if it answered, is a master, is not another entry's server, is not sitting out, and,
// in cluster mode, serves the lock's hash slot (slot, or -1 when no lock was named). A node
// that did not answer could not be checked: its independence is unknown, not yes.
func judgeNodes(infos []redlock.NodeInfo, slot int) []nodeRow {
	rows := make([]nodeRow, len(infos))
	byRunID := make(map[string][]string)
	for _, n := range infos {
		if n.Err == nil && n.RunID != "" {
			byRunID[n.RunID] = append(byRunID[n.RunID], n.Node)
		}
	}
	for i, n := range infos {
		r := &rows[i]
		r.info = n
		switch {
		case n.Err != nil:
			r.independent = "unknown: not checked"
			r.votes = "no: " + nodeProblem(n.Err)
			continue
		case n.Role != "master":
			r.independent = fmt.Sprintf("no: a replica (role %s), not a master", n.Role)
		case len(byRunID[n.RunID]) > 1:
			var others []string
			for _, o := range byRunID[n.RunID] {
				if o != n.Node {
					others = append(others, o)
				}
			}
			r.independent = fmt.Sprintf("no: same server as %s (same run id)", strings.Join(others, ", "))
		default:
			r.independent = "yes"
		}
		r.slot = slotVerdict(n.Cluster, slot)
		switch {
		case r.independent != "yes":
			r.votes = "no: not independent"
		case strings.HasPrefix(r.slot, "no: "):
			r.votes = r.slot
		case !n.Voting:
			r.votes = "no: " + strings.TrimPrefix(n.SitOutReason, "redlock: ")
		case strings.HasPrefix(r.slot, "unknown: "):
			r.votes = "only for some locks: " + strings.TrimPrefix(r.slot, "unknown: ")
		default:
			r.votes = "yes"
		}
	}
	return rows
}

// slotVerdict tells whether a node in cluster mode can take the keys of hash slot slot (-1:
// no lock named), by the rule the library applies to every acquire (ClusterInfo.Serves).
func slotVerdict(ci *redlock.ClusterInfo, slot int) string {
	if ci == nil {
		return ""
	}
	why := func(err error) string { return strings.TrimPrefix(err.Error(), redlock.ErrSlotNotServed.Error()+": ") }
	if slot >= 0 {
		if err := ci.Serves(slot); err != nil {
			return "no: " + why(err)
		}
		return fmt.Sprintf("yes: cluster mode, serves the lock's slot %d", slot)
	}
	// Without a lock: a node that can take no key at all is a no; one serving some slots
	// takes some locks.
	first := 0
	if len(ci.Slots) > 0 {
		first = ci.Slots[0].First
	}
	if err := ci.Serves(first); err != nil {
		return "no: " + why(err)
	}
	if servesEverySlot(ci) {
		return "yes: cluster mode, serves every hash slot (0-16383)"
	}
	ranges := make([]string, len(ci.Slots))
	for i, r := range ci.Slots {
		ranges[i] = r.String()
	}
	return fmt.Sprintf("unknown: cluster mode, serves hash slots %s; give a lock NAME to check its slot", strings.Join(ranges, ","))
}

// servesEverySlot tells whether a node in cluster mode serves all 16384 hash slots, in
// however many ranges it lists them: then it takes every lock, as a node not in cluster mode.
func servesEverySlot(ci *redlock.ClusterInfo) bool {
	const slots = 16384
	var served [slots]bool
	count := 0
	for _, r := range ci.Slots {
		for s := max(r.First, 0); s <= min(r.Last, slots-1); s++ {
			if !served[s] {
				served[s] = true
				count++
			}
		}
	}
	return count == slots
}

// verb picks the singular or plural form for n subjects.
func verb(n int, singular, pluralForm string) string {
	if n == 1 {
		return singular
	}
	return pluralForm
}

// nodeProblem says why a node could not be probed, in an operator's words.
func nodeProblem(err error) string {
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "unreachable: no answer in time: " + err.Error()
	case errors.As(err, &netErr):
		return "unreachable: " + err.Error()
	case strings.Contains(err.Error(), "NOAUTH"):
		// No credential was sent. A password written where the user name goes
		// (redis://PASSWORD@host) is sent as a user name without a password.
		return "no password sent, the node requires one (" + err.Error() + "): write it as redis://:PASSWORD@host, with the colon"
	case strings.Contains(err.Error(), "WRONGPASS"):
		return "authentication failed: wrong password or user name (" + err.Error() + ")"
	case errors.Is(err, io.EOF):
		return "the node closed the connection at once (EOF): if it serves TLS only, write its URL as rediss://"
	case strings.HasPrefix(err.Error(), "CLUSTERDOWN"), strings.HasPrefix(err.Error(), "MOVED"):
		return "cluster mode, does not serve this key's slot: " + err.Error()
	}
	return "probe failed: " + err.Error()
}

// nodeVerdicts are the summary lines under the table and the problems behind exit 1.
type nodeVerdicts struct {
	quorum, independent, slots, locks string
	problems                          []error
}

// verdicts sums the rows up. Each verdict is yes, no or unknown with the reason, and the
// locks line says what exec would do with these nodes now.
func verdicts(rows []nodeRow, quorum int, name string, slot int) nodeVerdicts {
	var v nodeVerdicts
	voting, checked, clusterNodes := 0, 0, 0
	var notIndependent, unchecked, notServing, slotUnknown []string
	for _, r := range rows {
		if r.votes == "yes" || strings.HasPrefix(r.votes, "only for some locks") {
			voting++
		}
		if r.slot != "" {
			clusterNodes++
		}
		switch {
		case strings.HasPrefix(r.slot, "no: "):
			notServing = append(notServing, fmt.Sprintf("%s: %s", r.info.Node, strings.TrimPrefix(r.slot, "no: ")))
		case strings.HasPrefix(r.slot, "unknown: "):
			slotUnknown = append(slotUnknown, r.info.Node)
		}
		switch {
		case r.info.Err != nil:
			unchecked = append(unchecked, fmt.Sprintf("%s (%s)", r.info.Node, nodeProblem(r.info.Err)))
		case r.independent != "yes":
			checked++
			notIndependent = append(notIndependent, fmt.Sprintf("%s: %s", r.info.Node, strings.TrimPrefix(r.independent, "no: ")))
		default:
			checked++
		}
	}
	total := len(rows)
	if voting >= quorum {
		v.quorum = fmt.Sprintf("yes: %d of %s vote, %d needed", voting, plural(total, "node"), quorum)
	} else {
		votes := fmt.Sprintf("only %d of %s vote", voting, plural(total, "node"))
		if voting == 0 {
			votes = fmt.Sprintf("none of the %s votes", plural(total, "node"))
		}
		v.quorum = fmt.Sprintf("no: %s, %d needed", votes, quorum)
		v.problems = append(v.problems, fmt.Errorf("%s, quorum is %d", votes, quorum))
	}
	switch {
	case len(notIndependent) > 0:
		v.independent = "no: " + strings.Join(notIndependent, "; ")
		v.problems = append(v.problems, fmt.Errorf("not independent: %s", strings.Join(notIndependent, "; ")))
	case len(unchecked) > 0:
		v.independent = fmt.Sprintf("unknown: %d of %s could not be checked: %s", len(unchecked), plural(total, "node"), strings.Join(unchecked, "; "))
		switch {
		case checked == 1:
			v.independent += "; the one checked is a master"
		case checked > 1:
			v.independent += fmt.Sprintf("; the %d checked are distinct masters", checked)
		}
		v.problems = append(v.problems, fmt.Errorf("%d of %s could not be checked", len(unchecked), plural(total, "node")))
	default:
		v.independent = fmt.Sprintf("yes: %d distinct masters", total)
	}
	lock := "any lock"
	if name != "" {
		lock = fmt.Sprintf("lock %q (hash slot %d)", name, slot)
	}
	switch {
	case len(notServing) > 0:
		v.slots = fmt.Sprintf("no: %s cannot take %s: %s", plural(len(notServing), "node"), lock, strings.Join(notServing, "; "))
		v.problems = append(v.problems, fmt.Errorf("%s in cluster mode cannot take %s", plural(len(notServing), "node"), lock))
	case len(slotUnknown) > 0:
		v.slots = fmt.Sprintf("unknown: %s in cluster mode %s only some hash slots (%s); give a lock NAME to check its slot", plural(len(slotUnknown), "node"), verb(len(slotUnknown), "serves", "serve"), strings.Join(slotUnknown, ", "))
	case clusterNodes > 0:
		v.slots = fmt.Sprintf("yes: the %s in cluster mode %s %s", plural(clusterNodes, "node"), verb(clusterNodes, "serves", "serve"), lock)
	}
	switch {
	case len(notIndependent) > 0:
		v.locks = "no: exec refuses a set of nodes that is not independent (exit 69)"
	case len(notServing) > 0:
		v.locks = fmt.Sprintf("no: exec refuses %s while a node in cluster mode cannot take it (exit 69)", lock)
	case voting < quorum:
		v.locks = fmt.Sprintf("no: too few nodes vote for a quorum of %d (exec exits 69)", quorum)
	case len(unchecked) > 0:
		v.locks = fmt.Sprintf("yes, %d of %s vote; but a node that could not be checked may turn out a replica or a duplicate", voting, plural(total, "node"))
	case len(slotUnknown) > 0:
		v.locks = "only for locks whose hash slot every node in cluster mode serves: give a lock NAME to check one"
	default:
		v.locks = "yes"
	}
	return v
}

func printNodes(w io.Writer, rows []nodeRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// CLOCK_OFFSET is against this host's clock, VS_OTHERS against the
	// median of the other nodes' (what the clock guard compares), and
	// TTL_IN_USE the node's register of the largest TTL any client uses
	// (how long it would sit out after a restart without persistence).
	// TLS is the version and when the node's certificate expires, "off" for plain TCP.
	// EVICTION is the node's maxmemory-policy, its limit and the keys it evicted.
	fmt.Fprintln(tw, "NODE\tROLE\tRUN_ID\tUPTIME\tAOF\tEVICTION\tTTL_IN_USE\tCLOCK_OFFSET\tVS_OTHERS\tRTT\tTLS\tINDEPENDENT\tVOTES")
	for _, r := range rows {
		n := r.info
		if n.Err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\t%s\n", n.Node, r.independent, r.votes)
			continue
		}
		ttlInUse := "-"
		if n.LargestTTL > 0 {
			ttlInUse = formatDuration(n.LargestTTL)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, n.Role, shortID(n.RunID),
			n.Uptime.Round(time.Second), persistence(n), eviction(n), ttlInUse, signedDuration(n.ClockOffset), signedDuration(n.ClockSkew),
			formatDuration(n.RTT), tlsState(n), r.independent, r.votes)
	}
	tw.Flush()
}

// printDeployments shows what each node is and who holds its keys: the master serving the
// lock's slot (a Cluster node, with a NAME), the master Sentinel names, their replicas and how
// far behind each is, and whether the node's votes survive a failover. refusedAtNew tells that
// the library refused the set for a node that fails over (a Sentinel master), so these nodes
// are shown through a client that accepts them.
func printDeployments(w io.Writer, infos []redlock.NodeInfo, name string, refusedAtNew bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	master := "MASTER"
	if name != "" {
		master = "MASTER_OF_LOCK"
	}
	fmt.Fprintf(tw, "NODE\tKIND\t%s\tREPLICAS (bytes behind, last ack)\tDURABLE_VOTES\n", master)
	for _, n := range infos {
		if n.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\n", n.Node, n.Kind)
			continue
		}
		var masters, replicas []string
		listed := 0
		for _, m := range n.Masters {
			addr := m.Addr
			if len(m.Slots) > 0 {
				ranges := make([]string, len(m.Slots))
				for i, r := range m.Slots {
					ranges[i] = r.String()
				}
				addr += " slots " + strings.Join(ranges, ",")
			}
			if m.Promoted {
				addr += " (promoted)"
			}
			masters = append(masters, addr)
			for _, r := range m.Replicas {
				listed++
				replicas = append(replicas, fmt.Sprintf("%s %s %dB %s", r.Addr, r.State, r.Behind, formatDuration(r.LastAck)))
			}
		}
		if name == "" && n.Kind == "cluster" && n.Replicas > listed {
			// CLUSTER NODES lists replicas whose link is down: they may still be promoted.
			replicas = append(replicas, fmt.Sprintf("%d not connected", n.Replicas-listed))
		}
		if len(replicas) == 0 {
			replicas = []string{"none"}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Node, n.Kind, strings.Join(masters, "; "), strings.Join(replicas, "; "), durableVotes(n, refusedAtNew))
	}
	tw.Flush()
}

// durableVotes says whether a node's votes survive a failover, from what the library says:
// its refusal (Refused, or at New for a Sentinel node) and whether votes wait for replicas.
func durableVotes(n redlock.NodeInfo, refusedAtNew bool) string {
	replicas := n.Replicas > 0 || n.Kind == "sentinel"
	switch {
	case errors.Is(n.Refused, redlock.ErrFailoverNode), n.Kind == "sentinel" && refusedAtNew:
		return fmt.Sprintf("no: refused, exec exits %d (--durable-votes makes votes wait for the replicas; --allow-failover-nodes accepts them as they are)", exitUsage)
	case !replicas:
		return "n/a: no replica to fail over to"
	case n.DurableVotes:
		return "yes: every vote waits for the master's replicas (WAIT)"
	}
	return "no: accepted (--allow-failover-nodes): a failover during a hold loses this node's vote"
}

// tlsState shows a node's TLS version and when its certificate expires.
func tlsState(n redlock.NodeInfo) string {
	if n.TLS == "" {
		return "off"
	}
	v := strings.TrimPrefix(n.TLS, "TLS ")
	if n.CertExpires.IsZero() {
		return v
	}
	return v + " cert until " + n.CertExpires.UTC().Format("2006-01-02T15:04Z")
}

// certWarnings names the nodes whose certificate expires within soon (or has expired).
func certWarnings(infos []redlock.NodeInfo, now time.Time, soon time.Duration) []string {
	var out []string
	for _, n := range infos {
		if n.Err == nil && !n.CertExpires.IsZero() && n.CertExpires.Sub(now) < soon {
			out = append(out, fmt.Sprintf("warning: %s: its TLS certificate (%s) expires at %s, in %s: renew it before clients refuse the node",
				n.Node, n.CertSubject, n.CertExpires.UTC().Format(time.RFC3339), formatDuration(n.CertExpires.Sub(now).Round(time.Minute))))
		}
	}
	return out
}

// eviction shows a node's eviction policy: "noeviction", or the policy with
// its maxmemory and how many keys the node evicted since it started.
func eviction(n redlock.NodeInfo) string {
	policy := cmp.Or(n.MaxMemoryPolicy, "?")
	if n.MaxMemory == 0 {
		if n.EvictedKeys > 0 {
			return fmt.Sprintf("%s, no maxmemory, %d evicted", policy, n.EvictedKeys)
		}
		return policy + ", no maxmemory"
	}
	return fmt.Sprintf("%s %dB, %d evicted", policy, n.MaxMemory, n.EvictedKeys)
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
			out = append(out, fmt.Sprintf("WARNING: %s: %s, and the restart grace is off: after a crash such a node rejoins without its keys and can hand a held lock to a second owner", nodes, kind))
			continue
		}
		out = append(out, fmt.Sprintf("note: %s: %s, so a crash loses keys; the restart grace keeps a restarted node out for %v, or for the largest TTL in use on the nodes if longer", nodes, kind, covered))
	}
	return out
}
