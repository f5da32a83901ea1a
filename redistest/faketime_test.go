package redistest

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clockSkew returns bounds on the node's clock minus this host's clock: the
// node read its clock somewhere between sending and receiving TIME.
func clockSkew(t *testing.T, rdb *redis.Client) (lo, hi time.Duration) {
	t.Helper()
	before := time.Now()
	node, err := rdb.Time(ctxT(t, 5*time.Second)).Result()
	after := time.Now()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return node.Sub(after), node.Sub(before)
}

func TestSetClockOffsetMovesTime(t *testing.T) {
	s := StartT(t, 1, Options{FakeTime: true}).Servers[0]
	// Redis reads its clock with microsecond resolution; the slack covers
	// rounding, not load (the bounds already include any delay).
	const slack = 20 * time.Millisecond
	check := func(want time.Duration) {
		t.Helper()
		lo, hi := clockSkew(t, s.Client())
		if want < lo-slack || want > hi+slack {
			t.Errorf("node clock offset in [%v, %v], want %v", lo, hi, want)
		}
	}
	check(0)
	for _, d := range []time.Duration{20 * time.Second, -1500 * time.Millisecond, 250 * time.Millisecond} {
		if err := s.SetClockOffset(d); err != nil {
			t.Fatal(err)
		}
		check(d)
	}
	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	check(250 * time.Millisecond) // the offset survives a restart
}

func TestClockJumpExpiresKeyEarly(t *testing.T) {
	s := StartT(t, 1, Options{FakeTime: true}).Servers[0]
	rdb := s.Client()
	if err := rdb.Set(ctxT(t, 5*time.Second), "k", "v", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.SetClockOffset(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctxT(t, 5*time.Second), "k").Result(); err != nil || n != 1 {
		t.Fatalf("after +5s: EXISTS k = %d, %v; want 1 (5s of 10s used)", n, err)
	}
	if err := s.SetClockOffset(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctxT(t, 5*time.Second), "k").Result(); err != nil || n != 0 {
		t.Fatalf("after +20s: EXISTS k = %d, %v; want 0 (expired)", n, err)
	}
}

func TestClockRateRunsFast(t *testing.T) {
	s := StartT(t, 1, Options{FakeTime: true, ClockRate: 10})
	rdb := s.Servers[0].Client()
	first, err := rdb.Time(ctxT(t, 5*time.Second)).Result()
	if err != nil {
		t.Fatal(err)
	}
	firstSeen := time.Now()
	// The node read its clock before firstSeen and after lastAsked, so at
	// least lastAsked-firstSeen real time passed between its two readings.
	var last time.Time
	var realElapsed time.Duration
	for realElapsed < 300*time.Millisecond {
		time.Sleep(20 * time.Millisecond) // letting time pass is the point here
		lastAsked := time.Now()
		if last, err = rdb.Time(ctxT(t, 5*time.Second)).Result(); err != nil {
			t.Fatal(err)
		}
		realElapsed = lastAsked.Sub(firstSeen)
	}
	if nodeElapsed := last.Sub(first); nodeElapsed < 5*realElapsed {
		t.Errorf("node clock advanced %v while at least %v passed; want about 10x", nodeElapsed, realElapsed)
	}
	// An offset still applies on top of the fast clock.
	lo, _ := clockSkew(t, rdb)
	if err := s.Servers[0].SetClockOffset(time.Hour); err != nil {
		t.Fatal(err)
	}
	if lo2, _ := clockSkew(t, rdb); lo2-lo < time.Hour {
		t.Errorf("SetClockOffset(1h) with ClockRate 10 moved the node clock by only %v", lo2-lo)
	}
}

func TestFakeTimeNeedsLibrary(t *testing.T) {
	saved := fakeTimeLibrary
	fakeTimeLibrary = "/nonexistent/libfaketime.so.1"
	t.Cleanup(func() { fakeTimeLibrary = saved })
	_, err := Start(1, Options{FakeTime: true})
	if err == nil || !strings.Contains(err.Error(), fakeTimeLibrary) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Start with a missing libfaketime: %v; want an error naming %s that matches os.ErrNotExist", err, fakeTimeLibrary)
	}
}
