package bench

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// rueidislockContender is github.com/redis/rueidis/rueidislock, an
// auto-pipelining lock on rueidis. It cannot span independent masters: one
// Locker has one rueidis client, and a lock is KeyMajority of
// 2*KeyMajority-1 keys ("prefix:i:name") that the client routes like any
// other key, so on one standalone Redis all of them land on that one server.
// The bench therefore runs it on node 0 only, with as many keys as the
// cluster has nodes (KeyMajority = n/2+1, so 5 keys and a majority of 3 on
// 5 nodes): the same number of SETs and majority as a Redlock over n
// masters, but on one server, which is cheaper than n and survives none of
// its failures. It also brings its own connection (rueidis, not go-redis),
// so unlike the other contenders it does not share the cluster's clients.
type rueidislockContender struct {
	locker rueidislock.Locker
}

// rueidislockHeld is a lock it took: rueidislock hands back a context that
// stays live while the lock is held and a cancel func that releases it.
type rueidislockHeld struct {
	ctx    context.Context
	cancel context.CancelFunc
	// parent is the context the lock was taken under: rueidislock ends the
	// lock when it ends, which at a run's deadline is no loss.
	parent context.Context
}

func newRueidislockContender(nodes []redis.UniversalClient) (*rueidislockContender, error) {
	client, ok := nodes[0].(*redis.Client)
	if !ok {
		return nil, fmt.Errorf("%s: node 0 is a %T, not a *redis.Client with an address", ContenderRueidislock, nodes[0])
	}
	locker, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{client.Options().Addr}},
		KeyPrefix:    ContenderRueidislock,
		KeyMajority:  int32(len(nodes)/2 + 1),
		// The bench's servers are redis 7.0.15 or later (NOLOOP needs
		// 7.0.5): a client is then not told of its own writes, as its
		// README recommends.
		NoLoopTracking: true,
		KeyValidity:    floorTTL,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ContenderRueidislock, err)
	}
	return &rueidislockContender{locker: locker}, nil
}

func (r *rueidislockContender) Name() string { return ContenderRueidislock }

// TryAcquire is TryWithContext: one attempt, no wait.
func (r *rueidislockContender) TryAcquire(ctx context.Context, name string) (Held, error) {
	lockCtx, cancel, err := r.locker.TryWithContext(ctx, name)
	if err != nil {
		return nil, err
	}
	return &rueidislockHeld{ctx: lockCtx, cancel: cancel, parent: ctx}, nil
}

// Acquire is WithContext, whose wait is woken by client-side-caching
// invalidations of the lock's keys.
func (r *rueidislockContender) Acquire(ctx context.Context, name string) (Held, error) {
	lockCtx, cancel, err := r.locker.WithContext(ctx, name)
	if err != nil {
		return nil, err
	}
	return &rueidislockHeld{ctx: lockCtx, cancel: cancel, parent: ctx}, nil
}

// Release cancels the lock's context; rueidislock's cancel returns once
// every key's DEL is done. Its context already done, while the one it was
// taken under is not, means the lock was lost while held (rueidislock
// cancels it then), which is counted.
func (h *rueidislockHeld) Release(context.Context) error {
	lost := h.ctx.Err() != nil && h.parent.Err() == nil
	h.cancel()
	if lost {
		return errNotReleased
	}
	return nil
}

func (r *rueidislockContender) Close() error {
	r.locker.Close()
	return nil
}
