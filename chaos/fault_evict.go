package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Evict turns nodes into the shared cache-and-locks Redis many teams run:
// at run time it sets maxmemory and an eviction policy (CONFIG SET, as an
// operator or a managed service's default would), then an application's
// cache fills each node (SET with EX, 4 KiB values, sent straight to the
// server, not through the clients' proxy) until the lock's key is
// evicted. Every lock key carries a TTL, so volatile-* policies evict it
// as allkeys-* do. Heal puts noeviction and no memory limit back; the
// cache keys stay until they expire. A node that evicted is refused by
// clients without AllowEvictingNodes until its count of evicted keys
// (INFO stats evicted_keys) is reset: Heal does what docs/PROTOCOL.md §11
// tells an operator, CONFIG RESETSTAT once the largest TTL in use has
// passed since the last eviction.
type Evict struct {
	Nodes
	Policy string        // maxmemory-policy, e.g. allkeys-lru or volatile-lru
	Accept time.Duration // the largest TTL in use: how long after noeviction Heal resets the count
}

// evictMaxMemory is the limit the nodes run with while they evict: a few
// megabytes over what an idle server uses.
const evictMaxMemory = "8mb"

// evictMaxFill bounds how much cache one node is sent while its lock key
// is still there (8 times the limit): the lock key was written before the
// cache and is never read again, so LRU evicts it long before that.
const evictMaxFill = 64 << 20

// Name says what the fault does and to which nodes.
func (f Evict) Name() string {
	return fmt.Sprintf("evict(%s: maxmemory %s, %s, a cache fills them until the lock's key is evicted)", f.Nodes.list(), evictMaxMemory, f.Policy)
}

// Apply sets the policy and fills the nodes, in parallel.
func (f Evict) Apply(ctx context.Context, env *Env) error {
	if !strings.HasPrefix(f.Policy, "allkeys-") && !strings.HasPrefix(f.Policy, "volatile-") {
		return fmt.Errorf("chaos: evict: policy %q evicts nothing (want allkeys-* or volatile-*)", f.Policy)
	}
	return f.atOnce(env, func(n int) (string, error) { return f.evict(ctx, env, n) })
}

// evict fills node i until its lock key is gone and says how much it took.
func (f Evict) evict(ctx context.Context, env *Env, i int) (string, error) {
	n, err := env.node(i)
	if err != nil {
		return "", err
	}
	c := directClient(n)
	defer c.Close()
	if err := c.ConfigSet(ctx, "maxmemory-policy", f.Policy).Err(); err != nil {
		return "", fmt.Errorf("chaos: n%d: CONFIG SET maxmemory-policy %s: %w", i, f.Policy, err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", evictMaxMemory).Err(); err != nil {
		return "", fmt.Errorf("chaos: n%d: CONFIG SET maxmemory %s: %w", i, evictMaxMemory, err)
	}
	value := strings.Repeat("c", 4096)
	const batch = 256
	sent := 0
	for {
		gone, err := c.Exists(ctx, env.lockKey()).Result()
		if err != nil {
			return "", fmt.Errorf("chaos: n%d: EXISTS: %w", i, err)
		}
		if gone == 0 {
			info, _ := c.Info(ctx, "stats").Result()
			evicted := infoField(info, "evicted_keys")
			return fmt.Sprintf("the lock's key evicted after %d cache keys of 4 KiB (evicted_keys %s)", sent, evicted), nil
		}
		if sent*len(value) >= evictMaxFill {
			return "", fmt.Errorf("chaos: n%d: the lock's key %s is still there after %d cache keys under %s", i, env.lockKey(), sent, f.Policy)
		}
		// EX an hour: the cache keys carry a TTL, as a cache's do, so
		// volatile-* policies may evict them too.
		pipe := c.Pipeline()
		for k := range batch {
			pipe.Set(ctx, fmt.Sprintf("cache:%d", sent+k), value, time.Hour)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return "", fmt.Errorf("chaos: n%d: filling the cache: %w", i, err)
		}
		sent += batch
	}
}

// Heal stops the eviction: noeviction and no limit again.
func (f Evict) Heal(ctx context.Context, env *Env) error {
	var errs []error
	for _, i := range f.Nodes {
		errs = append(errs, env.onNode(i, func(n Node) error {
			c := directClient(n)
			defer c.Close()
			if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
				return fmt.Errorf("chaos: n%d: CONFIG SET maxmemory-policy noeviction: %w", i, err)
			}
			return c.ConfigSet(ctx, "maxmemory", "0").Err()
		}))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// No node evicts from here on: a lock key evicted before is older
	// than any lock taken after Accept, so the count may go.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(f.Accept):
	}
	for _, i := range f.Nodes {
		errs = append(errs, env.onNode(i, func(n Node) error {
			c := directClient(n)
			defer c.Close()
			return c.ConfigResetStat(ctx).Err()
		}))
	}
	return errors.Join(errs...)
}
