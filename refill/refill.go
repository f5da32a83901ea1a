// Package refill guards a Redis cache against stampedes: when a value is
// missing, one caller across the fleet recomputes it under a redlock lock
// while the others wait for that lock's release and then read the cache.
//
// It is the SETNX recipe made safe to wait on: the lock is a redlock lock
// (a quorum of independent masters, auto-extended while the loader runs),
// waiters are woken by its release instead of polling, the wait is bounded,
// and what a caller does when the bound passes is the caller's choice.
//
// The waiters go through the lock one at a time: each, once woken, reads
// the cache while holding the lock and hands it on at once when the value
// is there. That costs every waiter a few round trips after the refill, but
// it makes the successor of a loader that failed or crashed exactly one
// caller, never a second stampede.
package refill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
)

// Fallback is what a caller does when it waited Options.MaxWait for
// another caller's refill and the value is still not in the cache.
type Fallback int

const (
	// FallbackError returns an error matching ErrWaitTimeout.
	FallbackError Fallback = iota
	// FallbackLoad runs the loader without the lock and returns its value,
	// which it also writes to the cache unless a value arrived meanwhile
	// (SET NX). Callers that fall back together all run the loader: choose
	// it when a slow answer costs more than the extra load.
	FallbackLoad
)

// ErrWaitTimeout: the caller waited Options.MaxWait for another caller's
// refill, in vain, and Options.Fallback is FallbackError.
var ErrWaitTimeout = errors.New("refill: gave up waiting for another caller's refill")

// DefaultLockPrefix prefixes the name of a cache key's refill lock.
const DefaultLockPrefix = "refill:"

// DefaultMaxWait is Options.MaxWait's default.
const DefaultMaxWait = 5 * time.Second

// Options configure a Guard.
type Options struct {
	// ValueTTL is how long a refilled value lives in the cache. Required.
	ValueTTL time.Duration
	// MaxWait bounds how long a caller waits for the refill lock. Default
	// DefaultMaxWait. A holder that crashed keeps the lock until its TTL
	// (LockTTL) passes: with MaxWait above it, a waiter takes over and
	// loads; below it, the waiters fall back.
	MaxWait time.Duration
	// Fallback is what a caller does when MaxWait passed. Default
	// FallbackError.
	Fallback Fallback
	// LockTTL is the refill lock's TTL; the lock is extended while the
	// loader runs. Default: the lock client's TTL.
	LockTTL time.Duration
	// LockPrefix prefixes a cache key to name its refill lock. Default
	// DefaultLockPrefix.
	LockPrefix string
}

// Loader computes the value of a cache key. Its context is cancelled if the
// refill lock is lost (the caller's own cancellation also reaches it).
type Loader func(ctx context.Context) (string, error)

// Guard reads a cache and refills missing values, one caller at a time
// across every process that uses the same lock nodes. It is safe for
// concurrent use.
type Guard struct {
	locks *redlock.Client
	cache redis.UniversalClient
	opts  Options
}

// New builds a Guard over a lock client and the cache. The caller keeps
// ownership of both.
func New(locks *redlock.Client, cache redis.UniversalClient, opts Options) (*Guard, error) {
	switch {
	case locks == nil:
		return nil, &redlock.ConfigError{Field: "lock client", Value: "nil", Reason: "is needed"}
	case cache == nil:
		return nil, &redlock.ConfigError{Field: "cache client", Value: "nil", Reason: "is needed"}
	case opts.ValueTTL <= 0:
		return nil, &redlock.ConfigError{Field: "ValueTTL", Value: opts.ValueTTL.String(), Reason: "must be positive"}
	case opts.MaxWait < 0:
		return nil, &redlock.ConfigError{Field: "MaxWait", Value: opts.MaxWait.String(), Reason: "must not be negative"}
	case opts.LockTTL < 0:
		return nil, &redlock.ConfigError{Field: "LockTTL", Value: opts.LockTTL.String(), Reason: "must not be negative"}
	case opts.Fallback != FallbackError && opts.Fallback != FallbackLoad:
		return nil, &redlock.ConfigError{Field: "Fallback", Value: fmt.Sprint(int(opts.Fallback)), Reason: "must be FallbackError or FallbackLoad"}
	}
	if opts.MaxWait == 0 {
		opts.MaxWait = DefaultMaxWait
	}
	if opts.LockPrefix == "" {
		opts.LockPrefix = DefaultLockPrefix
	}
	return &Guard{locks: locks, cache: cache, opts: opts}, nil
}

// LockName is the name of key's refill lock.
func (g *Guard) LockName(key string) string { return g.opts.LockPrefix + key }

// Get returns key's value from the cache. On a miss it takes key's refill
// lock, waiting up to MaxWait; holding it, it reads the cache again (the
// previous holder may have filled it) and, on a second miss, runs load and
// writes its value for ValueTTL. A loader error is returned to this caller
// only; the next waiter then tries the loader in its turn.
//
// When the wait passes it falls back as Options.Fallback says. An empty key
// is a *redlock.ConfigError; a cache that fails is returned as such, with
// no fallback.
func (g *Guard) Get(ctx context.Context, key string, load Loader) (string, error) {
	if key == "" {
		return "", &redlock.ConfigError{Field: "cache key", Value: `""`, Reason: "must not be empty"}
	}
	if load == nil {
		return "", &redlock.ConfigError{Field: "loader", Value: "nil", Reason: "is needed"}
	}
	if v, hit, err := g.read(ctx, key); hit || err != nil {
		return v, err
	}
	opts := []redlock.LockOption{redlock.WithMaxWait(g.opts.MaxWait)}
	if g.opts.LockTTL > 0 {
		opts = append(opts, redlock.WithTTL(g.opts.LockTTL))
	}
	var (
		value string
		held  bool // the lock was taken: any error is the refill's, not the wait's
	)
	err := g.locks.Do(ctx, g.LockName(key), func(ctx context.Context, _ *redlock.Lock) error {
		held = true
		v, hit, err := g.read(ctx, key)
		if hit || err != nil {
			value = v
			return err
		}
		if value, err = load(ctx); err != nil {
			return fmt.Errorf("refill: load %q: %w", key, err)
		}
		if err := g.cache.Set(ctx, key, value, g.opts.ValueTTL).Err(); err != nil {
			return fmt.Errorf("refill: write %q to the cache: %w", key, err)
		}
		return nil
	}, opts...)
	switch {
	case err == nil:
		return value, nil
	case held || ctx.Err() != nil || errors.Is(err, redlock.ErrInvalidConfig):
		return "", err
	}
	// The wait passed without the lock: the holder is slow or crashed, or
	// too few lock nodes answered. The cache may have been filled meanwhile.
	if v, hit, rerr := g.read(ctx, key); hit || rerr != nil {
		return v, rerr
	}
	if g.opts.Fallback == FallbackError {
		return "", fmt.Errorf("%w %q after %v: %w", ErrWaitTimeout, key, g.opts.MaxWait, err)
	}
	v, lerr := load(ctx)
	if lerr != nil {
		return "", fmt.Errorf("refill: load %q without the lock (fallback): %w", key, lerr)
	}
	// NX: a holder's refill, or another fallback's, wins; ours is as fresh.
	if err := g.cache.SetNX(ctx, key, v, g.opts.ValueTTL).Err(); err != nil {
		return "", fmt.Errorf("refill: write %q to the cache: %w", key, err)
	}
	return v, nil
}

// read looks key up in the cache.
func (g *Guard) read(ctx context.Context, key string) (value string, hit bool, err error) {
	v, err := g.cache.Get(ctx, key).Result()
	switch {
	case err == nil:
		return v, true, nil
	case errors.Is(err, redis.Nil):
		return "", false, nil
	}
	return "", false, fmt.Errorf("refill: read %q from the cache: %w", key, err)
}
