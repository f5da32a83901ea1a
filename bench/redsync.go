package bench

import (
	"context"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// redsyncContender is go-redsync/redsync/v4 with its default options, plus
// WithFailFast(true) for the fail-fast variant.
type redsyncContender struct {
	name    string
	sync    *redsync.Redsync
	options []redsync.Option
}

func newRedsyncContender(name string, nodes []redis.UniversalClient, failFast bool) *redsyncContender {
	pools := make([]redsyncredis.Pool, len(nodes))
	for i, node := range nodes {
		pools[i] = goredis.NewPool(node)
	}
	c := &redsyncContender{name: name, sync: redsync.New(pools...)}
	if failFast {
		c.options = []redsync.Option{redsync.WithFailFast(true)}
	}
	return c
}

func (r *redsyncContender) Name() string { return r.name }

// TryAcquire uses TryLockContext: one attempt, as redsync documents it.
func (r *redsyncContender) TryAcquire(ctx context.Context, name string) (Held, error) {
	mutex := r.sync.NewMutex(name, r.options...)
	if err := mutex.TryLockContext(ctx); err != nil {
		return nil, err
	}
	return (*redsyncHeld)(mutex), nil
}

// Acquire uses LockContext with redsync's default wait: 32 tries, 50-250ms
// apart.
func (r *redsyncContender) Acquire(ctx context.Context, name string) (Held, error) {
	mutex := r.sync.NewMutex(name, r.options...)
	if err := mutex.LockContext(ctx); err != nil {
		return nil, err
	}
	return (*redsyncHeld)(mutex), nil
}

// redsyncHeld gives a redsync mutex the Held method set without wrapping it
// in a new allocation.
type redsyncHeld redsync.Mutex

func (h *redsyncHeld) Release(ctx context.Context) error {
	released, err := (*redsync.Mutex)(h).UnlockContext(ctx)
	if err != nil {
		return err
	}
	if !released {
		return errNotReleased
	}
	return nil
}
