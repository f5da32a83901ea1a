package redlock

import "time"

// The mutex: one key per name, held by one owner on a quorum of nodes
// (DESIGN §1), with a fencing token from the register beside it (§2). It
// is the lock the core's defaults describe: the majority tally, a release
// that wakes one waiter, and the plain retrying wait.

// mutex is the mutex's kind.
type mutex struct{ baseKind }

var mutexSpec = kindSpec{
	acquire: acquireScript, release: releaseScript, extend: extendScript, raise: raiseScript,
	replyLen: 4, nameKey: true, wakes: wakeOne, bare: true,
}

func init() { registerKind(&mutexSpec, "") }

// mutexKind is the kind of every plain Acquire, TryAcquire and Do.
var mutexKind lockKind = mutex{}

func (mutex) spec() *kindSpec { return &mutexSpec }

func (mutex) attempt(c *Client, name string, ttl time.Duration) *attempt {
	return c.newAttempt(mutexKind, name, ttl)
}

// extendArgs keeps the holder metadata of a lock taken WithMetadata alive
// with the key (extend.lua's third key and last argument).
func (mutex) extendArgs(l *Lock) []any {
	a := l.a
	if holderKey, md, ok := a.holder(); ok {
		return a.spec.extend.args([]string{a.keys[0], a.keys[1], holderKey}, a.value, a.ttl.Milliseconds(), l.token, l.c.fenceLifetimeArg, md)
	}
	return keyedExtendArgs(l)
}
