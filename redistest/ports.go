package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// A port handed out here is not handed out again, to any process on this
// machine, for portQuarantine. A Cluster server keeps dialling the bus of a
// peer that went down (a chaos scenario's killed master) for as long as it
// runs; a fresh server of another test that the kernel gives the same port
// would be met by that stranger, and join its cluster before its own is
// formed (CLUSTER SET-CONFIG-EPOCH then refuses: "the node does not know
// any other node", or "config epoch is already non-zero"). The chaos
// suite's process and Docker backends, and the root tests beside them in
// CI, all take their ports here, so no two of them share one within the
// quarantine: longer than any scenario keeps a server down.
const portQuarantine = 20 * time.Minute

// portsDir holds one file per port handed out, named by the port; its
// modification time is when. Shared by every process of the machine's
// user through the temporary directory.
var portsDir = filepath.Join(os.TempDir(), "redistest-ports")

// FreePort returns a free 127.0.0.1 port that no process on this machine
// took through FreePort within the quarantine. Another program may still
// bind it before the caller does; callers try another then.
func FreePort() (int, error) {
	if err := os.MkdirAll(portsDir, 0o700); err != nil {
		return 0, fmt.Errorf("redistest: the port registry: %w", err)
	}
	const tries = 200
	for range tries {
		port, err := kernelPort()
		if err != nil {
			return 0, err
		}
		if reserve(port) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("redistest: no free loopback port outside the quarantine after %d tries (see %s)", tries, portsDir)
}

// kernelPort asks the kernel for an unused loopback port.
func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// reserve claims port in the registry; false if another claim of it is
// younger than the quarantine. O_EXCL makes one claim win between
// processes; a claim past the quarantine is removed and made again.
func reserve(port int) bool {
	path := filepath.Join(portsDir, strconv.Itoa(port))
	for range 2 {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err == nil {
			f.Close()
			return true
		}
		if !errors.Is(err, os.ErrExist) {
			return false
		}
		st, err := os.Stat(path)
		if err != nil || time.Since(st.ModTime()) < portQuarantine {
			return false
		}
		// Two processes may both see the old claim and remove it; one of
		// their O_EXCL creations wins, the other tries another port.
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	return false
}
