// Package redistest runs real redis-server processes for tests: N independent
// masters on free loopback ports, each in its own directory, started in the
// foreground as children of the test so that every fault (kill, restart with or
// without data, SIGSTOP pause, a moved or fast clock) is applied to a known PID
// and nothing outlives Stop.
//
// It runs the system's redis-server from PATH, or Redis 8.6 or Valkey 9.1 as
// installed by tools/install-servers.sh (make servers), chosen per cluster by
// Options.Server or for the whole test binary by REDLOCK_TEST_SERVER (see
// LookupServer). FakeTime needs Debian's libfaketime; tools/install-deps.sh
// installs it and the system's redis-server.
package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options configures the servers of a Cluster. The zero value starts plain
// in-memory masters.
type Options struct {
	// Server names the server build to run (Redis70, Redis86, Valkey91);
	// empty means the one REDLOCK_TEST_SERVER names, Redis70 by default.
	// A build asked for and not installed makes Start fail.
	Server      string
	Dir         string   // parent dir for node dirs; default os.MkdirTemp
	Persistence bool     // appendonly yes, appendfsync always
	FakeTime    bool     // start under libfaketime driven by a per-node timestamp file (see SetClockOffset)
	ClockRate   float64  // with FakeTime: >1 runs the node's clock fast (e.g. 10); 0 means real speed
	Args        []string // extra redis-server args, e.g. "--enable-debug-command", "yes"
	// ClusterMode starts each node with cluster-enabled yes, alone in its
	// own cluster and serving no hash slot until ServeSlots; partial
	// coverage is allowed, so a node serves the slots it was given.
	ClusterMode bool
	// TLS, if set, makes the nodes serve TLS only, on Port (--port 0
	// --tls-port). See PKI for certificates made in the test.
	TLS *TLS
	// Users are ACL users, one rule each as after "user" in an ACL file:
	// "locker on >secret ~redlock:* +get". The default user stays as Redis
	// makes it (no password, every command) unless a rule redefines it,
	// and the helper's own client logs in as the default user.
	Users []string

	sentinelConf string // Sentinel only: the config file's body (StartSentinel)
}

// TLS are the files of nodes that serve TLS.
type TLS struct {
	// CAFile is the CA bundle the nodes trust for client certificates.
	CAFile string
	// Server is the nodes' certificate and key.
	Server CertFiles
	// Client is the certificate that the helper's own client and
	// readiness probe present. When it is set the nodes ask every client
	// for a certificate signed by CAFile (--tls-auth-clients yes); when it
	// is not, they ask none. The helper's client does not check the
	// nodes' certificates: tests give nodes bad ones on purpose.
	Client CertFiles
}

// readyTimeout bounds how long a node may take to answer PING after start.
// It is generous because the machine may be busy compiling and testing.
const readyTimeout = 15 * time.Second

// portAttempts is how many fresh ports Start tries for one node when another
// process takes the chosen port between probing and binding.
const portAttempts = 5

// errPortTaken marks a start that failed only because the port was in use.
var errPortTaken = errors.New("port already in use")

// Cluster is a set of independent redis-server processes.
type Cluster struct {
	Servers []*Server
	// Build is the server build every node runs.
	Build ServerBuild

	root     string // temp dir holding every node dir; removed by Stop
	stopOnce sync.Once
	stopErr  error
}

// Server is one redis-server process. Addr, Port and Dir stay the same across
// restarts. Its methods are safe for concurrent use.
type Server struct {
	Addr string // "127.0.0.1:port"
	Port int
	Dir  string // node dir: redis.log, stdout.log, the faketime file, and data/ (Redis' working dir)
	// BusPort is the cluster bus port of a node started with ClusterMode
	// (--cluster-port): a free port of its own, not Port+10000, which
	// may be taken or out of range.
	BusPort int

	opts      Options
	sentinel  string // Sentinel only: the config file (topology.go)
	build     ServerBuild
	clockFile string      // FakeTime only
	tlsConfig *tls.Config // TLS only: the helper's own client's
	aclFile   string      // Users only
	client    *redis.Client

	mu     sync.Mutex
	pid    int
	exited chan struct{} // closed once the current process has been reaped
	paused bool          // SIGSTOPped by Pause and not resumed
	offset time.Duration // FakeTime only: the clock offset last set
}

// Start starts n redis-server processes and waits until each answers PING.
// On error nothing is left running.
func Start(n int, opts Options) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("redistest: node count %d: need at least 1", n)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	build, err := LookupServer(opts.Server)
	if err != nil {
		return nil, err
	}
	if opts.FakeTime {
		if err := build.checkFakeTime(); err != nil {
			return nil, err
		}
	}
	root, err := os.MkdirTemp(opts.Dir, "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: creating temp dir under %q: %w", opts.Dir, err)
	}
	// Absolute, because redis-server resolves --logfile after moving into --dir.
	if root, err = filepath.Abs(root); err != nil {
		return nil, errors.Join(fmt.Errorf("redistest: %w", err), os.RemoveAll(root))
	}
	c := &Cluster{root: root, Build: build}
	for i := range n {
		s, err := startServer(build, filepath.Join(root, fmt.Sprintf("node%d", i)), opts)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("redistest: node %d: %w", i, err), c.Stop())
		}
		c.Servers = append(c.Servers, s)
	}
	return c, nil
}

// StartT is Start for tests: it fails tb if the servers cannot start, and
// stops them in tb.Cleanup. The first cluster of each server build in a test
// binary reports the build in tb's log.
func StartT(tb testing.TB, n int, opts Options) *Cluster {
	tb.Helper()
	skipIfPinnedElsewhere(tb, opts)
	c, err := Start(n, opts)
	c = stoppedAtEnd(tb, "redis servers", c, err)
	reportOnce(tb, c.Build)
	return c
}

// skipIfPinnedElsewhere skips tb, saying why, in a run that ServerEnv
// points at a server other than the one opts pins: a test that names its
// server runs the same whatever ServerEnv says, and runs in the run with
// ServerEnv unset (make test) and in its own server's run, so the other
// server matrix runs need not repeat it.
func skipIfPinnedElsewhere(tb testing.TB, opts Options) {
	tb.Helper()
	selected := strings.TrimSpace(os.Getenv(ServerEnv))
	if selected != "" && opts.Server != "" && opts.Server != selected {
		tb.Skipf("SKIPPED in the %s=%s run: this test pins %s, and runs with %s unset (make test) and in the %s run", ServerEnv, selected, opts.Server, ServerEnv, opts.Server)
	}
}

// stoppedAtEnd is the test side of a Start function's result: tb fails at
// once if the start did, and otherwise d (what) is stopped when tb ends,
// failing tb if that stop fails.
func stoppedAtEnd[D interface{ Stop() error }](tb testing.TB, what string, d D, err error) D {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := d.Stop(); err != nil {
			tb.Errorf("stopping %s: %v", what, err)
		}
	})
	return d
}

func (o Options) validate() error {
	if o.ClockRate != 0 && !o.FakeTime {
		return fmt.Errorf("redistest: ClockRate %v needs FakeTime", o.ClockRate)
	}
	if o.ClockRate < 0 || math.IsNaN(o.ClockRate) || math.IsInf(o.ClockRate, 0) {
		return fmt.Errorf("redistest: ClockRate %v: must be a positive finite number (or 0 for real speed)", o.ClockRate)
	}
	if o.TLS != nil && (o.TLS.CAFile == "" || o.TLS.Server.Cert == "" || o.TLS.Server.Key == "") {
		return fmt.Errorf("redistest: TLS needs CAFile and the server's Cert and Key (see PKI)")
	}
	return nil
}

// Addrs returns "127.0.0.1:port" of every node, in order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.Addr
	}
	return addrs
}

// URLs returns "redis://127.0.0.1:port" of every node, in order
// ("rediss://" with TLS).
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		urls[i] = s.URL()
	}
	return urls
}

// URL returns "redis://127.0.0.1:port", or "rediss://..." with TLS.
func (s *Server) URL() string {
	if s.opts.TLS != nil {
		return "rediss://" + s.Addr
	}
	return "redis://" + s.Addr
}

// Clients returns the go-redis client of every node, in order (the same
// clients as Server.Client). Stop closes them; callers must not.
func (c *Cluster) Clients() []redis.UniversalClient {
	clients := make([]redis.UniversalClient, len(c.Servers))
	for i, s := range c.Servers {
		clients[i] = s.client
	}
	return clients
}

// Stop kills every process with SIGKILL (which also ends a paused one, so Stop
// never waits on a SIGSTOPped node), reaps it, closes the clients and removes
// the temp dir. Data is thrown away, so there is no point in a graceful
// shutdown. Calling Stop again returns the first call's result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		for _, s := range c.Servers {
			errs = append(errs, s.Kill(), s.client.Close())
		}
		errs = append(errs, os.RemoveAll(c.root))
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// startServer makes the node dir and starts the process, choosing another
// free port when the first one was taken before redis-server could bind it.
func startServer(build ServerBuild, dir string, opts Options) (*Server, error) {
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, opts: opts, build: build}
	if opts.TLS != nil {
		var err error
		if s.tlsConfig, err = helperTLSConfig(opts.TLS); err != nil {
			return nil, err
		}
	}
	if len(opts.Users) > 0 {
		s.aclFile = filepath.Join(dir, "users.acl")
		var b strings.Builder
		for _, u := range opts.Users {
			b.WriteString("user " + u + "\n")
		}
		if err := os.WriteFile(s.aclFile, []byte(b.String()), 0o600); err != nil {
			return nil, err
		}
	}
	if opts.sentinelConf != "" {
		s.sentinel = filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(s.sentinel, []byte(opts.sentinelConf), 0o644); err != nil {
			return nil, err
		}
	}
	if opts.FakeTime {
		s.clockFile = filepath.Join(dir, "faketime")
		if err := s.SetClockOffset(0); err != nil {
			return nil, err
		}
	}
	var err error
	for range portAttempts {
		if s.Port, err = FreePort(); err != nil {
			return nil, err
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		if opts.ClusterMode {
			if s.BusPort, err = FreePort(); err != nil {
				return nil, err
			}
		}
		s.client = newClient(s.Addr, s.tlsConfig)
		s.mu.Lock()
		err = s.startLocked()
		s.mu.Unlock()
		if err == nil {
			return s, nil
		}
		s.client.Close()
		if !errors.Is(err, errPortTaken) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("no free port after %d attempts: %w", portAttempts, err)
}

// processArgs are the arguments of every server process, a Sentinel's
// too: its port on 127.0.0.1, in the foreground, its directory and log.
func (s *Server) processArgs() []string {
	return []string{
		"--port", strconv.Itoa(s.Port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", filepath.Join(s.Dir, "data"),
		"--logfile", filepath.Join(s.Dir, "redis.log"),
	}
}

// startLocked runs redis-server in the foreground on s.Port and waits until it
// answers PING. s.mu must be held.
func (s *Server) startLocked() error {
	if s.sentinel != "" {
		return s.startSentinelLocked()
	}
	// No RDB snapshots: they fork, and durability is AOF's job.
	args := append(s.processArgs(), "--save", "")
	if s.opts.Persistence {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	}
	if s.opts.ClusterMode {
		args = append(args, "--cluster-enabled", "yes", "--cluster-require-full-coverage", "no",
			"--cluster-port", strconv.Itoa(s.BusPort))
	}
	if t := s.opts.TLS; t != nil {
		args[1] = "0" // no plain port
		args = append(args, "--tls-port", strconv.Itoa(s.Port),
			"--tls-cert-file", t.Server.Cert, "--tls-key-file", t.Server.Key,
			"--tls-ca-cert-file", t.CAFile, "--tls-auth-clients", yesNo(t.Client.Cert != ""))
	}
	if s.aclFile != "" {
		args = append(args, "--aclfile", s.aclFile)
	}
	args = append(args, s.opts.Args...)
	return s.runLocked(args)
}

// runLocked starts the binary with args in the foreground and waits until
// it answers PING. s.mu must be held.
func (s *Server) runLocked(args []string) error {
	// Output written before the logfile is open (bad arguments) lands here.
	// A file, not a pipe: a pipe would make Wait hang on any forked child.
	out, err := os.OpenFile(filepath.Join(s.Dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()

	cmd := exec.Command(s.build.Binary, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childProcAttr()
	if s.opts.FakeTime {
		cmd.Env = s.build.fakeTimeEnvFor(os.Environ(), s.clockFile)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.build.Binary, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait() // the exit status is of no interest: we killed it, or the log says why
		close(exited)
	}()
	s.pid, s.exited, s.paused = cmd.Process.Pid, exited, false

	if err := s.awaitReady(exited); err != nil {
		s.killLocked()
		return err
	}
	return nil
}

// awaitReady polls PING until the node answers, the process exits, or
// readyTimeout passes.
func (s *Server) awaitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		err := s.probe()
		if err == nil {
			// Another process may hold the port: our redis-server then
			// exits with "Address already in use", but the other server
			// answers the PING first.
			if mine, err := s.answeredByUs(); err == nil && !mine {
				return fmt.Errorf("redis-server on port %d: another process's server answers there: %w", s.Port, errPortTaken)
			}
			return nil
		}
		select {
		case <-exited:
			tail := s.logTail()
			if strings.Contains(tail, "Address already in use") {
				return fmt.Errorf("redis-server on port %d: %w", s.Port, errPortTaken)
			}
			return fmt.Errorf("redis-server (pid %d, port %d) exited during start; log tail:\n%s", s.pid, s.Port, tail)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server (pid %d, port %d) did not answer PING within %v (last error: %v); log tail:\n%s",
				s.pid, s.Port, readyTimeout, err, s.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rawConn dials s.Addr for one command, with TLS if the server speaks it.
// It bypasses go-redis, whose dial retries and pool logging would slow and
// clutter the polling.
func (s *Server) rawConn() (net.Conn, error) {
	raw, err := net.DialTimeout("tcp", s.Addr, 500*time.Millisecond)
	if err != nil {
		return nil, err
	}
	conn := raw
	if s.tlsConfig != nil {
		conn = tls.Client(raw, s.tlsConfig)
	}
	if err := conn.SetDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// answeredByUs tells whether the server answering on s.Addr is the
// process we started, by the process_id of its INFO server. A server that
// will not say (one that wants a password) counts as ours: the exit of
// ours, if its port was taken, still shows.
func (s *Server) answeredByUs() (bool, error) {
	conn, err := s.rawConn()
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("INFO server\r\n")); err != nil {
		return false, err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return false, err
	}
	if !strings.HasPrefix(head, "$") {
		return true, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil || n < 0 {
		return false, fmt.Errorf("INFO server answered %q", strings.TrimSpace(head))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return v == strconv.Itoa(s.pid), nil
		}
	}
	return true, nil
}

// probe sends one PING on a fresh connection.
func (s *Server) probe() error {
	conn, err := s.rawConn()
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	// A node still loading its AOF answers -LOADING: not ready yet. One
	// started with --requirepass answers -NOAUTH: it is up.
	if reply != "+PONG\r\n" && !strings.HasPrefix(reply, "-NOAUTH") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(reply))
	}
	return nil
}

// logTail returns the last lines of the node's output and log, for errors.
func (s *Server) logTail() string {
	var b strings.Builder
	for _, name := range []string{"stdout.log", "redis.log"} {
		data, err := os.ReadFile(filepath.Join(s.Dir, name))
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", name, strings.Join(lines, "\n"))
	}
	return b.String()
}

// PID returns the process id of the node's current (or, once it is down, its
// last) redis-server process.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// Build is the server build the node runs.
func (s *Server) Build() ServerBuild {
	return s.build
}

// Running reports whether the process is alive (a paused node is running).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

func (s *Server) runningLocked() bool {
	if s.exited == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL and waits until the process has been reaped. Killing a
// node that is already down is not an error.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

func (s *Server) killLocked() error {
	if !s.runningLocked() {
		return nil
	}
	// The process group holds redis-server and any child it forked (AOF
	// rewrite); SIGKILL ends stopped processes too.
	if err := syscall.Kill(-s.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("redistest: killing redis-server pid %d: %w", s.pid, err)
	}
	<-s.exited
	return nil
}

// Restart kills the node if it runs and starts it again on the same port and
// dir, then waits until it answers PING. With keepData false the data dir is
// wiped first, as if the machine had lost its disk; with keepData true what
// survives depends on Persistence (without it, nothing does: RDB is off).
func (s *Server) Restart(keepData bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.killLocked(); err != nil {
		return err
	}
	if !keepData {
		data := filepath.Join(s.Dir, "data")
		if err := os.RemoveAll(data); err != nil {
			return fmt.Errorf("redistest: wiping %s: %w", data, err)
		}
		if err := os.Mkdir(data, 0o755); err != nil {
			return fmt.Errorf("redistest: recreating %s: %w", data, err)
		}
	}
	if err := s.startLocked(); err != nil {
		return fmt.Errorf("redistest: restarting %s: %w", s.Addr, err)
	}
	return nil
}

// Pause stops the node with SIGSTOP: connections stay open but nothing is
// answered, like a long GC pause or a frozen VM.
func (s *Server) Pause() error {
	return s.signal(syscall.SIGSTOP)
}

// Resume continues a paused node with SIGCONT. Resuming a running node that
// is not paused does nothing.
func (s *Server) Resume() error {
	return s.signal(syscall.SIGCONT)
}

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return fmt.Errorf("redistest: %v to %s: node is not running", sig, s.Addr)
	}
	if err := syscall.Kill(-s.pid, sig); err != nil {
		return fmt.Errorf("redistest: %v to redis-server pid %d: %w", sig, s.pid, err)
	}
	s.paused = sig == syscall.SIGSTOP
	return nil
}

// Client returns the node's go-redis client. It reconnects by itself after a
// restart; Cluster.Stop closes it. It shows faults rather than hiding them:
// it honours context deadlines (a paused node fails at the caller's deadline,
// not after ReadTimeout), dials once and does not retry commands. Build your
// own client from Addr for other settings.
func (s *Server) Client() *redis.Client {
	return s.client
}

func newClient(addr string, tlsConfig *tls.Config) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		TLSConfig:             tlsConfig,
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
		MaxRetries:            -1,
		DisableIdentity:       true,
	})
}

// helperTLSConfig is the TLS configuration of the helper's own client and
// probe: it presents the client certificate, if any, and trusts any server
// certificate, since tests give nodes expired or misnamed ones on purpose.
func helperTLSConfig(t *TLS) (*tls.Config, error) {
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}
	if t.Client.Cert != "" {
		pair, err := tls.LoadX509KeyPair(t.Client.Cert, t.Client.Key)
		if err != nil {
			return nil, fmt.Errorf("redistest: TLS client certificate %s: %w", t.Client.Cert, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
