package chaos

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// openBackends opens every backend REDLOCK_CHAOS_BACKEND asks for. A
// backend that is asked for and missing fails the test; it is never
// skipped.
func openBackends(t *testing.T) []Backend {
	t.Helper()
	names, err := BackendsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	var bs []Backend
	for _, name := range names {
		b, err := OpenBackend(context.Background(), name)
		if err != nil {
			t.Fatalf("backend %s asked for (%s=%q) but not usable: %v", name, BackendEnv, os.Getenv(BackendEnv), err)
		}
		t.Cleanup(func() { b.Close() })
		bs = append(bs, b)
	}
	return bs
}

// startT starts what spec asks for on b and stops it when t ends; a start
// or a stop that fails fails t.
func startT(ctx context.Context, t *testing.T, b Backend, spec ClusterSpec) *Cluster {
	t.Helper()
	c, err := b.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return c
}

// The node operations the faults rely on do what they say, on every
// backend: kill and restart (data kept with persistence), pause, clock
// offset, and the proxies in front of the nodes.
func TestBackendNodeOperations(t *testing.T) {
	for _, b := range openBackends(t) {
		t.Run(b.Name(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := startT(ctx, t, b, ClusterSpec{Nodes: 2, Persistence: true, FakeTime: true})
			n0 := c.Nodes[0]
			rc := directClient(n0)
			defer rc.Close()
			if err := rc.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}

			// Kill and restart: the AOF (fsync always) keeps the key.
			if err := n0.Kill(ctx); err != nil {
				t.Fatal(err)
			}
			if err := rc.Ping(ctx).Err(); err == nil {
				t.Fatal("killed node still answers")
			}
			if err := n0.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			if got, err := rc.Get(ctx, "k").Result(); err != nil || got != "v" {
				t.Fatalf("after restart with persistence: %q, %v; want v", got, err)
			}

			// Pause: a command times out; after Resume it answers.
			if err := n0.Pause(ctx); err != nil {
				t.Fatal(err)
			}
			short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
			err := rc.Ping(short).Err()
			cancelShort()
			if err == nil {
				t.Fatal("paused node answered")
			}
			if err := n0.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			if err := waitPing(ctx, n0.Addr(), nil, 10*time.Second); err != nil {
				t.Fatal(err)
			}

			// Clock jump: a 10s key expires when the clock moves 20s ahead.
			if err := rc.Set(ctx, "short", "v", 10*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			before := serverTime(t, rc)
			if err := n0.SetClockOffset(ctx, 20*time.Second); err != nil {
				t.Fatal(err)
			}
			if jump := serverTime(t, rc).Sub(before); jump < 19*time.Second {
				t.Fatalf("clock moved by %s, want about 20s", jump)
			}
			if n, err := rc.Exists(ctx, "short").Result(); err != nil || n != 0 {
				t.Fatalf("10s key after a 20s jump: exists=%d err=%v", n, err)
			}

			// The proxy layer: a partition refuses, a reconnect answers.
			nw, err := NewNet([]string{c.Nodes[0].Addr(), c.Nodes[1].Addr()})
			if err != nil {
				t.Fatal(err)
			}
			defer nw.Close()
			pc := redis.NewClient(&redis.Options{Addr: nw.Addrs()[1], MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
			defer pc.Close()
			if err := pc.Ping(ctx).Err(); err != nil {
				t.Fatalf("through the proxy: %v", err)
			}
			if err := nw.Partition(1); err != nil {
				t.Fatal(err)
			}
			if err := pc.Ping(ctx).Err(); err == nil {
				t.Fatal("partitioned node answered through its proxy")
			}
			if err := nw.Reconnect(1); err != nil {
				t.Fatal(err)
			}
			if err := pc.Ping(ctx).Err(); err != nil {
				t.Fatalf("after reconnect: %v", err)
			}
			if c.Nodes[1].PeerAddr() == "" {
				t.Error("no peer address")
			}
		})
	}
}

func serverTime(t *testing.T, c *redis.Client) time.Time {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func TestOpenBackendRejectsUnknownName(t *testing.T) {
	_, err := OpenBackend(context.Background(), "kubernetes")
	if err == nil || !containsAll(err.Error(), "kubernetes", "docker", "process") {
		t.Fatalf("err = %v, want one naming the bad value and the choices", err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func TestBackendsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want string
	}{
		{"process", "process"}, {"docker", "docker"}, {" Both ", "process,docker"},
	} {
		t.Setenv(BackendEnv, tc.env)
		got, err := BackendsFromEnv()
		if err != nil || strings.Join(got, ",") != tc.want {
			t.Errorf("%s=%q: %v, %v; want %s", BackendEnv, tc.env, got, err, tc.want)
		}
	}
	t.Setenv(BackendEnv, "kvm")
	if _, err := BackendsFromEnv(); err == nil || !strings.Contains(err.Error(), `"kvm"`) {
		t.Errorf("bad value: %v", err)
	}
}
