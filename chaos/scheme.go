package chaos

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/observe"
)

// Held is one acquisition, whatever scheme made it.
type Held interface {
	// Token is the fencing token the holder passes to the resource.
	Token() int64
	// Deadline is when the holder must stop acting (a monotonic reading).
	Deadline() time.Time
	// Release gives the lock back.
	Release(ctx context.Context) error
}

// Locker is one workload client's handle on a lock scheme: its own
// connections, its own clock.
type Locker interface {
	// Acquire blocks until the lock is held or ctx is done.
	Acquire(ctx context.Context) (Held, error)
	// Do runs fn while holding the lock, keeping it alive as long as fn
	// runs when the scheme can; fn's ctx ends when the lock is lost.
	Do(ctx context.Context, fn func(ctx context.Context, h Held) error) error
	Close() error
}

// SchemeEnv is what a scheme needs to build a client's locker.
type SchemeEnv struct {
	// Addrs are the node addresses as the clients see them: the proxies.
	Addrs []string
	// TTL of every acquisition.
	TTL time.Duration
	// ClockSkew puts the client's wall clock this far from real time
	// (constant for the client's life: monotonic readings stay intact).
	ClockSkew time.Duration
	// RestartGrace and ClockGuard set the node guards of the redlock
	// client (ignored by the baselines, which have none).
	RestartGrace time.Duration
	ClockGuard   bool
	// AllowFailoverNodes and DurableVotes set the redlock client's options
	// of those names.
	AllowFailoverNodes bool
	DurableVotes       bool
	// FsyncedVotes sets the redlock client's option of that name, with a
	// node timeout that leaves room for an everysec fsync (2s).
	FsyncedVotes bool
	// AllowEvictingNodes sets the redlock client's option of that name.
	AllowEvictingNodes bool
	// Note records what the library reports (a node sitting out, a lost
	// lock) into the history.
	Note func(detail string)
	Log  *slog.Logger
	// TLSConfig, if set, is the client configuration for the nodes (the
	// proxies pass TLS through untouched).
	TLSConfig *tls.Config
	// ClusterSeeds, when set, makes each node a Redis Cluster reached
	// through a ClusterClient over these seeds (Addrs is empty then).
	ClusterSeeds [][]string
}

// Scheme is a lock algorithm under test: the redlock library, or one of
// the naive schemes it replaces.
type Scheme interface {
	Name() string
	// NewLocker makes the locker of one workload client.
	NewLocker(env SchemeEnv) (Locker, error)
	// LockKey is the key the scheme keeps on a node while the lock is
	// held; the scans look for it, and for the keys a scheme keeps beside
	// it (ExtraKeys: a semaphore's other slots, a read-write lock's readers).
	LockKey() string
}

// LockName is the one lock every client contends for.
const LockName = "chaos"

// skewedClock is a client's wall clock, off by a constant.
type skewedClock struct{ skew time.Duration }

// Now keeps the monotonic reading of time.Now (Add preserves it), so only
// wall-clock uses (fencing proposals, timestamps) see the skew.
func (c skewedClock) Now() time.Time { return time.Now().Add(c.skew) }

// nodeClient is how every scheme connects to a node: through its proxy,
// with the context's deadline bounding every socket read and write (go-redis
// ignores ctx deadlines on the socket unless told to), and no retries of its
// own: retrying is the lock algorithm's business.
func nodeClient(addr string, tlsConfig *tls.Config) *redis.Client {
	return redis.NewClient(nodeOptions([]string{addr}, tlsConfig).Simple())
}

// nodeOptions are nodeClient's settings, for a client of addrs: the first
// of them for a plain node, the seeds of a Cluster lock node.
func nodeOptions(addrs []string, tlsConfig *tls.Config) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs:                 addrs,
		TLSConfig:             tlsConfig,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialTimeout:           500 * time.Millisecond,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
		PoolSize:              8,
	}
}

// RedlockScheme is the library under test, through its public API only.
type RedlockScheme struct{}

// Name is "redlock".
func (RedlockScheme) Name() string { return "redlock" }

// LockKey is the library's key for LockName with the default prefix.
func (RedlockScheme) LockKey() string { return redlock.DefaultKeyPrefix + "{" + LockName + "}" }

// ExtraKeys is the holder key, which keeps the metadata the workload
// attaches to every lock (holderMetadata) and must go with the lock.
func (s RedlockScheme) ExtraKeys() []string { return []string{s.LockKey() + ":holder"} }

// holderMetadata is attached to every acquisition, so that the scan for
// keys left behind (check e) covers the holder key as well.
const holderMetadata = "chaos workload"

// extraKeys is implemented by a scheme that keeps keys beside its lock key
// while the lock is held: the quiesce and the final scan (check e) look
// for them as well.
type extraKeys interface{ ExtraKeys() []string }

// scannedKeys are the keys of s that no node may keep once no client holds
// the lock.
func scannedKeys(s Scheme) []string {
	keys := []string{s.LockKey()}
	if e, ok := s.(extraKeys); ok {
		keys = append(keys, e.ExtraKeys()...)
	}
	return keys
}

// NewLocker builds a redlock.Client over the node proxies.
func (RedlockScheme) NewLocker(env SchemeEnv) (Locker, error) {
	c, clients, err := newRedlockClient(env)
	if err != nil {
		return nil, err
	}
	return &redlockLocker{c: c, clients: clients, ttl: env.TTL}, nil
}

// nodeTimeout is the node timeout the runs give the library's clients, 0
// for the library's default (the smaller of 200ms and TTL/10).
func nodeTimeout(ttl time.Duration, fsyncedVotes, tls bool) time.Duration {
	switch {
	case tls:
		// A TLS handshake with client certificates, under the race
		// detector on a loaded 2-core machine, outlasts the default node
		// timeout of TTL/10 (100ms for 1s): every node timed out for the
		// 6s of partition-minority-tls' warm-up once. A deployment over
		// TLS gives its calls room for a handshake too.
		return ttl / 4
	case fsyncedVotes:
		// A vote waits for the next everysec fsync, up to a second.
		return 2 * time.Second
	}
	return 0
}

// newRedlockClient builds a client of the library over the node proxies,
// reporting what it observes into the history.
func newRedlockClient(env SchemeEnv) (*redlock.Client, []redis.UniversalClient, error) {
	clients, err := env.nodeClients()
	if err != nil {
		return nil, nil, err
	}
	opts := redlock.Options{
		TTL:                env.TTL,
		RestartGrace:       env.RestartGrace,
		Clock:              skewedClock{env.ClockSkew},
		Logger:             env.Log,
		AllowFailoverNodes: env.AllowFailoverNodes,
		DurableVotes:       env.DurableVotes,
		FsyncedVotes:       env.FsyncedVotes,
		AllowEvictingNodes: env.AllowEvictingNodes,
	}
	opts.NodeTimeout = nodeTimeout(env.TTL, env.FsyncedVotes, env.TLSConfig != nil)
	if !env.ClockGuard {
		opts.ClockJumpThreshold = -1 // the clock-jump guard off
	}
	if env.Note != nil {
		// Attempts fail by the thousand under a fault: note the first of
		// each run of failures of one kind.
		var lastFailure string
		opts.Observer = observe.Func(func(e observe.Event) {
			switch e.Kind {
			case observe.AcquireFailed:
				if kind := failureKind(e.Err); kind != lastFailure {
					lastFailure = kind
					env.Note("library: attempts failing (" + kind + "), first: " + errString(e.Err))
				}
			case observe.Lost, observe.NodeSitOut, observe.NodeRestarted, observe.Extended, observe.ExtendFailed:
				d := "library: " + e.Kind.String()
				if e.Node != "" {
					d += " " + e.Node
				}
				if e.Err != nil {
					d += ": " + e.Err.Error()
				}
				env.Note(d)
			}
		})
	}
	opts.AllowNoFaultTolerance = len(clients) < 3 // a schedule on 1 or 2 nodes means it
	c, err := redlock.New(clients, opts)
	if err != nil {
		closeClients(clients)
		return nil, nil, err
	}
	return c, clients, nil
}

// failureKind sorts an attempt's error into the library's error kinds.
func failureKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{redlock.ErrLocked, "locked"}, {redlock.ErrNotIndependent, "not independent"},
		{redlock.ErrValidityTooShort, "validity too short"}, {redlock.ErrEvictingNode, "evicting node"},
		{redlock.ErrNoQuorum, "no quorum"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "other"
}

func closeClients(cs []redis.UniversalClient) {
	for _, c := range cs {
		_ = c.Close()
	}
}

type redlockLocker struct {
	c       *redlock.Client
	clients []redis.UniversalClient
	ttl     time.Duration
}

func (l *redlockLocker) Acquire(ctx context.Context) (Held, error) {
	lk, err := l.c.Acquire(ctx, LockName, redlock.WithTTL(l.ttl), redlock.WithMetadata(holderMetadata))
	if err != nil {
		return nil, err
	}
	return lk, nil
}

func (l *redlockLocker) Do(ctx context.Context, fn func(ctx context.Context, h Held) error) error {
	return l.c.Do(ctx, LockName, func(ctx context.Context, lk *redlock.Lock) error {
		return fn(ctx, lk)
	}, redlock.WithTTL(l.ttl), redlock.WithMetadata(holderMetadata))
}

// Close waits for the library's background cleanups, then closes the
// connections it was given.
func (l *redlockLocker) Close() error {
	err := l.c.Close()
	closeClients(l.clients)
	return err
}

// errNoDo is returned by schemes that cannot keep a lock alive.
func errNoDo(scheme string) error {
	return fmt.Errorf("chaos: the %s scheme has no auto-extension; use the acquire workload", scheme)
}
