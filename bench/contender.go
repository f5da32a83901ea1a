package bench

import (
	"context"
	"errors"
)

// Contender is one lock implementation under test. Every contender of a
// cluster shares the same go-redis clients, so the libraries differ only in
// what they send and how they wait, never in connection handling.
type Contender interface {
	// Name identifies the contender in tables and JSON, e.g. "redsync".
	Name() string
	// TryAcquire makes exactly one attempt to take the lock called name.
	TryAcquire(ctx context.Context, name string) (Held, error)
}

// Waiter is a Contender with a blocking acquire of its own: the library's
// wait (pub/sub wake-up, retry loop) with its default settings. The
// contended workload runs only contenders that implement it.
type Waiter interface {
	Contender
	// Acquire blocks until the lock called name is taken or ctx is done.
	Acquire(ctx context.Context, name string) (Held, error)
}

// PerWorker is a Waiter whose lock client holds state of its own (this
// library's release subscription and wake-up queue), so that sixteen
// processes differ from sixteen goroutines sharing one client. ForWorker
// gives worker i its own client; contenders without such state share one.
type PerWorker interface {
	Waiter
	ForWorker(i int) (Waiter, error)
}

// IdleMaker is a contender that can put other clients of its library beside
// itself, with its key prefix, each having waited once for a lock and now
// idle: what a waiting client leaves behind (subscriptions) must not slow
// the others. The idle-subscribers workloads run only contenders that
// implement it.
type IdleMaker interface {
	Contender
	// StartIdle makes n such clients, with connections of their own as
	// separate processes would have; lock names the lock they wait for.
	// stop closes them.
	StartIdle(ctx context.Context, n int, lock string) (stop func() error, err error)
}

// Held is a lock a Contender took. Every implementation is a pointer type, so
// handing it back through this interface costs no allocation of its own.
type Held interface {
	Release(ctx context.Context) error
}

// Names of the contenders, as Config.Contenders and the tables spell them.
const (
	ContenderRedlock         = "redlock"          // this library, fencing tokens on
	ContenderRedlockNoFence  = "redlock-nofence"  // this library, Options.DisableFencing
	ContenderRedlockFair     = "redlock-fair"     // this library's fair lock (WithFairness)
	ContenderRedsync         = "redsync"          // go-redsync/redsync/v4, default options
	ContenderRedsyncFailFast = "redsync-failfast" // redsync with WithFailFast(true)
	ContenderRedislock       = "redislock"        // bsm/redislock, one node only
	ContenderFloor           = "floor"            // SET NX + owner-checked DEL per node, majority, nothing else
	// ContenderRueidislock is redis/rueidis/rueidislock: all its keys on
	// node 0, as many as there are nodes (see rueidislockContender).
	ContenderRueidislock = "rueidislock"
)

// AllContenders lists every contender in the order tables show them.
var AllContenders = []string{
	ContenderRedlock, ContenderRedlockNoFence, ContenderRedlockRWRead, ContenderRedlockRWWrite, ContenderRedlockFair, ContenderRedsync,
	ContenderRedsyncFailFast, ContenderRedislock, ContenderRueidislock, ContenderFloor,
	ContenderRedlockSemaphore,
}

// errNotReleased reports a release that found the lock gone or taken over:
// in a benchmark that means a lock expired under us or the library has a bug,
// so it is counted, never ignored.
var errNotReleased = errors.New("lock was not released: not held any more")
