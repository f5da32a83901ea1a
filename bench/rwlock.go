package bench

import (
	"context"

	"github.com/quorumlabs/redlock"
	"github.com/redis/go-redis/v9"
)

// Names of this library's read-write lock contenders: one TryRLock +
// Release cycle, or one TryLock + Release cycle, per operation. They run
// only in the uncontended workloads, beside the mutex's rows of the same
// run: what the read and write sides cost against the mutex.
const (
	ContenderRedlockRWRead  = "redlock-rw-read"
	ContenderRedlockRWWrite = "redlock-rw-write"
)

// rwContender takes the read or the write side of a read-write lock per
// name, on a client with this library's defaults (see newRedlockContender)
// and a key prefix of its own.
type rwContender struct {
	*redlockContender
	write bool
}

func newRWContender(ctx context.Context, name string, nodes []redis.UniversalClient) (*rwContender, error) {
	c, err := newRedlockContender(ctx, name, nodes, true)
	if err != nil {
		return nil, err
	}
	return &rwContender{redlockContender: c, write: name == ContenderRedlockRWWrite}, nil
}

func (r *rwContender) TryAcquire(ctx context.Context, name string) (Held, error) {
	var lock *redlock.Lock
	var err error
	if r.write {
		lock, err = r.client.RWLock(name).TryLock(ctx)
	} else {
		lock, err = r.client.RWLock(name).TryRLock(ctx)
	}
	if err != nil {
		return nil, err
	}
	return lock, nil
}

// isRW tells whether the named contender is a read-write lock side.
func isRW(contender string) bool {
	return contender == ContenderRedlockRWRead || contender == ContenderRedlockRWWrite
}
