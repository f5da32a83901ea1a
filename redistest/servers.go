package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The server builds the helpers can run, by the names REDLOCK_TEST_SERVER
// and Options.Server take.
const (
	// Redis70 is the system's redis-server found in PATH (Debian 12's
	// 7.0.15, which tools/install-deps.sh installs).
	Redis70 = "redis-7.0"
	// Redis86 and Valkey91 are the builds tools/install-servers.sh (make
	// servers) installs under ServersDir.
	Redis86  = "redis-8.6"
	Valkey91 = "valkey-9.1"
)

// ServerEnv names the environment variable that chooses the server build
// for every cluster whose Options.Server is empty.
const ServerEnv = "REDLOCK_TEST_SERVER"

// ServerNames are the names ServerEnv and Options.Server accept.
var ServerNames = []string{Redis70, Redis86, Valkey91}

// ServerBuild is one server build: what runs when a test asks for it.
type ServerBuild struct {
	Name    string // Redis70, Redis86 or Valkey91
	Product string // "redis" or "valkey", as the binary's --version says
	Version string // e.g. "9.1.2", as the binary's --version says
	// Binary is what is started: the system's redis-server, or the
	// bin/redis-server script of an install under ServersDir, which starts
	// the real binary through its own glibc's loader.
	Binary string
	// Dir is the install directory of a build under ServersDir (its
	// layout is tools/install-servers.sh's); empty for the system's server.
	Dir string
}

// String is how the build is reported, e.g. "valkey 9.1.2 (valkey-9.1: /root/.cache/redlock/servers/valkey-9.1/bin/redis-server)".
func (b ServerBuild) String() string {
	return fmt.Sprintf("%s %s (%s: %s)", b.Product, b.Version, b.Name, b.Binary)
}

// ServersDir is where tools/install-servers.sh puts the newer servers:
// $REDLOCK_SERVERS_DIR, or ~/.cache/redlock/servers.
func ServersDir() string {
	if d := os.Getenv("REDLOCK_SERVERS_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		// No home: a relative path that will not exist, so the error
		// names where the build was looked for.
		return filepath.Join("$HOME", ".cache", "redlock", "servers")
	}
	return filepath.Join(home, ".cache", "redlock", "servers")
}

// SelectedServer is the build that ServerEnv names, Redis70 when it is unset.
// It does not check that the name is known or installed; LookupServer does.
func SelectedServer() string {
	if name := strings.TrimSpace(os.Getenv(ServerEnv)); name != "" {
		return name
	}
	return Redis70
}

var (
	buildsMu sync.Mutex
	builds   = map[string]ServerBuild{} // by name and ServersDir, once found and asked its version
)

// ErrServerMissing is wrapped by LookupServer's error when the build asked
// for is not installed: a test that wants it must fail, not skip.
var ErrServerMissing = errors.New("server build not installed")

// LookupServer finds the named build (empty means SelectedServer) and asks it
// its version. A build asked for and not installed is an error wrapping
// ErrServerMissing, which says how to install it; an unknown name is an
// error naming it.
func LookupServer(name string) (ServerBuild, error) {
	if name == "" {
		name = SelectedServer()
	}
	key := name + "\x00" + ServersDir()
	buildsMu.Lock()
	defer buildsMu.Unlock()
	if b, ok := builds[key]; ok {
		return b, nil
	}
	b := ServerBuild{Name: name}
	switch name {
	case Redis70:
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			return ServerBuild{}, fmt.Errorf("redistest: server %s: redis-server not found in PATH (run tools/install-deps.sh): %w: %v", name, ErrServerMissing, err)
		}
		b.Binary = bin
	case Redis86, Valkey91:
		b.Dir = filepath.Join(ServersDir(), name)
		b.Binary = filepath.Join(b.Dir, "bin", "redis-server")
		if _, err := os.Stat(b.Binary); err != nil {
			return ServerBuild{}, fmt.Errorf("redistest: server %s: %s is missing (run make servers): %w: %v", name, b.Binary, ErrServerMissing, err)
		}
	default:
		return ServerBuild{}, fmt.Errorf("redistest: unknown server %q (from %s or Options.Server): want one of %s",
			name, ServerEnv, strings.Join(ServerNames, ", "))
	}
	out, err := exec.Command(b.Binary, "--version").CombinedOutput()
	if err != nil {
		return ServerBuild{}, fmt.Errorf("redistest: server %s: %s --version: %v: %s", name, b.Binary, err, strings.TrimSpace(string(out)))
	}
	if b.Product, b.Version, err = parseVersion(string(out)); err != nil {
		return ServerBuild{}, fmt.Errorf("redistest: server %s: %s --version: %w", name, b.Binary, err)
	}
	builds[key] = b
	return b, nil
}

// parseVersion reads "Redis server v=8.6.3 sha=..." or "Valkey server
// v=9.1.2 ...".
func parseVersion(out string) (product, version string, err error) {
	fields := strings.Fields(out)
	if len(fields) < 3 || fields[1] != "server" || !strings.HasPrefix(fields[2], "v=") {
		return "", "", fmt.Errorf("unexpected output %q", strings.TrimSpace(out))
	}
	return strings.ToLower(fields[0]), strings.TrimPrefix(fields[2], "v="), nil
}

var logged sync.Map // build name -> struct{}: reported once per test binary

// TestServer is the build that clusters with an empty Options.Server run on
// (ServerEnv's choice). It fails tb when that build is missing and reports
// the build in tb's log once per test binary.
func TestServer(tb testing.TB) ServerBuild {
	tb.Helper()
	b, err := LookupServer("")
	if err != nil {
		tb.Fatal(err)
	}
	reportOnce(tb, b)
	return b
}

func reportOnce(tb testing.TB, b ServerBuild) {
	tb.Helper()
	if _, done := logged.LoadOrStore(b.Name, struct{}{}); !done {
		tb.Logf("redistest: the servers are %s", b)
	}
}

// fakeTimeEnvFor is fakeTimeEnv for build b. The system's server takes
// libfaketime through LD_PRELOAD, with the system's glibc after it so that
// glibc's malloc is the process' (jemalloc and libfaketime deadlock
// otherwise). A build under ServersDir runs on its own glibc, which the
// system's cannot stand in for, and starts through a /bin/sh script that
// the same preload would break: its script takes the list in
// REDLOCK_SERVER_PRELOAD instead, with its own glibc, and then
// jemalloc-to-glibc.so, which gives the jemalloc calls these servers make
// beside malloc glibc's meaning (tools/jemalloc-to-glibc.c says why).
func (b ServerBuild) fakeTimeEnvFor(env []string, clockFile string) []string {
	preload := strings.Join(b.FakeTimePreload(), ":")
	if b.Dir == "" {
		return fakeTimeEnv(env, clockFile, "LD_PRELOAD", preload)
	}
	return fakeTimeEnv(env, clockFile, "REDLOCK_SERVER_PRELOAD", preload)
}

// RealBinary is the server binary itself: Binary for the system's server;
// for a build under ServersDir, the binary its script starts through
// Loader (it cannot start without).
func (b ServerBuild) RealBinary() string {
	if b.Dir == "" {
		return b.Binary
	}
	return filepath.Join(b.Dir, "root", "usr", "bin", b.Product+"-server")
}

// Loader is the glibc loader a build under ServersDir starts through, and
// LibraryPath the directories it searches (its own glibc first); both are
// empty for the system's server.
func (b ServerBuild) Loader() string {
	if b.Dir == "" {
		return ""
	}
	return filepath.Join(b.privateLibDir(), "ld-linux-x86-64.so.2")
}

// LibraryPath: see Loader.
func (b ServerBuild) LibraryPath() string {
	if b.Dir == "" {
		return ""
	}
	return b.privateLibDir() + ":/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu"
}

// FakeTimePreload is what must be preloaded, in order, to run the build
// under libfaketime (see fakeTimeEnvFor).
func (b ServerBuild) FakeTimePreload() []string {
	if b.Dir == "" {
		return []string{fakeTimeLibrary, glibc}
	}
	return []string{fakeTimeLibrary, b.privateGlibc(), b.mallocShim()}
}

func (b ServerBuild) privateLibDir() string {
	return filepath.Join(b.Dir, "root", "usr", "lib", "x86_64-linux-gnu")
}

func (b ServerBuild) privateGlibc() string {
	return filepath.Join(b.privateLibDir(), "libc.so.6")
}

func (b ServerBuild) mallocShim() string {
	return filepath.Join(b.Dir, "lib", "jemalloc-to-glibc.so")
}

// checkFakeTime says why b cannot run under libfaketime here, if it cannot.
func (b ServerBuild) checkFakeTime() error {
	if _, err := os.Stat(fakeTimeLibrary); err != nil {
		return fmt.Errorf("redistest: FakeTime needs libfaketime at %s (apt-get install faketime, or tools/install-deps.sh): %w", fakeTimeLibrary, err)
	}
	if b.Dir == "" {
		return nil
	}
	for _, f := range []string{b.privateGlibc(), b.mallocShim()} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("redistest: FakeTime on %s needs %s (run make servers with gcc installed): %w", b.Name, f, err)
		}
	}
	return nil
}
