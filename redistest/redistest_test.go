package redistest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestStartThreeIndependentNodes(t *testing.T) {
	c := StartT(t, 3, Options{})
	seen := map[string]bool{}
	for i, rdb := range c.Clients() {
		addr := c.Addrs()[i]
		if seen[addr] {
			t.Fatalf("address %s used twice", addr)
		}
		seen[addr] = true
		if c.URLs()[i] != "redis://"+addr {
			t.Errorf("URL %q does not match address %q", c.URLs()[i], addr)
		}
		if err := rdb.Set(ctxT(t, 5*time.Second), "k", addr, 0).Err(); err != nil {
			t.Fatalf("SET on %s: %v", addr, err)
		}
	}
	// Independent masters: each node holds only what was written to it.
	for i, s := range c.Servers {
		got, err := s.Client().Get(ctxT(t, 5*time.Second), "k").Result()
		if err != nil || got != s.Addr {
			t.Errorf("node %d: GET k = %q, %v; want %q", i, got, err, s.Addr)
		}
	}
}

func TestKillAndRestart(t *testing.T) {
	c := StartT(t, 3, Options{})
	s := c.Servers[1]
	oldPID := s.PID()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Running() {
		t.Fatal("Running() after Kill")
	}
	if err := syscall.Kill(oldPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d still exists after Kill: %v", oldPID, err)
	}
	if err := s.Client().Ping(ctxT(t, 5*time.Second)).Err(); err == nil {
		t.Error("PING answered by a killed node")
	}
	if err := s.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}
	for _, keep := range []bool{false, true} {
		if err := s.Restart(keep); err != nil {
			t.Fatalf("Restart(%v): %v", keep, err)
		}
		if !s.Running() || s.PID() == oldPID {
			t.Errorf("Restart(%v): running=%v pid=%d (old %d)", keep, s.Running(), s.PID(), oldPID)
		}
		if err := s.Client().Ping(ctxT(t, 5*time.Second)).Err(); err != nil {
			t.Errorf("PING after Restart(%v) via the same client: %v", keep, err)
		}
	}
}

func TestRestartKeepsDataOnlyWithPersistenceAndKeepData(t *testing.T) {
	cases := []struct {
		persistence, keepData, survives bool
	}{
		{persistence: true, keepData: true, survives: true},
		{persistence: true, keepData: false, survives: false},
		{persistence: false, keepData: true, survives: false},
	}
	for _, tc := range cases {
		t.Run(map[bool]string{true: "aof", false: "memory"}[tc.persistence]+"/keep="+map[bool]string{true: "yes", false: "no"}[tc.keepData], func(t *testing.T) {
			s := StartT(t, 1, Options{Persistence: tc.persistence}).Servers[0]
			if err := s.Client().Set(ctxT(t, 5*time.Second), "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := s.Restart(tc.keepData); err != nil {
				t.Fatal(err)
			}
			n, err := s.Client().Exists(ctxT(t, 5*time.Second), "k").Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := n == 1; got != tc.survives {
				t.Errorf("key survived restart = %v, want %v", got, tc.survives)
			}
		})
	}
}

func TestPauseResume(t *testing.T) {
	s := StartT(t, 1, Options{}).Servers[0]
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := s.Client().Ping(ctxT(t, 200*time.Millisecond)).Err(); err == nil {
		t.Fatal("PING answered by a paused node")
	}
	if !s.Running() {
		t.Error("a paused node must count as running")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := s.Client().Ping(ctxT(t, 5*time.Second)).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestStopLeavesNoProcess(t *testing.T) {
	c, err := Start(3, Options{Persistence: true})
	if err != nil {
		t.Fatal(err)
	}
	// A paused node must not make Stop hang.
	if err := c.Servers[0].Pause(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, s := range c.Servers {
		pids = append(pids, s.PID())
	}
	dir := c.root
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d still exists after Stop: %v", pid, err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp dir %s still there after Stop: %v", dir, err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := c.Servers[0].Client().Ping(ctxT(t, time.Second)).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("client after Stop: got %v, want redis.ErrClosed", err)
	}
}

func TestBadInput(t *testing.T) {
	cases := []struct {
		name string
		n    int
		opts Options
		want string
	}{
		{"no nodes", 0, Options{}, "node count 0"},
		{"rate without faketime", 1, Options{ClockRate: 10}, "ClockRate 10 needs FakeTime"},
		{"negative rate", 1, Options{FakeTime: true, ClockRate: -2}, "ClockRate -2"},
		{"bad redis arg", 1, Options{Args: []string{"--no-such-option", "1"}}, "no-such-option"},
		{"missing parent dir", 1, Options{Dir: "/nonexistent/redistest"}, "/nonexistent/redistest"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Start(tc.n, tc.opts)
			if err == nil {
				c.Stop()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
	s := StartT(t, 1, Options{}).Servers[0]
	if err := s.SetClockOffset(time.Second); err == nil || !strings.Contains(err.Error(), "FakeTime") {
		t.Errorf("SetClockOffset without FakeTime: %v", err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("Pause of a killed node: %v", err)
	}
}

// A port taken between probing and binding must be recognised, so that Start
// retries with another port instead of failing.
func TestTakenPortIsRecognised(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	build := TestServer(t)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Server{Dir: dir, build: build, Port: l.Addr().(*net.TCPAddr).Port, Addr: l.Addr().String()}
	s.client = newClient(s.Addr, nil)
	defer s.client.Close()
	s.mu.Lock()
	err = s.startLocked()
	s.mu.Unlock()
	defer s.Kill()
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("start on a taken port: %v; want errPortTaken", err)
	}
}

func TestStartWithAPasswordIsReady(t *testing.T) {
	c := StartT(t, 1, Options{Args: []string{"--requirepass", "s3cret"}})
	rdb := redis.NewClient(&redis.Options{Addr: c.Servers[0].Addr, Password: "s3cret"})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING with the password: %v", err)
	}
}
