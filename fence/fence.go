// Package fence is the resource side of fencing: it admits an operation
// only with a fencing token at least as high as every token admitted
// before. A lock's token (redlock's Lock.Token) protects nothing unless
// the resource it guards checks it; this package is that check, for a
// resource in one process (Guard) and for a value held in Redis (Set and
// Get). docs/FENCING.md has an SQL pattern for a database.
//
// The package does not depend on the lock client: the resource side may
// be another program, and the Redis it writes to is the resource's, not
// one of the lock's nodes.
package fence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ErrStaleToken is matched (errors.Is) by every *StaleTokenError: a
// resource refused a token lower than one it accepted before. The caller
// no longer holds the lock the token came from and must not retry with it.
var ErrStaleToken = errors.New("fence: stale fencing token")

// StaleTokenError reports a fencing token below the highest one accepted.
type StaleTokenError struct {
	Token   int64 // the token offered
	Highest int64 // the highest token accepted before
}

// Error says which token was refused and which is the highest accepted.
func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fence: stale fencing token %d (a holder with token %d came after it)", e.Token, e.Highest)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// Guard is the resource side of fencing, in process: it admits an
// operation only with a token at least as high as every token admitted
// before. Put one in front of each resource the lock guards. The zero
// value is ready; a Guard is safe for concurrent use.
//
// A Guard protects only what goes through it. When the resource is shared
// by several processes, the check must live in the resource itself: see
// Set for a Redis value, and docs/FENCING.md for an SQL pattern.
type Guard struct {
	mu      sync.Mutex
	highest int64
}

// Admit records token and returns nil if it is not below the highest
// token admitted so far; otherwise it returns a *StaleTokenError (matching
// ErrStaleToken), records nothing, and the caller must not touch the
// resource.
func (g *Guard) Admit(token int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if token < g.highest {
		return &StaleTokenError{Token: token, Highest: g.highest}
	}
	g.highest = token
	return nil
}

// Highest is the highest token admitted so far, 0 before the first.
func (g *Guard) Highest() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.highest
}

//go:embed set.lua
var setSrc string

// setScript runs on the resource's server, which need not be a lock node:
// go-redis sends it by its SHA and falls back to EVAL (which caches it
// there) on NOSCRIPT, so it is loaded only where it runs.
var setScript = redis.NewScript(setSrc)

// Set writes value to a Redis-held resource only if token is at least the
// highest token that wrote it before, in one atomic script. The resource
// is a hash at key with fields "value" and "fence". A stale token gets a
// *StaleTokenError (matching ErrStaleToken) and changes nothing. An empty
// key or a negative token is refused before anything is sent; a Redis
// error (a connection failure, a key of another type) is returned as is,
// and then the write may or may not have happened.
func Set(ctx context.Context, rdb redis.Scripter, key string, token int64, value string) error {
	if key == "" {
		return errors.New("fence: resource key must not be empty")
	}
	if token < 0 {
		return fmt.Errorf("fence: token %d must not be negative", token)
	}
	vals, err := setScript.Run(ctx, rdb, []string{key}, token, value).Int64Slice()
	if err != nil {
		return err
	}
	if len(vals) != 2 {
		return fmt.Errorf("fence: unexpected script reply %v", vals)
	}
	if vals[0] == 0 {
		return &StaleTokenError{Token: token, Highest: vals[1]}
	}
	return nil
}

// Get reads a resource written by Set: its value and the token of the
// last write. An absent resource gives "", 0 and no error. A Redis error is
// returned as is, and a hash whose fence field is not a number is an error
// naming the key.
func Get(ctx context.Context, rdb redis.Cmdable, key string) (value string, token int64, err error) {
	vals, err := rdb.HMGet(ctx, key, "value", "fence").Result()
	if err != nil {
		return "", 0, err
	}
	if len(vals) != 2 || vals[0] == nil {
		return "", 0, nil
	}
	value, _ = vals[0].(string)
	fence, _ := vals[1].(string)
	if token, err = strconv.ParseInt(fence, 10, 64); err != nil {
		return "", 0, errors.New("fence: resource " + key + " has a malformed fence field")
	}
	return value, token, nil
}
