package bench

import (
	"context"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// redislockContender is bsm/redislock on a single node: the single-instance
// lock a user would pick when one Redis is enough.
type redislockContender struct {
	client *redislock.Client
}

// redislockTTL matches this library's default TTL; redislock has no default.
const redislockTTL = 10 * time.Second

// redislockWait is the blocking wait for the contended workload. redislock
// does not retry unless asked; this is the linear backoff its own examples
// use.
var redislockWait = &redislock.Options{RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond)}

func newRedislockContender(node redis.UniversalClient) *redislockContender {
	return &redislockContender{client: redislock.New(node)}
}

func (r *redislockContender) Name() string { return ContenderRedislock }

func (r *redislockContender) TryAcquire(ctx context.Context, name string) (Held, error) {
	lock, err := r.client.Obtain(ctx, name, redislockTTL, nil)
	if err != nil {
		return nil, err
	}
	return lock, nil
}

func (r *redislockContender) Acquire(ctx context.Context, name string) (Held, error) {
	lock, err := r.client.Obtain(ctx, name, redislockTTL, redislockWait)
	if err != nil {
		return nil, err
	}
	return lock, nil
}
