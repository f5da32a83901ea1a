package refill_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
	"github.com/quorumlabs/redlock/refill"
)

// fleet is lock nodes and a cache, real servers started for the test.
type fleet struct {
	locks *redistest.Cluster
	cache *redis.Client
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	locks := redistest.StartT(t, 3, redistest.Options{})
	cache := redistest.StartT(t, 1, redistest.Options{})
	return &fleet{locks: locks, cache: cache.Servers[0].Client()}
}

// process is one member of the fleet: its own lock client and guard.
func (f *fleet) process(t *testing.T, opts refill.Options) *refill.Guard {
	t.Helper()
	c, err := redlock.New(f.locks.Clients(), redlock.Options{TTL: 5 * time.Second, RestartGrace: redlock.NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if opts.ValueTTL == 0 {
		opts.ValueTTL = time.Minute
	}
	g, err := refill.New(c, f.cache, opts)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// missCounter counts the cache's GET misses: every caller's first read,
// which a test can await before letting the loader finish.
type missCounter struct {
	mu     sync.Mutex
	misses int
	cond   *sync.Cond
}

func countMisses(rdb *redis.Client) *missCounter {
	m := &missCounter{}
	m.cond = sync.NewCond(&m.mu)
	rdb.AddHook(m)
	return m
}

func (m *missCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (m *missCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (m *missCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "get" && errors.Is(err, redis.Nil) {
			m.mu.Lock()
			m.misses++
			m.cond.Broadcast()
			m.mu.Unlock()
		}
		return err
	}
}

// await waits for n misses, failing the test after a long bound.
func (m *missCounter) await(t *testing.T, n int) {
	timer := time.AfterFunc(30*time.Second, func() { m.cond.Broadcast() })
	defer timer.Stop()
	deadline := time.Now().Add(30 * time.Second)
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.misses < n {
		if time.Now().After(deadline) {
			t.Errorf("only %d cache misses of %d", m.misses, n)
			return
		}
		m.cond.Wait()
	}
}

func TestConcurrentMissesAcrossTheFleetLoadOnce(t *testing.T) {
	f := startFleet(t)
	misses := countMisses(f.cache)
	const processes, perProcess = 3, 6
	const callers = processes * perProcess
	var loads, running, overlap atomic.Int32
	load := func(ctx context.Context) (string, error) {
		if running.Add(1) > 1 {
			overlap.Add(1)
		}
		defer running.Add(-1)
		loads.Add(1)
		// Every caller missed (and the loader's own second read under the
		// lock): they all wait for this refill.
		misses.await(t, callers+1)
		return "fresh", nil
	}
	var wg sync.WaitGroup
	got := make(chan string, callers)
	for range processes {
		g := f.process(t, refill.Options{MaxWait: 30 * time.Second})
		for range perProcess {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := g.Get(context.Background(), "report", load)
				if err != nil {
					t.Error(err)
				}
				got <- v
			}()
		}
	}
	wg.Wait()
	close(got)
	for v := range got {
		if v != "fresh" {
			t.Fatalf("a caller got %q", v)
		}
	}
	if n := loads.Load(); n != 1 {
		t.Fatalf("loader ran %d times for %d concurrent misses, want 1", n, callers)
	}
	if overlap.Load() > 0 {
		t.Fatal("two loaders ran at once")
	}
}

func TestAHitDoesNotLoad(t *testing.T) {
	f := startFleet(t)
	g := f.process(t, refill.Options{})
	if err := f.cache.Set(context.Background(), "cached", "old", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	v, err := g.Get(context.Background(), "cached", func(context.Context) (string, error) {
		return "", errors.New("loader called on a hit")
	})
	if err != nil || v != "old" {
		t.Fatalf("hit: %q, %v", v, err)
	}
}

func TestALoaderErrorDoesNotHangTheWaiters(t *testing.T) {
	f := startFleet(t)
	misses := countMisses(f.cache)
	broken := errors.New("database down")
	const callers = 6
	var loads, running, overlap atomic.Int32
	load := func(context.Context) (string, error) {
		if running.Add(1) > 1 {
			overlap.Add(1)
		}
		defer running.Add(-1)
		if loads.Add(1) == 1 {
			misses.await(t, callers+1) // everyone waits behind the first failure
		}
		return "", broken
	}
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range 2 {
		g := f.process(t, refill.Options{MaxWait: 30 * time.Second})
		for range callers / 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := g.Get(context.Background(), "broken", load)
				errs <- err
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, broken) {
			t.Fatalf("a caller got %v, want the loader's error", err)
		}
	}
	// Each waiter tried the loader in its turn, never two at once.
	if overlap.Load() > 0 || loads.Load() != callers {
		t.Fatalf("loads %d (want %d, one per caller), concurrent loads %d", loads.Load(), callers, overlap.Load())
	}
	if n, _ := f.cache.Exists(context.Background(), "broken").Result(); n != 0 {
		t.Fatal("a failed load wrote the cache")
	}
}

// crashedHolder takes key's refill lock from another client and never
// releases it, as a process that died while loading: the lock stays until
// its TTL passes.
func crashedHolder(t *testing.T, f *fleet, g *refill.Guard, key string, ttl time.Duration) {
	t.Helper()
	c, err := redlock.New(f.locks.Clients(), redlock.Options{TTL: ttl, RestartGrace: redlock.NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(context.Background(), g.LockName(key), redlock.WithMaxWait(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	_ = c.Close() // no release, no extension: the key expires with its TTL
}

func TestAWaitBoundedBelowACrashedHoldersTTLFallsBack(t *testing.T) {
	f := startFleet(t)
	const bound = 300 * time.Millisecond
	for _, tc := range []struct {
		fallback refill.Fallback
		key      string
	}{{refill.FallbackError, "crash-error"}, {refill.FallbackLoad, "crash-load"}} {
		g := f.process(t, refill.Options{MaxWait: bound, Fallback: tc.fallback})
		crashedHolder(t, f, g, tc.key, time.Minute)
		start := time.Now()
		v, err := g.Get(context.Background(), tc.key, func(context.Context) (string, error) { return "mine", nil })
		// Generous: far below the crashed holder's minute, far above the bound.
		if waited := time.Since(start); waited > 20*time.Second {
			t.Fatalf("%s: waited %v with a bound of %v", tc.key, waited, bound)
		}
		switch tc.fallback {
		case refill.FallbackError:
			if !errors.Is(err, refill.ErrWaitTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("FallbackError: %q, %v; want ErrWaitTimeout", v, err)
			}
		case refill.FallbackLoad:
			if err != nil || v != "mine" {
				t.Fatalf("FallbackLoad: %q, %v", v, err)
			}
			if cached, _ := f.cache.Get(context.Background(), tc.key).Result(); cached != "mine" {
				t.Fatalf("the fallback's value was not cached: %q", cached)
			}
		}
	}
}

func TestAWaiterTakesOverFromACrashedHolderWithinTheBound(t *testing.T) {
	f := startFleet(t)
	g := f.process(t, refill.Options{MaxWait: 20 * time.Second})
	crashedHolder(t, f, g, "takeover", 300*time.Millisecond)
	var loads atomic.Int32
	v, err := g.Get(context.Background(), "takeover", func(context.Context) (string, error) {
		loads.Add(1)
		return "recomputed", nil
	})
	if err != nil || v != "recomputed" || loads.Load() != 1 {
		t.Fatalf("after the holder's lock expired: %q, %v, %d loads", v, err, loads.Load())
	}
}

func TestBadInputIsAConfigError(t *testing.T) {
	f := startFleet(t)
	c, err := redlock.New(f.locks.Clients(), redlock.Options{RestartGrace: redlock.NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, tc := range []struct {
		locks *redlock.Client
		cache redis.UniversalClient
		opts  refill.Options
	}{
		{nil, f.cache, refill.Options{ValueTTL: time.Second}},
		{c, nil, refill.Options{ValueTTL: time.Second}},
		{c, f.cache, refill.Options{}},
		{c, f.cache, refill.Options{ValueTTL: time.Second, MaxWait: -1}},
		{c, f.cache, refill.Options{ValueTTL: time.Second, LockTTL: -1}},
		{c, f.cache, refill.Options{ValueTTL: time.Second, Fallback: 7}},
	} {
		if _, err := refill.New(tc.locks, tc.cache, tc.opts); !errors.Is(err, redlock.ErrInvalidConfig) {
			t.Errorf("case %d: %v, want a ConfigError", i, err)
		}
	}
	g, err := refill.New(c, f.cache, refill.Options{ValueTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	load := func(context.Context) (string, error) { return "x", nil }
	for _, key := range []string{"", string(make([]byte, 513))} {
		if _, err := g.Get(context.Background(), key, load); !errors.Is(err, redlock.ErrInvalidConfig) {
			t.Errorf("key of %d bytes: %v, want a ConfigError", len(key), err)
		}
	}
	if _, err := g.Get(context.Background(), "k", nil); !errors.Is(err, redlock.ErrInvalidConfig) {
		t.Errorf("nil loader: %v", err)
	}
}
