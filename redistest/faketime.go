package redistest

import (
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

// glibc is preloaded after libfaketime: with libfaketime alone redis-server
// hangs at start (jemalloc and libfaketime recurse into each other).
const glibc = "/lib/x86_64-linux-gnu/libc.so.6"

// fakeTimeEnv returns env prepared to run redis-server under libfaketime,
// driven by clockFile.
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
func fakeTimeEnv(env []string, clockFile string) []string {
	out := make([]string, 0, len(env)+4)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "FAKETIME", "LD_PRELOAD", "FAKETIME_TIMESTAMP_FILE", "FAKETIME_NO_CACHE", "FAKETIME_DONT_FAKE_MONOTONIC":
			continue
		}
		out = append(out, kv)
	}
	return append(out,
		"LD_PRELOAD="+fakeTimeLibrary+":"+glibc,
		"FAKETIME_TIMESTAMP_FILE="+clockFile,
		"FAKETIME_NO_CACHE=1",
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
	)
}

// SetClockOffset sets the node's wall clock to real time plus d (d may be
// negative, with sub-second precision), taking effect on the node's next
// clock read: "+20s" expires a key with 10s left at once. It sets, not adds:
// SetClockOffset(0) undoes any earlier offset. With ClockRate r the node's
// clock reads start + d + r*(now-start), start being when the process started,
// so the offset shifts the fast clock. The offset survives Restart. Only for
// a cluster started with FakeTime.
func (s *Server) SetClockOffset(d time.Duration) error {
	if s.clockFile == "" {
		return fmt.Errorf("redistest: SetClockOffset(%v) on %s: the cluster was not started with FakeTime", d, s.Addr)
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
	return nil
}
