package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/redistest"
)

// Schedules the native paths were tried against and held: each checks
// what the scripts promise, on the native path.

// flipCase is s with the case of its letters swapped.
func flipCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c >= 'A' && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

// TestNativeOwnerValueVariants: another owner whose value differs from
// ours only in case, by one byte more or one byte less: the native extend
// (SET IFEQ) must not renew it nor count it as ours, the native delete
// (DELEX IFEQ, DELIFEQ) must not delete it, exactly as the scripts'
// byte-wise comparison.
func TestNativeOwnerValueVariants(t *testing.T) {
	for _, server := range []string{redistest.Redis86, redistest.Valkey91} {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := redistest.StartT(t, 3, redistest.Options{Server: server})
			log := &sentLog{}
			c := nativeClient(t, cl, log, "")
			for k, variant := range []func(string) string{
				flipCase,
				func(v string) string { return v + "0" },
				func(v string) string { return v[:len(v)-1] },
				func(v string) string { return v[1:] },
			} {
				name := fmt.Sprintf("variant-%d", k)
				l, err := c.TryAcquire(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				other := variant(l.a.value)
				if other == l.a.value {
					t.Fatalf("variant %d is our value", k)
				}
				key := l.a.keys[0]
				for _, s := range cl.Servers {
					if err := s.Client().Set(ctx, key, other, time.Minute).Err(); err != nil {
						t.Fatal(err)
					}
				}
				mark := log.mark()
				if err := l.Extend(ctx); !errors.Is(err, ErrLockLost) {
					t.Errorf("variant %d (%q for %q): Extend %v, want ErrLockLost", k, other, l.a.value, err)
				}
				if log.since(mark, "set ifeq") == 0 {
					t.Errorf("variant %d: the extend did not go native", k)
				}
				q := quietAttempt(c, name)
				q.value, q.releaseArgs[4] = l.a.value, l.a.value
				for i, n := range c.nodes {
					if deleted, err := q.deleteOn(ctx, n); deleted || err != nil {
						t.Errorf("variant %d node %d: native delete of another owner's key: %v, %v", k, i, deleted, err)
					}
				}
				for i, s := range cl.Servers {
					rdb := s.Client()
					if got := rdb.Get(ctx, key).Val(); got != other {
						t.Errorf("variant %d node %d: another owner's key is %q, want %q", k, i, got, other)
					}
					if ttl := rdb.PTTL(ctx, key).Val(); ttl < 50*time.Second {
						t.Errorf("variant %d node %d: another owner's key's TTL %v, want it untouched (~1m)", k, i, ttl)
					}
				}
			}
		})
	}
}

// TestNativeMixedClientsNeverReviveALostLock: two clients on the same
// nodes, one on the native path and one on the scripts only (an older
// version of the library). A's keys vanish on every node (they expired
// unseen, say), B takes the lock; A's native Extend must not take it back
// and must leave B's keys; then B releases and fencing alone stops A's
// repair (the register shows B's newer token).
func TestNativeMixedClientsNeverReviveALostLock(t *testing.T) {
	for _, server := range []string{redistest.Redis86, redistest.Valkey91} {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := redistest.StartT(t, 3, redistest.Options{Server: server})
			logA, logB := &sentLog{}, &sentLog{}
			a := nativeClient(t, cl, logA, "")
			b := nativeClient(t, cl, logB, "")
			scriptsOnly(b)
			la, err := a.TryAcquire(ctx, "mixed")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.TryAcquire(ctx, "mixed"); !errors.Is(err, ErrLocked) {
				t.Fatalf("B while A holds: %v, want ErrLocked", err)
			}
			key := la.a.keys[0]
			for _, s := range cl.Servers {
				if err := s.Client().Del(ctx, key).Err(); err != nil {
					t.Fatal(err)
				}
			}
			lb, err := b.TryAcquire(ctx, "mixed")
			if err != nil {
				t.Fatal(err)
			}
			mark := logA.mark()
			if err := la.Extend(ctx); !errors.Is(err, ErrLockLost) {
				t.Fatalf("A's Extend while B holds: %v, want ErrLockLost", err)
			}
			if logA.since(mark, "set ifeq") == 0 {
				t.Fatalf("A's extend did not go native")
			}
			if err := a.Close(); err != nil { // A's background release of what it left
				t.Fatal(err)
			}
			// B's acquire may still be on its way to the third node when
			// A's extend meets it there: A's fallback script repairs the
			// missing key, and its background release deletes it again
			// (B's late SET NX then finds A's key and is refused). B
			// keeps a quorum; no node may keep A's key.
			held := 0
			for i, s := range cl.Servers {
				switch got := s.Client().Get(ctx, key).Val(); got {
				case lb.a.value:
					held++
				case la.a.value:
					t.Errorf("node %d: A's key is back after A's lost extend", i)
				}
			}
			if held < b.quorum() {
				t.Errorf("B's key is on %d nodes after A's extend, want a quorum", held)
			}
			if err := lb.Extend(ctx); err != nil {
				t.Fatalf("B's scripted extend after A's native one: %v", err)
			}
			if err := lb.Release(ctx); err != nil {
				t.Fatal(err)
			}

			// A second holder C (native) takes it and releases it; the
			// stale lock D of before must not come back.
			c := nativeClient(t, cl, &sentLog{}, "")
			ld, err := c.TryAcquire(ctx, "mixed-2")
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range cl.Servers {
				if err := s.Client().Del(ctx, ld.a.keys[0]).Err(); err != nil {
					t.Fatal(err)
				}
			}
			le, err := b.TryAcquire(ctx, "mixed-2")
			if err != nil {
				t.Fatal(err)
			}
			if err := le.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := ld.Extend(ctx); !errors.Is(err, ErrLockLost) {
				t.Fatalf("a stale native holder's Extend after a newer token: %v, want ErrLockLost", err)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			for i, s := range cl.Servers {
				if n := s.Client().Exists(ctx, ld.a.keys[0]).Val(); n != 0 {
					t.Errorf("node %d: the stale holder's extend revived the lock", i)
				}
			}
		})
	}
}

// TestNativeExtendRacingRelease: Extend and Release of one lock at once,
// many times, on the native path: no key is left behind on any node once
// both returned and the client closed (the release is never overtaken by
// an extend's SET, nor by its fallback script's repair).
func TestNativeExtendRacingRelease(t *testing.T) {
	for _, server := range []string{redistest.Redis86, redistest.Valkey91} {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cl := redistest.StartT(t, 3, redistest.Options{Server: server})
			log := &sentLog{}
			c := nativeClient(t, cl, log, "")
			mark := log.mark()
			var keys []string
			for i := range 40 {
				l, err := c.TryAcquire(ctx, fmt.Sprintf("race-%d", i), WithAutoExtend())
				if err != nil {
					t.Fatal(err)
				}
				keys = append(keys, l.a.keys[0])
				if i%2 == 0 { // node 0 lost the key: the extend's fallback repairs it
					if err := cl.Servers[0].Client().Del(ctx, l.a.keys[0]).Err(); err != nil {
						t.Fatal(err)
					}
				}
				var wg sync.WaitGroup
				wg.Add(2)
				go func() { defer wg.Done(); _ = l.Extend(ctx) }()
				go func() { defer wg.Done(); _ = l.Release(ctx) }()
				wg.Wait()
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if log.since(mark, "set ifeq") == 0 {
				t.Fatalf("no extend went native")
			}
			for i, s := range cl.Servers {
				for _, key := range keys {
					if n := s.Client().Exists(ctx, key).Val(); n != 0 {
						t.Errorf("node %d: %s left after Extend raced Release", i, key)
					}
				}
			}
		})
	}
}

// TestNativeSubSecondTTL: a 300ms lock renewed natively keeps its key
// renewed to its TTL, never longer, and is not lost.
func TestNativeSubSecondTTL(t *testing.T) {
	for _, server := range []string{redistest.Redis86, redistest.Valkey91} {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := redistest.StartT(t, 3, redistest.Options{Server: server})
			log := &sentLog{}
			var rdbs []redis.UniversalClient
			for _, s := range cl.Servers {
				rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
				rdb.AddHook(log)
				defer rdb.Close()
				rdbs = append(rdbs, rdb)
			}
			c, err := New(rdbs, Options{TTL: 300 * time.Millisecond, NodeTimeout: 20 * time.Millisecond, RestartGrace: NoRestartGrace})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			l, err := c.TryAcquire(ctx, "short", WithAutoExtend())
			if err != nil {
				t.Skipf("acquire on a busy machine: %v", err)
			}
			mark := log.mark()
			log.await(t, ctx, mark, "set ifeq", 3*5)
			if err := l.Err(); err != nil {
				t.Skipf("lost on a busy machine (%v)", err)
			}
			for i, s := range cl.Servers {
				if ttl := s.Client().PTTL(ctx, l.a.keys[0]).Val(); ttl > 300*time.Millisecond {
					t.Errorf("node %d: key's TTL %v above the lock's 300ms", i, ttl)
				}
			}
			_ = l.Release(ctx)
		})
	}
}

// TestNativeExtendSamplesTheClock: the native extend's TIME feeds the
// clock guard as the script's TIME does: a node whose clock jumped
// forward since the last probe sits out from the extend that saw it (no
// probe in between), and its vote in that extend does not count.
func TestNativeExtendSamplesTheClock(t *testing.T) {
	for _, server := range []string{redistest.Redis86, redistest.Valkey91} {
		t.Run(server, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cl := redistest.StartT(t, 3, redistest.Options{Server: server, FakeTime: true})
			log := &sentLog{}
			c := nativeClient(t, cl, log, "")
			l, err := c.TryAcquire(ctx, "clock")
			if err != nil {
				t.Fatal(err)
			}
			if err := cl.Servers[2].Kill(); err != nil { // the extend needs node 0's vote
				t.Fatal(err)
			}
			for try := 1; ; try++ {
				if err := cl.Servers[0].SetClockOffset(time.Duration(try) * 2 * time.Second); err != nil {
					t.Fatal(err)
				}
				mark := log.mark()
				err := l.Extend(ctx)
				if log.since(mark, "info") != 0 {
					// A probe ran before the extend and saw the jump: not
					// the schedule under test. The lock may be lost by now.
					if try == 3 || l.Err() != nil {
						t.Skip("a probe came first every time")
					}
					continue
				}
				if log.since(mark, "set ifeq") == 0 {
					t.Fatal("the extend did not go native")
				}
				if err == nil {
					t.Errorf("Extend counted the vote of a node whose clock jumped %v since the last probe", time.Duration(try)*2*time.Second)
				}
				info := c.Nodes(ctx)[0]
				if info.Voting || !strings.Contains(info.SitOutReason, "clock jumped") {
					t.Errorf("node 0 after the native extend saw its jump: voting %v, reason %q", info.Voting, info.SitOutReason)
				}
				return
			}
		})
	}
}

// TestNativeRenewalRoundOnAFullNode: the renewal round's twin of
