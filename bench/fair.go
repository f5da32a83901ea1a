package bench

import (
	"context"

	"github.com/quorumlabs/redlock"
	"github.com/redis/go-redis/v9"
)

// fairContender is this library's fair lock (redlock.WithFairness): waiters
// queue by ticket and the release hands the lock to the queue's head. It is
// a redlockContender under a key prefix of its own whose every acquire asks
// for fairness, so the contended rows compare the two hand-offs in one run.
// It does not embed the mutex contender: the idle-subscribers workloads,
// which wait with the mutex, must not run under its name.
type fairContender struct{ r *redlockContender }

func (f *fairContender) Name() string { return f.r.Name() }

// Close closes the clients.
func (f *fairContender) Close() error { return f.r.Close() }

func newFairContender(ctx context.Context, nodes []redis.UniversalClient) (*fairContender, error) {
	c, err := newRedlockContender(ctx, ContenderRedlockFair, nodes, true)
	if err != nil {
		return nil, err
	}
	return &fairContender{c}, nil
}

func (f *fairContender) TryAcquire(ctx context.Context, name string) (Held, error) {
	lock, err := f.r.client.TryAcquire(ctx, name, redlock.WithFairness())
	if err != nil {
		return nil, err
	}
	return lock, nil
}

func (f *fairContender) Acquire(ctx context.Context, name string) (Held, error) {
	lock, err := f.r.waitClient.Acquire(ctx, name, redlock.WithFairness())
	if err != nil {
		return nil, err
	}
	return lock, nil
}

// ForWorker gives worker i a client of its own, as redlockContender does,
// still asking for fairness.
func (f *fairContender) ForWorker(i int) (Waiter, error) {
	w, err := f.r.ForWorker(i)
	if err != nil {
		return nil, err
	}
	return &fairContender{w.(*redlockContender)}, nil
}
