package redlock

import (
	"context"
	"strings"
	"sync"
	"time"
)

// The lock-kind seam. The core (the attempt and its quorum decision, the
// wait, the durable step, fencing, extension and release) runs one fixed
// protocol and asks the lock's kind whatever differs between primitives:
// which scripts run on the nodes and what their replies look like, how the
// replies of a round count and what winning means, how a release wakes
// waiters, whether a release's answer is a vote, and how a waiter waits.
// It never asks which primitive a lock is. Each primitive is a lockKind
// value in a file of its own (mutex.go and the files it names); a new one
// needs no change in the core.

// lockKind is one kind of lock: the mutex, a side of a read-write lock, a
// semaphore's permit, the fair lock. A kind value may carry the state of
// one request (the semaphore it takes a permit of, say): the core keeps it
// from the request (lockConfig.kind) through every attempt and the Lock.
type lockKind interface {
	// spec is what the kind runs on the nodes and how the core treats it.
	spec() *kindSpec
	// attempt prepares one try at the lock called name: a new owner
	// value and proposal, its keys, its acquire and release commands.
	attempt(c *Client, name string, ttl time.Duration) *attempt
	// tally is the counter that decides a's acquire round; nil for the
	// majority of yes votes (the mutex's), which costs no allocation.
	tally(a *attempt) voteTally
	// answered is told, after it was reported, of every acquire reply
	// that gave a the lock on n, including those that come after the
	// decision (a node may have given a key other than the one won).
	answered(a *attempt, n *node, r nodeReply)
	// won is told of a won decision before fencing: the keys the fencing
	// slow path, extensions and the release count on are known now. (d
	// is a copy: a pointer passed through an interface would move every
	// attempt's decision to the heap.)
	won(a *attempt, d decision)
	// refused turns the error of a lost round into the kind's own, if
	// the kind has one for it (a quorum of nodes that refused for a
	// reason of the kind's); otherwise it returns err.
	refused(a *attempt, d decision, err error) error
	// quiet makes a's release announce nothing: nobody held the lock,
	// so no waiter is to be woken (a failed attempt's cleanup).
	quiet(a *attempt)
	// extendArgs is the extend command of the held lock l.
	extendArgs(l *Lock) []any
	// waiting makes the way one Acquire (wait) or TryAcquire (!wait) call
	// tries and waits for the lock; it may refuse the request. A nil
	// strategy is the plain retrying wait (Client.retrying), which the
	// shared wait keeps on its own frame: no allocation for most kinds.
	waiting(ctx context.Context, c *Client, name string, lc lockConfig, nodeTimeout time.Duration, wait bool) (waitStrategy, error)
}

// kindSpec is what a kind runs on the nodes and how the core treats it.
type kindSpec struct {
	acquire, release, extend *script
	// raise is the fencing slow path's script: it writes the token on a
	// node that still holds the lock for us (see attempt.token).
	raise *script
	// replyLen is the length of the acquire script's answer: the status,
	// the fence register or the holder's PTTL, the node's TIME (two
	// integers), then, for a kind that takes one of several keys, which
	// one the node gave (the pick).
	replyLen int
	// shared: holders of this kind may hold the lock together and share a
	// token. On the slow path the token is the highest fence value the
	// winners returned, not one above it (see attempt.token).
	shared bool
	// nameKey: the lock is the name's own key (the mutex's), so an
	// Acquire of the name under it re-enters it (reentrant.go).
	nameKey bool
	// wakes is the wake-up rule of a release: whom of the waiters of the
	// lock in this client it wakes.
	wakes wakeRule
	// topicSuffix ends the waiters' topic of the lock (see waiters) after
	// its name, when the kind's releases are announced on a channel of
	// their own; it has a matching channel suffix (see routeTopic).
	topicSuffix string
	// releaseVotes: the release's answer is a vote (it may give the key
	// to a waiter), so the durable step waits for it as for an acquire.
	releaseVotes bool
	// bare: the release, when quiet (lockKind.quiet), only compares the
	// lock key with the owner value and deletes it, and the extend, where
	// it finds the key ours, only renews the key's TTL (its keys the lock
	// key and the fence register, its arguments the owner value and the
	// TTL first): a server's own compare-and-delete and compare-and-set
	// may run in their place (native.go), for a lock without metadata. A
	// kind whose release or extend does more leaves it false.
	bare bool
	// unvoted are the kind's other scripts whose answer is no vote (they
	// only remove what the kind wrote): no durable step waits for them.
	unvoted []*script
}

// wakeRule is whom a release wakes among the lock's waiters in this client.
type wakeRule uint8

const (
	wakeOne   wakeRule = iota // one waiter: the others would only compete and split the votes
	wakeEvery                 // every waiter: they may all hold the lock together
	wakeNone                  // none: the nodes hand the key on and tell its taker themselves
)

// voteTally decides an acquire round from the nodes' replies as they come.
type voteTally interface {
	// add counts r and tells whether the round is decided, and if so
	// whether it was won.
	add(r nodeReply) (decided, won bool)
	// winner is what a won round won: the pick, the nodes that gave it
	// and the highest fence register among them (DESIGN §2's set S).
	winner() (pick, winners int, maxFence int64)
}

// waitStrategy is how one Acquire or TryAcquire call of a kind tries for
// the lock and waits between tries. The shared wait (Client.waitFor) runs
// it, and does for every kind what a wait must do: give up on the
// caller's context or max wait, stop at an error no retry can cure, and
// tell the caller what it waits for (waitReport).
type waitStrategy interface {
	// try makes one attempt.
	try(ctx context.Context) (*Lock, attemptInfo, error)
	// pause waits until the next attempt is due after one that failed
	// with err. It returns early when ctx is done.
	pause(ctx context.Context, err error, info attemptInfo)
	// stop ends the call with its outcome: the lock, or the error the
	// caller gets (which the kind may replace). It cleans up what the
	// call left on the nodes and in the client.
	stop(ctx context.Context, l *Lock, err error) (*Lock, error)
}

// baseKind gives a kind the core's own answers, which most kinds keep:
// the majority tally, no extra step on a reply or a win, the error of the
// lost round as it is, a release whose channel is its last argument, and
// the plain retrying wait.
type baseKind struct{}

func (baseKind) tally(*attempt) voteTally                        { return nil }
func (baseKind) answered(*attempt, *node, nodeReply)             {}
func (baseKind) won(*attempt, decision)                          {}
func (baseKind) refused(_ *attempt, _ decision, err error) error { return err }
func (baseKind) quiet(a *attempt)                                { a.releaseArgs[len(a.releaseArgs)-1] = "" }
func (baseKind) waiting(context.Context, *Client, string, lockConfig, time.Duration, bool) (waitStrategy, error) {
	return nil, nil
}

// keyedExtendArgs is the extend command of a kind whose extend script
// takes the lock's keys (a.extKeys if set, else the key and the fence
// register), the owner value, the TTL, the token and the fence lifetime.
func keyedExtendArgs(l *Lock) []any {
	a := l.a
	keys := a.keys[:]
	if a.extKeys != nil {
		keys = a.extKeys
	}
	return a.spec.extend.args(keys, a.value, a.ttl.Milliseconds(), l.token, l.c.fenceLifetimeArg)
}

// topicOf is the waiters' topic of the lock called name of kind k.
func topicOf(k lockKind, name string) string { return name + k.spec().topicSuffix }

// Kinds register their specs when the package loads (registerKind):
// the scripts whose answer is no vote, for the durable step, and the
// routes between waiters' topics and release channels, for the wait.
var (
	unvotedScripts []*script
	topicRoutes    []topicRoute
	messageRoutes  []string // message prefixes a kind's scripts publish on a lock's channel
)

// topicRoute maps a kind's waiters' topics to its release channels:
// "<name><topic>" is announced on "<lock key of name><channel>".
type topicRoute struct{ topic, channel string }

// registerKind records what the durable step and the wait must know of a
// kind without asking for it: its release and other scripts that are no
// vote, and the release channel of its topic if it has one of its own.
func registerKind(s *kindSpec, channelSuffix string) {
	if s.release != nil && !s.releaseVotes {
		unvotedScripts = append(unvotedScripts, s.release)
	}
	unvotedScripts = append(unvotedScripts, s.unvoted...)
	if s.topicSuffix != "" {
		topicRoutes = append(topicRoutes, topicRoute{s.topicSuffix, channelSuffix})
	}
}

// registerMessage records that a kind's scripts publish messages starting
// with prefix on a lock's release channel, for the kind's own waiters
// (listeners) rather than as a release.
func registerMessage(prefix string) { messageRoutes = append(messageRoutes, prefix) }

// listener is a waiter of a kind that hears the kind's own messages on a
// lock's channel (registerMessage), per node.
type listener interface {
	// heard tells of a message from node, its prefix cut off.
	heard(node int, msg string)
	// listensTo tells whether it waits for the lock called name and hears
	// messages with prefix.
	listensTo(name, prefix string) bool
}

// listeners routes the kinds' own messages to this client's listeners.
type listeners struct {
	mu   sync.Mutex
	list []listener
}

func (ls *listeners) add(l listener) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.list = append(ls.list, l)
}

func (ls *listeners) remove(l listener) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for i, x := range ls.list {
		if x == l {
			ls.list = append(ls.list[:i], ls.list[i+1:]...)
			return
		}
	}
}

// deliver hands a message of node on the channel of the lock called name
// to the listeners it is for. It is false when the message is no kind's
// own (a release announcement).
func (ls *listeners) deliver(node int, name, payload string) bool {
	for _, prefix := range messageRoutes {
		msg, ok := strings.CutPrefix(payload, prefix)
		if !ok {
			continue
		}
		ls.mu.Lock()
		defer ls.mu.Unlock()
		for _, l := range ls.list {
			if l.listensTo(name, prefix) {
				l.heard(node, msg)
			}
		}
		return true
	}
	return false
}
