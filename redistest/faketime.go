package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// fakeTimeLibrary is Debian's libfaketime (package faketime). A variable so a
// test can point it at a missing file.
var fakeTimeLibrary = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

// glibc is preloaded after libfaketime into the system's redis-server: with
// libfaketime alone it hangs at start (libfaketime allocates inside a clock
// read that jemalloc makes holding its lock; glibc's malloc has no such
// lock). The builds under ServersDir preload their own glibc instead (see
// ServerBuild.fakeTimeEnvFor).
const glibc = "/lib/x86_64-linux-gnu/libc.so.6"

// fakeTimeEnv returns env prepared to run redis-server under libfaketime,
// driven by clockFile, with preload (libfaketime and what must follow it)
// in the variable preloadVar.
//
// The clock is controlled only through the timestamp file, never through
// FAKETIME: libfaketime ignores the file while FAKETIME is set (checked with
// 0.9.10), so a rate given as FAKETIME="+0 x10" would freeze the offset. The
// rate goes into the file instead ("+20.000000000 x10"), which keeps both
// working. FAKETIME_NO_CACHE=1 makes every clock read re-read the file, so a
// rewrite takes effect at once.
//
// FAKETIME_DONT_FAKE_MONOTONIC=1 leaves CLOCK_MONOTONIC real: a stepped wall
// clock (NTP, an operator) does not move the monotonic clock on a real
// machine, and a monotonic clock stepped back would stall Redis' timers.
// Key expiry follows the wall clock, which is what the faults are about.
func fakeTimeEnv(env []string, clockFile, preloadVar, preload string) []string {
	out := make([]string, 0, len(env)+4)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "FAKETIME", "LD_PRELOAD", "REDLOCK_SERVER_PRELOAD", "FAKETIME_TIMESTAMP_FILE", "FAKETIME_NO_CACHE", "FAKETIME_DONT_FAKE_MONOTONIC":
			continue
		}
		out = append(out, kv)
	}
	return append(out,
		preloadVar+"="+preload,
		"FAKETIME_TIMESTAMP_FILE="+clockFile,
		"FAKETIME_NO_CACHE=1",
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
	)
}

// SetClockOffset sets the node's wall clock to real time plus d (d may be
// negative, with sub-second precision): "+20s" expires a key with 10s left
// at once. It sets, not adds: SetClockOffset(0) undoes any earlier offset.
// With ClockRate r the node's clock reads start + d + r*(now-start), start
// being when the process started, so the offset shifts the fast clock. The
// offset survives Restart. Only for a cluster started with FakeTime.
//
// On a running node that is not paused, SetClockOffset returns once the node
// answers TIME with the new offset. Redis reads the wall clock for every
// command; Valkey 9 reads it about every 100ms and counts the monotonic clock
// in between, so a step of its wall clock (here, or by NTP on a real machine)
// reaches its TIME and its key expiry only then. A node that is down or
// paused takes the offset when it next reads its clock.
func (s *Server) SetClockOffset(d time.Duration) error {
	if s.clockFile == "" {
		return fmt.Errorf("redistest: SetClockOffset(%v) on %s: the cluster was not started with FakeTime", d, s.Addr)
	}
	s.mu.Lock()
	old := s.offset
	live := s.runningLocked() && !s.paused
	s.mu.Unlock()
	var before clockSample
	if live && absDuration(d-old) >= clockResolution {
		var err error
		if before, err = s.sampleClock(); err != nil {
			return fmt.Errorf("redistest: SetClockOffset(%v) on %s: reading the node's clock before: %w", d, s.Addr, err)
		}
	} else {
		live = false // nothing to wait for
	}
	// libfaketime reads "+N.NNN" as seconds (a unit letter m/h/d would scale
	// it), optionally followed by " xRATE".
	spec := fmt.Sprintf("%+.9f", d.Seconds())
	if s.opts.ClockRate != 0 {
		spec += " x" + strconv.FormatFloat(s.opts.ClockRate, 'f', -1, 64)
	}
	// Write and rename, so the node never reads a half-written file.
	tmp := filepath.Join(s.Dir, "faketime.tmp")
	if err := os.WriteFile(tmp, []byte(spec+"\n"), 0o644); err != nil {
		return fmt.Errorf("redistest: writing clock file: %w", err)
	}
	if err := os.Rename(tmp, s.clockFile); err != nil {
		return fmt.Errorf("redistest: replacing clock file: %w", err)
	}
	s.mu.Lock()
	s.offset = d
	s.mu.Unlock()
	if !live {
		return nil
	}
	return s.awaitClock(before, d-old)
}

// clockResolution is the smallest change of offset SetClockOffset waits to
// see: below it, a reading cannot tell the old clock from the new.
const clockResolution = 10 * time.Millisecond

// clockSample is one TIME reading: the node's clock minus this host's, and
// this host's clock at the middle of the round trip.
type clockSample struct {
	at   time.Time
	skew time.Duration
}

func (s *Server) sampleClock() (clockSample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	before := time.Now()
	node, err := s.client.Time(ctx).Result()
	if err != nil {
		return clockSample{}, err
	}
	mid := before.Add(time.Since(before) / 2)
	return clockSample{at: mid, skew: node.Sub(mid)}, nil
}

// clockSettleTimeout bounds the wait for a node to take a new offset.
const clockSettleTimeout = 10 * time.Second

// awaitClock polls TIME until the node's clock has moved by delta from where
// the old offset would have it, judged from the sample before the change:
// with rate r the old clock gains (r-1) per real second on this host's.
// A reading counts as new once it is nearer the new clock than the old.
func (s *Server) awaitClock(before clockSample, delta time.Duration) error {
	rate := s.opts.ClockRate
	if rate == 0 {
		rate = 1
	}
	deadline := time.Now().Add(clockSettleTimeout)
	for {
		s.mu.Lock()
		live := s.runningLocked() && !s.paused
		s.mu.Unlock()
		if !live {
			return nil // paused or killed meanwhile: it takes the offset when it reads its clock again
		}
		now, err := s.sampleClock()
		if err == nil {
			stale := before.skew + time.Duration((rate-1)*float64(now.at.Sub(before.at)))
			if absDuration(now.skew-(stale+delta)) < absDuration(now.skew-stale) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: %s did not take a clock offset change of %v within %v (last TIME error: %v)",
				s.Addr, delta, clockSettleTimeout, err)
		}
		time.Sleep(5 * time.Millisecond) // the node re-reads its clock on its own schedule; nothing to wait on
	}
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
