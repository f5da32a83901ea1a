package redlock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// Every primitive's vote goes through the one durable write path, so on
// nodes counted as persistent through WAITAOF (FsyncedVotes, everysec)
// each acquire is followed by a WAITAOF on at least a quorum of them: the
// mutex, the semaphore, the read and the write side of a read-write lock,
// the fair lock, and a multi-lock (batched scripts). The servers count
// the calls (INFO commandstats, reset before each acquire); the client
// met the nodes before, so no probe sends one of its own. It needs
// a WAITAOF that FsyncedVotes trusts: it runs on Redis 8.6 whatever the
// run's server.
func TestFsyncedVotesOfEveryPrimitive(t *testing.T) {
	server := fsyncTrustedServer()
	cl := redistest.StartT(t, 3, redistest.Options{Server: server, Args: everysec})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := newClient(t, cl, fsyncedOptions())
	sem, err := c.Semaphore("permits", 2)
	if err != nil {
		t.Fatal(err)
	}
	try := []struct {
		what    string
		acquire func() (func(context.Context) error, error)
	}{
		{"mutex", func() (func(context.Context) error, error) {
			l, err := c.TryAcquire(ctx, "mutex")
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}},
		{"semaphore", func() (func(context.Context) error, error) {
			p, err := sem.TryAcquire(ctx)
			if err != nil {
				return nil, err
			}
			return p.Release, nil
		}},
		{"reader", func() (func(context.Context) error, error) {
			l, err := c.RWLock("rw").TryRLock(ctx)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}},
		{"writer", func() (func(context.Context) error, error) {
			l, err := c.RWLock("rw").TryLock(ctx)
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}},
		{"fair", func() (func(context.Context) error, error) {
			l, err := c.TryAcquire(ctx, "fair", redlock.WithFairness())
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}},
		{"multilock", func() (func(context.Context) error, error) {
			m, err := c.TryAcquireMulti(ctx, []string{"a", "b", "c"})
			if err != nil {
				return nil, err
			}
			return m.Release, nil
		}},
	}
	// First contact: the probes' barriers, and the TTL register raised.
	if release, err := try[0].acquire(); err != nil {
		t.Fatalf("warm-up: %v", err)
	} else if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	waitAOFCalls := func() []int {
		t.Helper()
		calls := make([]int, len(cl.Servers))
		for i, s := range cl.Servers {
			stats, err := s.Client().Info(ctx, "commandstats").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(stats, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_waitaof:calls="); ok {
					calls[i], _ = strconv.Atoi(strings.SplitN(v, ",", 2)[0])
				}
			}
		}
		return calls
	}
	for _, tc := range try {
		for _, s := range cl.Servers {
			if err := s.Client().ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		release, err := tc.acquire()
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		t.Logf("%s: taken in %v", tc.what, time.Since(start).Round(time.Millisecond))
		calls := waitAOFCalls()
		if err := release(ctx); err != nil {
			t.Fatal(err)
		}
		waited := 0
		for _, n := range calls {
			if n > 0 {
				waited++
			}
		}
		if waited < 2 {
			t.Errorf("%s: WAITAOF calls per node %v, want one on at least a quorum (2 of 3): its votes counted without a confirmed fsync", tc.what, calls)
		}
	}
}
