package chaos

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// The baselines are the lock schemes users wrote before Redlock, run
// through the same workload and checker. Each talks to one master (node 0,
// through its proxy) and takes its fencing token from an INCR on that
// master, as a careful user of a single Redis would. They are written to
// be faithful to their recipes, flaws included: the flaws are the point.

const (
	baselineLockKey  = "baseline:{lock}"
	baselineFenceKey = "baseline:{lock}:fence"
)

// baselineLocker holds what all baselines share: one connection to the
// master, a skewable wall clock and the acquisition retry loop.
type baselineLocker struct {
	name  string
	rdb   *redis.Client
	clock skewedClock
	ttl   time.Duration
	// try makes one attempt: the held lock, or nil if someone else has it.
	try func(ctx context.Context, b *baselineLocker) (*baselineHeld, error)
}

// newBaselineLocker is the baseline name, connected to node 0, whose
// attempts are try.
func newBaselineLocker(name string, env SchemeEnv, try func(ctx context.Context, b *baselineLocker) (*baselineHeld, error)) (Locker, error) {
	if len(env.Addrs) == 0 {
		return nil, fmt.Errorf("chaos: %s needs a node address", name)
	}
	return &baselineLocker{name: name, rdb: nodeClient(env.Addrs[0], env.TLSConfig), clock: skewedClock{env.ClockSkew}, ttl: env.TTL, try: try}, nil
}

// Acquire retries with a small jittered delay until it wins or ctx ends.
func (b *baselineLocker) Acquire(ctx context.Context) (Held, error) {
	for {
		callCtx, cancel := context.WithTimeout(ctx, b.ttl/4)
		h, err := b.try(callCtx, b)
		cancel()
		if h != nil {
			return h, nil
		}
		delay := 5*time.Millisecond + rand.N(20*time.Millisecond)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("chaos: %s: gave up: %w (last attempt: %v)", b.name, ctx.Err(), err)
		case <-time.After(delay):
		}
	}
}

func (b *baselineLocker) Do(context.Context, func(context.Context, Held) error) error {
	return errNoDo(b.name)
}

func (b *baselineLocker) Close() error { return b.rdb.Close() }

// held is the lock an attempt that started at start won, given up by
// release, with the next token from the master's counter. If that fails
// the lock is dropped (by release) and the attempt lost.
func (b *baselineLocker) held(ctx context.Context, start time.Time, release func(ctx context.Context) error) (*baselineHeld, error) {
	t, err := b.rdb.Incr(ctx, baselineFenceKey).Result()
	if err != nil {
		_ = release(context.WithoutCancel(ctx))
		return nil, err
	}
	return &baselineHeld{token: t, deadline: start.Add(b.ttl), release: release}, nil
}

type baselineHeld struct {
	token    int64
	deadline time.Time
	release  func(ctx context.Context) error
}

func (h *baselineHeld) Token() int64                      { return h.token }
func (h *baselineHeld) Deadline() time.Time               { return h.deadline }
func (h *baselineHeld) Release(ctx context.Context) error { return h.release(ctx) }

// GetSetScheme is the timestamp lock of the old SETNX documentation: the
// value is the expiry time by the client's clock; a client that finds an
// expired timestamp takes the lock over with GETSET; release deletes the
// key if the holder's own timestamp has not passed. It trusts every
// client's wall clock.
type GetSetScheme struct{}

// Name is "setnx-getset".
func (GetSetScheme) Name() string { return "setnx-getset" }

// LockKey is the baselines' lock key.
func (GetSetScheme) LockKey() string { return baselineLockKey }

// NewLocker connects to node 0.
func (GetSetScheme) NewLocker(env SchemeEnv) (Locker, error) {
	return newBaselineLocker(GetSetScheme{}.Name(), env, getSetTry)
}

func getSetTry(ctx context.Context, b *baselineLocker) (*baselineHeld, error) {
	start := time.Now()
	now := b.clock.Now()
	expires := now.Add(b.ttl + time.Millisecond).UnixMilli()
	won, err := b.rdb.SetNX(ctx, baselineLockKey, expires, 0).Result()
	if err != nil {
		return nil, err
	}
	if !won {
		cur, err := b.rdb.Get(ctx, baselineLockKey).Int64()
		if errors.Is(err, redis.Nil) {
			return nil, nil // released meanwhile: try SETNX again
		}
		if err != nil || cur >= now.UnixMilli() {
			return nil, err // held and not expired by our clock
		}
		old, err := b.rdb.GetSet(ctx, baselineLockKey, expires).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		if old >= now.UnixMilli() {
			return nil, nil // another client took it over first
		}
	}
	return b.held(ctx, start, func(ctx context.Context) error {
		if b.clock.Now().UnixMilli() >= expires {
			return nil // the recipe: past our timestamp the lock may be someone else's
		}
		return b.rdb.Del(ctx, baselineLockKey).Err()
	})
}

// SetNXDelScheme takes the lock with SET NX PX and releases it with a
// plain DEL, without checking that the key is still its own: a holder that
// overran its TTL deletes the next holder's lock.
type SetNXDelScheme struct{}

// Name is "setnx-del".
func (SetNXDelScheme) Name() string { return "setnx-del" }

// LockKey is the baselines' lock key.
func (SetNXDelScheme) LockKey() string { return baselineLockKey }

// NewLocker connects to node 0.
func (SetNXDelScheme) NewLocker(env SchemeEnv) (Locker, error) {
	return newBaselineLocker(SetNXDelScheme{}.Name(), env, func(ctx context.Context, b *baselineLocker) (*baselineHeld, error) {
		return setNXTry(ctx, b, "1", func(ctx context.Context) error { return b.rdb.Del(ctx, baselineLockKey).Err() })
	})
}

// setNXTry is one attempt of the SET NX PX recipes: the key gets value, and
// release gives the lock up.
func setNXTry(ctx context.Context, b *baselineLocker, value string, release func(ctx context.Context) error) (*baselineHeld, error) {
	start := time.Now()
	won, err := b.rdb.SetNX(ctx, baselineLockKey, value, b.ttl).Result()
	if err != nil || !won {
		return nil, err
	}
	return b.held(ctx, start, release)
}

// compareAndDelete releases a single-instance lock only if it still holds
// the caller's value.
var compareAndDelete = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// FailoverScheme is the correct single-instance lock (SET NX PX with a
// random value, compare-and-delete release) on a master that has an
// asynchronous replica. Alone it is sound; the Failover fault promotes the
// replica after the master dies, and writes the replica had not received
// (the lock key, the token counter) are gone.
type FailoverScheme struct{}

// Name is "single-master-failover".
func (FailoverScheme) Name() string { return "single-master-failover" }

// LockKey is the baselines' lock key.
func (FailoverScheme) LockKey() string { return baselineLockKey }

// NewLocker connects to node 0's proxy, which the Failover fault points
// at the promoted replica.
func (FailoverScheme) NewLocker(env SchemeEnv) (Locker, error) {
	return newBaselineLocker(FailoverScheme{}.Name(), env, func(ctx context.Context, b *baselineLocker) (*baselineHeld, error) {
		value := crand.Text()
		return setNXTry(ctx, b, value, func(ctx context.Context) error {
			return compareAndDelete.Run(ctx, b.rdb, []string{baselineLockKey}, value).Err()
		})
	})
}
