package redistest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// A port is handed out once per quarantine, to any process: the claim is a
// file, so a second FreePort (here, of the same process) never returns it,
// and a claim older than the quarantine is made again.
func TestFreePortNeverHandsOutAPortTwiceWithinTheQuarantine(t *testing.T) {
	old := portsDir
	portsDir = t.TempDir()
	t.Cleanup(func() { portsDir = old })

	seen := map[int]bool{}
	for range 50 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice within the quarantine", p)
		}
		seen[p] = true
	}
	var p int
	for p = range seen {
		break
	}
	if reserve(p) {
		t.Fatalf("port %d claimed again while its claim is fresh", p)
	}
	claim := filepath.Join(portsDir, strconv.Itoa(p))
	past := time.Now().Add(-portQuarantine - time.Minute)
	if err := os.Chtimes(claim, past, past); err != nil {
		t.Fatal(err)
	}
	if !reserve(p) {
		t.Fatalf("port %d not claimed again after its quarantine", p)
	}
	if st, err := os.Stat(claim); err != nil || time.Since(st.ModTime()) > time.Minute {
		t.Fatalf("the new claim of port %d is not dated now: %v, %v", p, st, err)
	}
}
