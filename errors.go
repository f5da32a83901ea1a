package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-multierror"
)

// The errors a caller acts on. Every error this package returns matches at
// least one of them with errors.Is; the typed errors below carry the
// details. What to do: ErrLocked, ErrNoQuorum and ErrValidityTooShort are
// worth another try (Acquire retries them itself); ErrLockLost means the
// guarded work may have overlapped another holder's; ErrNotHeld is a
// handle used after its release; ErrMaxWait is a wait that ran out;
// ErrInvalidConfig (and the node refusals that also match it:
// ErrNotIndependent, ErrFailoverNode, ErrEvictingNode, ErrSlotNotServed,
// and a semaphore's *PermitsMismatchError) does not go away by waiting: fix
// the program or the nodes.
var (
	// ErrLocked: another owner holds the lock. See *LockedError.
	ErrLocked = errors.New("redlock: lock is held by another owner")
	// ErrNoQuorum: too few nodes said yes, because some failed or sat out.
	// See *QuorumError for every node's own error.
	ErrNoQuorum = errors.New("redlock: no quorum")
	// ErrValidityTooShort: a quorum said yes, but the time the round trip
	// took plus the drift allowance used up the whole TTL.
	ErrValidityTooShort = errors.New("redlock: validity too short")
	// ErrLockLost: the lock is no longer ours: its validity passed, or an
	// extend or release found another owner (or no key) on too many nodes.
	ErrLockLost = errors.New("redlock: lock lost")
	// ErrNotHeld: the handle was already released.
	ErrNotHeld = errors.New("redlock: lock not held (already released)")
	// ErrMaxWait: Acquire gave up because its max wait (Options.MaxWait,
	// WithMaxWait) ran out, not the caller's context. The error also
	// matches context.DeadlineExceeded, and the last attempt's error
	// (ErrLocked, ErrNoQuorum).
	ErrMaxWait = errors.New("redlock: max wait ran out")
	// ErrInvalidConfig: a bad option, lock name, TTL or node URL.
	// See *ConfigError.
	ErrInvalidConfig = errors.New("redlock: invalid configuration")
	// ErrNotIndependent: a node is a replica, or two nodes are one server.
	// Such a set of nodes cannot give Redlock's guarantee, so it is refused.
	// It also matches ErrInvalidConfig.
	ErrNotIndependent = errors.New("redlock: nodes are not independent masters")
	// ErrFailoverNode: a node fails over by itself (a master managed by
	// Sentinel, a Redis Cluster whose masters have replicas, or a master
	// with replicas) and votes are not durable: a promoted replica may lack
	// a lock's key. Refused unless Options.DurableVotes or
	// Options.AllowFailoverNodes. It also matches ErrInvalidConfig.
	ErrFailoverNode = errors.New("redlock: node fails over and its votes are not durable")
	// ErrEvictingNode: a node may evict keys (maxmemory set, and a
	// maxmemory-policy other than noeviction; lock keys all have a TTL, so
	// volatile-* policies evict them too), or evicted keys since its start
	// (evicted_keys > 0) whatever its policy now: an evicted lock key hands
	// the lock to a second client. Refused unless Options.AllowEvictingNodes.
	// The fix is noeviction, or a Redis of its own for the locks. It also
	// matches ErrInvalidConfig.
	ErrEvictingNode = errors.New("redlock: node may evict lock keys")
	// ErrSlotNotServed: a node runs in Redis Cluster mode but cannot take
	// the lock's keys: it serves no hash slot, not the lock's slot, or its
	// cluster is down. Such a node would answer every acquire with an
	// error (MOVED, CLUSTERDOWN), silently leaving the lock to the other
	// nodes with less fault tolerance than configured, so the acquire is
	// refused instead. It comes inside a *ConfigError (it also matches
	// ErrInvalidConfig).
	ErrSlotNotServed = errors.New("redlock: cluster node does not serve the lock's hash slot")
)

// Why a node did not vote. These come inside a *NodeError, in the Errors
// of a *QuorumError or *LockedError (errors.Is finds them through the
// outer error): a caller reads them to tell an operator which node to look
// at, not to decide what to do, which the outer error says.
var (
	// ErrNodeSittingOut: a node's vote is not counted for now: it restarted
	// less than the restart grace ago, or its clock jumped.
	ErrNodeSittingOut = errors.New("redlock: node is sitting out")
	// ErrNodeDown: a node failed at the network level (or stayed silent past
	// the node timeout) a moment ago, so it is counted as a no without
	// being asked, for a short hold-off: a dead node would otherwise make
	// every split decision wait for its timeout.
	ErrNodeDown = errors.New("redlock: node is down")
	// ErrVoteNotDurable: a node's vote (an acquire or an extension) was
	// written, but not made durable in time: with Options.DurableVotes,
	// fewer of its master's replicas than could be promoted acknowledged
	// it (WAIT came back short, timed out or failed); with
	// Options.FsyncedVotes, on a node counted as persistent through
	// WAITAOF, the master did not confirm its own fsync of it (its AOF was
	// turned off, its fsync policy changed, or the fsync came too late).
	// The vote does not count, and the key may be set on the node: the
	// attempt releases it as it does on a node whose answer is unknown.
	ErrVoteNotDurable = errors.New("redlock: vote not made durable (a replica's acknowledgement or the master's own fsync is missing)")
)

// LockedError reports that another owner holds the lock: the nodes that
// answered so are alone enough to make a quorum impossible. Other nodes may
// have failed or sat out at the same time; their errors are kept in Errors.
// It matches ErrLocked, never ErrNoQuorum: the lock would be busy with every
// node up. errors.Is and errors.As also look into the node errors.
type LockedError struct {
	Name string
	// Remaining is the shortest time to live among the refusing nodes'
	// keys: the earliest the lock can free up unless its holder releases it.
	Remaining time.Duration
	// Refused is how many nodes answered that another owner holds the
	// lock, of Nodes.
	Refused, Nodes int
	// Errors holds a *NodeError for every node that failed or sat out
	// meanwhile, nil if none did.
	Errors *multierror.Error
}

// Error names the lock, when it expires at the latest unless its holder
// extends it, and the other nodes' errors, one line per cause.
func (e *LockedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redlock: lock %q is held by another owner (expires in %v at the latest)", e.Name, e.Remaining)
	if e.Errors != nil && e.Nodes > 0 {
		// The round is decided once the refusals alone lose it: nodes that
		// had not answered yet may hold it too, hence "at least".
		fmt.Fprintf(&b, "; at least %d of %d nodes said so, %d failed or sat out", e.Refused, e.Nodes, len(e.Errors.Errors))
		writeNodeErrors(&b, e.Errors.Errors)
	}
	return capText(b.String())
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Unwrap gives every failed node's error.
func (e *LockedError) Unwrap() []error {
	if e.Errors == nil {
		return nil
	}
	return e.Errors.Errors
}

// QuorumError reports an operation that did not reach a quorum because
// nodes failed or sat out: the refusals (held by another owner) alone would
// not have stopped it. Errors holds one *NodeError for every node that
// failed or sat out. It matches ErrNoQuorum, never ErrLocked.
type QuorumError struct {
	Op     string // "acquire", "extend", "release", "fence"
	Name   string
	Won    int // nodes that said yes
	Needed int // the quorum
	// Refused is how many nodes answered that another owner holds the
	// lock (acquire only): too few to lose alone.
	Refused int
	Errors  *multierror.Error
}

// Error names the operation and the lock, the votes won against the
// quorum, and every failed node's error, one line per cause.
func (e *QuorumError) Error() string {
	var b strings.Builder
	agreed := fmt.Sprintf("%d nodes agreed", e.Won)
	if e.Won == 1 {
		agreed = "1 node agreed"
	}
	// Some operations (verify) concern no lock: no empty name in quotes then.
	if e.Name != "" {
		fmt.Fprintf(&b, "redlock: %s %q: no quorum: %s, %d needed", e.Op, e.Name, agreed, e.Needed)
	} else {
		fmt.Fprintf(&b, "redlock: %s: no quorum: %s, %d needed", e.Op, agreed, e.Needed)
	}
	switch e.Refused {
	case 0:
	case 1:
		b.WriteString(", 1 node held by another owner")
	default:
		fmt.Fprintf(&b, ", %d nodes held by another owner", e.Refused)
	}
	if e.Errors != nil {
		writeNodeErrors(&b, e.Errors.Errors)
	}
	return capText(b.String())
}

// Unwrap gives ErrNoQuorum and every node's error, so errors.Is and
// errors.As look into them (context.DeadlineExceeded of a slow node, say).
func (e *QuorumError) Unwrap() []error {
	errs := []error{ErrNoQuorum}
	if e.Errors != nil {
		errs = append(errs, e.Errors.Errors...)
	}
	return errs
}

// NodeError is one node's part of a failure.
type NodeError struct {
	Node string // redacted address
	Err  error
}

// Error is the node's own error, prefixed with the node's redacted
// address.
func (e *NodeError) Error() string {
	msg := e.Err.Error()
	if strings.HasPrefix(msg, e.Node+": ") || strings.HasPrefix(msg, e.Node+" ") {
		return msg // the cause starts with the node's name already
	}
	return e.Node + ": " + msg
}

// The caps of an error that lists nodes' errors: a round over many nodes
// that fail for one reason must still read as one line.
const (
	maxGroups     = 5    // causes told, the others counted
	maxGroupNames = 5    // nodes named per cause, the others counted
	maxErrorText  = 1200 // bytes; what is cut is still in the node errors
)

// writeNodeErrors writes the nodes' errors of a round, one entry per cause:
// nodes that failed for the same reason are named together, and the reason
// is told once. Every node's own error stays reachable through Unwrap.
func writeNodeErrors(b *strings.Builder, errs []error) {
	type group struct {
		names []string
		first error       // the first node's error, told as it is when it is alone
		text  string      // the cause, without the node's name
		grace *graceError // the longest sit-out, for a group of sit-outs
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, err := range errs {
		var name, text, key string
		var ne *NodeError
		if errors.As(err, &ne) {
			name, text = ne.Node, withoutName(ne.Err.Error(), ne.Node)
		} else {
			text = err.Error()
		}
		key = text
		var ge *graceError
		if errors.As(err, &ge) {
			key = "grace: " + ge.What
		}
		g := byKey[key]
		if g == nil {
			g = &group{text: text, first: err}
			byKey[key] = g
			groups = append(groups, g)
		}
		if name != "" {
			g.names = append(g.names, name)
		}
		if ge != nil && (g.grace == nil || ge.Left > g.grace.Left) {
			g.grace = ge
		}
	}
	for i, g := range groups {
		if i == maxGroups {
			fmt.Fprintf(b, "; and %d more causes", len(groups)-i)
			return
		}
		b.WriteString("; ")
		if len(g.names) <= 1 {
			b.WriteString(g.first.Error()) // one node (or none): its own error, which names it
			continue
		}
		n := len(g.names)
		shown := g.names[:min(n, maxGroupNames)]
		who := fmt.Sprintf("%d nodes (%s", n, strings.Join(shown, ", "))
		if n > len(shown) {
			who += fmt.Sprintf(" and %d more", n-len(shown))
		}
		who += ")"
		if ge := g.grace; ge != nil {
			fmt.Fprintf(b, "%s sit out the %v restart grace for up to %v: %s, so they may have lost locks' keys (%s)",
				who, ge.Grace, ge.Left, strings.Replace(ge.What, "(it keeps", "(a node keeps", 1), graceWhose)
			continue
		}
		b.WriteString(who + ": " + g.text)
	}
}

// withoutName takes a node's name out of its error's text, for a cause
// told once for several nodes ("dial tcp 10.0.0.1:6379: connect: ..."
// reads "dial tcp: connect: ...").
func withoutName(text, name string) string {
	if name == "" || !strings.Contains(text, name) {
		return text
	}
	text = strings.ReplaceAll(text, " "+name+":", ":")
	text = strings.ReplaceAll(text, " "+name, "")
	return strings.ReplaceAll(text, name, "the node")
}

// capText bounds an error's text; the full detail stays in the errors it
// wraps.
func capText(s string) string {
	if len(s) <= maxErrorText {
		return s
	}
	cut := maxErrorText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "… (cut; every node's error is in the error's Errors)"
}

// Unwrap gives the node's own error.
func (e *NodeError) Unwrap() error { return e.Err }

// graceError reports a node that sits out the restart grace: it (or, on a
// Cluster node, a master of the lock's slot) started without persistence,
// or had another event that may have lost keys (a promotion, evictions, a
// flush), less than the grace ago, so it may have lost the keys of locks
// that are still valid. It matches ErrNodeSittingOut.
type graceError struct {
	// What happened, e.g. "started without persistence (...)", "was
	// promoted from replica ...", on a Cluster node "its master <addr> ...".
	What  string
	Grace time.Duration // the restart grace in force
	Left  time.Duration // the longest it may still sit out
}

// graceWhose says where the grace comes from.
const graceWhose = "the grace is the larger of this client's and the largest TTL in use on the nodes"

func (e *graceError) Error() string {
	// The event is dated as late as it may have been, so Left is an upper
	// bound; the grace may come from another client's longer TTL, through
	// the nodes' register.
	return fmt.Sprintf("%v: %s, so it may have lost locks' keys: it sits out the %v restart grace and votes in at most %v (%s)",
		ErrNodeSittingOut, e.What, e.Grace, e.Left, graceWhose)
}

// Is makes errors.Is(err, ErrNodeSittingOut) true.
func (e *graceError) Is(target error) bool { return target == ErrNodeSittingOut }

// ConfigError names a bad setting and the value given for it.
type ConfigError struct {
	Field  string // "TTL", "lock name", "node URL", ...
	Value  string // the value given (passwords redacted)
	Reason string
	// Err is an underlying cause, such as ErrNotIndependent.
	Err error
}

// Error names the setting, the value given (passwords redacted) and why
// it was refused.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("redlock: invalid %s %s: %s", e.Field, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Unwrap gives the underlying cause, if any.
func (e *ConfigError) Unwrap() error { return e.Err }

// PermitsMismatchError reports a semaphore asked for with Permits permits
// while a quorum of nodes record Recorded: permits of the same name are
// live that were taken with Recorded. Two numbers of permits for one name
// would let the larger number of holders in at once (slot i of both is the
// same key, but the larger one has more slots), so the nodes refuse it
// until every permit taken with the other number is released or expired.
// It matches ErrInvalidConfig: waiting does not fix a program that
// disagrees with another one about the number. errors.As finds it.
type PermitsMismatchError struct {
	Name     string
	Permits  int   // the number asked for
	Recorded int64 // the number the nodes record
	// Denied is how many nodes refused for that reason, of Nodes.
	Denied, Nodes int
}

// Error names the semaphore, the number of permits asked for and the
// number the nodes record.
func (e *PermitsMismatchError) Error() string {
	return fmt.Sprintf("redlock: semaphore %q asked for with %d permits, but %d of %d nodes record %d permits for its live permits: every client must use one number of permits per name", e.Name, e.Permits, e.Denied, e.Nodes, e.Recorded)
}

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *PermitsMismatchError) Is(target error) bool { return target == ErrInvalidConfig }

// lostError is a lock loss with its cause.
type lostError struct{ cause error }

func (e *lostError) Error() string {
	return "redlock: lock lost: " + strings.TrimPrefix(e.cause.Error(), "redlock: ")
}

// Unwrap gives ErrLockLost and the cause.
func (e *lostError) Unwrap() []error { return []error{ErrLockLost, e.cause} }

// maxWaitError is the cause of a waiting context that the max wait ended.
type maxWaitError struct{ d time.Duration }

func (e *maxWaitError) Error() string { return fmt.Sprintf("the max wait of %v ran out", e.d) }

// Is makes errors.Is match ErrMaxWait, and context.DeadlineExceeded as a
// deadline of the caller's own would.
func (e *maxWaitError) Is(target error) bool {
	return target == ErrMaxWait || target == context.DeadlineExceeded
}

// withMaxWait bounds a wait by d, with a cause that tells the max wait from
// the caller's own deadline (waitErr).
func withMaxWait(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, &maxWaitError{d})
}

// waitErr is why a wait's context is done: the max wait that ran out, or
// the caller's context's error. nil while it is not done.
func waitErr(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrMaxWait) {
		return cause
	}
	return err
}

// notHeld is how a released handle ends: Err, and every later Extend or
// Release, name the lock (what is a nested handle).
func notHeld(name, what string) error {
	return fmt.Errorf("%w: %q%s", ErrNotHeld, name, what)
}

// configErr is shorthand for the common case.
func configErr(field string, value any, reason string) error {
	return &ConfigError{Field: field, Value: fmt.Sprintf("%v", value), Reason: reason}
}

// retryable tells whether another attempt may succeed where this one failed.
func retryable(err error) bool {
	if errors.Is(err, ErrInvalidConfig) {
		return false
	}
	return errors.Is(err, ErrLocked) || errors.Is(err, ErrNoQuorum) || errors.Is(err, ErrValidityTooShort)
}
