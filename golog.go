package redlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// go-redis logs through one process-wide logger (redis.SetLogger), by
// default to stderr, and it has no logger per client. A node that is down
// then prints a line for every dial of every pipe and retry: dozens a
// second, from clients the library built and owns, in a program that asked
// for its log in Options.Logger.
//
// What go-redis does have per client is the Dialer. NewFromURLs gives each
// client it builds (a server's, a Cluster's, a Sentinel master's) a Dialer
// that notes every address the client dials (the Cluster's other masters
// and replicas, the master and the Sentinels that a Sentinel client finds,
// not only the URLs' addresses) and marks the dial errors it returns with
// the client (dialFailure: the same text, the same errors.Is/As). One
// go-redis logger, installed once per process at the first NewFromURLs,
// then sends each line to the Logger of the library's client it is about,
// at Warn, the same line at most once per goRedisRepeat and node, with how
// many were held back:
//   - a line that carries a marked dial error goes to the client that made
//     it ("failed to dial", a Sentinel that could not be reached): exactly,
//     whoever else uses the address;
//   - a line that carries a dial error without a mark is from a client the
//     program built itself: it is not taken, whatever address it names;
//   - any other line that names an address a live client of the library
//     dialled or was given (go-redis' Sentinel and Cluster notices) goes to
//     that client.
// Every other line goes where go-redis' own default logger sends it
// (stderr), or to the logger given to SetGoRedisLogger.
//
// The router is installed once and never again: a program that calls
// redis.SetLogger after that replaces it (and gets every line). go-redis
// offers no way to read the logger in place, so one that set its own
// logger before the first NewFromURLs would lose it: such a program gives
// it to SetGoRedisLogger instead, which keeps it for every line that is not
// routed to a client's Logger.

// goRedisRepeat is how long the same go-redis line about one node is held
// back after it was logged once.
const goRedisRepeat = 10 * time.Second

var goRedisLog = struct {
	once   sync.Once
	mu     sync.Mutex
	routes map[string][]*logRoute // a node's address -> the live clients that use it
	other  goRedisLogger          // the lines routed to no client
}{routes: map[string][]*logRoute{}, other: stderrLogger{log.New(os.Stderr, "redis: ", log.LstdFlags)}}

// goRedisLogger is go-redis' logging interface, as redis.SetLogger takes it.
type goRedisLogger interface {
	Printf(ctx context.Context, format string, v ...any)
}

// SetGoRedisLogger is redis.SetLogger for a program that uses NewFromURLs:
// l gets every go-redis line that is not about a node of a live client
// built by NewFromURLs (those go to that client's Options.Logger). Calling
// redis.SetLogger instead would take those lines too, or, before the first
// NewFromURLs, be replaced by it.
func SetGoRedisLogger(l interface {
	Printf(ctx context.Context, format string, v ...any)
}) {
	goRedisLog.mu.Lock()
	goRedisLog.other = l
	goRedisLog.mu.Unlock()
	goRedisLog.once.Do(func() {})
	redis.SetLogger(goRedisRouter{})
}

// stderrLogger writes as go-redis' default logger does.
type stderrLogger struct{ l *log.Logger }

func (s stderrLogger) Printf(_ context.Context, format string, v ...any) { s.l.Printf(format, v...) }

// logRoute is one client's share of go-redis' log.
type logRoute struct {
	logger *slog.Logger
	mu     sync.Mutex
	seen   map[string]*lineSeen // node address + line -> when it was last logged
	now    func() time.Time

	// Under goRedisLog.mu:
	addrs  map[string]bool // the addresses it is routed in goRedisLog.routes
	closed bool            // the client was closed: its lines go back to the others
}

type lineSeen struct {
	at   time.Time
	held int // lines held back since
}

// newLogRoute routes go-redis' lines about the clients built with its
// dialer (see dialer) to logger, until close; it installs the router at
// the first call.
func newLogRoute(logger *slog.Logger, now func() time.Time) *logRoute {
	goRedisLog.once.Do(func() { redis.SetLogger(goRedisRouter{}) })
	return &logRoute{logger: logger, seen: map[string]*lineSeen{}, now: now, addrs: map[string]bool{}}
}

// watch routes the lines that name addr to r.
func (r *logRoute) watch(addrs ...string) {
	goRedisLog.mu.Lock()
	defer goRedisLog.mu.Unlock()
	for _, a := range addrs {
		if r.closed || r.addrs[a] {
			continue
		}
		r.addrs[a] = true
		goRedisLog.routes[a] = append(goRedisLog.routes[a], r)
	}
}

// close ends the routing (Close of the client).
func (r *logRoute) close() {
	goRedisLog.mu.Lock()
	defer goRedisLog.mu.Unlock()
	r.closed = true
	for a := range r.addrs {
		rs := goRedisLog.routes[a]
		for i, x := range rs {
			if x == r {
				rs = append(rs[:i:i], rs[i+1:]...)
				break
			}
		}
		if len(rs) == 0 {
			delete(goRedisLog.routes, a)
		} else {
			goRedisLog.routes[a] = rs
		}
	}
	clear(r.addrs)
}

// dialFunc is go-redis' Dialer.
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// dialer wraps the dialer of a client that the library builds: every
// address it dials is watched, and its errors are marked as the client's.
func (r *logRoute) dialer(base dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		r.watch(addr)
		conn, err := base(ctx, network, addr)
		if err != nil {
			return nil, &dialFailure{err: err, route: r, addr: addr}
		}
		return conn, nil
	}
}

// baseDialer is what go-redis dials with when no Dialer is set
// (redis.NewDialer), for the dial timeout and TLS settings given.
func baseDialer(timeout time.Duration, cfg *tls.Config) dialFunc {
	if timeout == 0 {
		timeout = 5 * time.Second // go-redis' default
	}
	return redis.NewDialer(&redis.Options{DialTimeout: timeout, TLSConfig: cfg})
}

// dialFailure is a dial error of a client the library built, marked with
// the client's route so that go-redis' line about it reaches that client's
// Logger. It reads and matches as the error it wraps.
type dialFailure struct {
	err   error
	route *logRoute
	addr  string
}

func (e *dialFailure) Error() string { return e.err.Error() }
func (e *dialFailure) Unwrap() error { return e.err }

// Timeout and Temporary keep the wrapped error a net.Error for go-redis,
// which asks with type assertions, not errors.As, whether to retry.
func (e *dialFailure) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.err, &t) && t.Timeout()
}

func (e *dialFailure) Temporary() bool {
	var t interface{ Temporary() bool }
	return errors.As(e.err, &t) && t.Temporary()
}

// goRedisRouter is the go-redis logger that newLogRoute installs.
type goRedisRouter struct{}

// Printf implements go-redis' logging interface.
func (goRedisRouter) Printf(ctx context.Context, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	goRedisLog.mu.Lock()
	other := goRedisLog.other
	route, addr, ours := byDialError(args)
	if route != nil && route.closed {
		route = nil
	}
	var routes []*logRoute
	switch {
	case route != nil:
		routes = []*logRoute{route}
	case ours:
		// A dial error, not marked: a client the program built.
	default:
		for a, rs := range goRedisLog.routes {
			// The longest address that the line names: "host:6379" must not
			// take the lines of "host:63790".
			if len(a) > len(addr) && namesAddr(line, a) {
				addr, routes = a, append(routes[:0], rs...)
			}
		}
	}
	goRedisLog.mu.Unlock()
	if routes == nil {
		other.Printf(ctx, "%s", line)
		return
	}
	for _, r := range routes {
		r.log(ctx, addr, line)
	}
}

// byDialError finds, among a line's arguments, a dial error: the route of
// the client that made it if it is marked (and the address it dialled),
// and whether there is an unmarked one.
func byDialError(args []any) (route *logRoute, addr string, unmarked bool) {
	for _, a := range args {
		err, ok := a.(error)
		if !ok {
			continue
		}
		var df *dialFailure
		if errors.As(err, &df) {
			return df.route, df.addr, false
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			unmarked = true
		}
	}
	return nil, "", unmarked
}

// namesAddr tells whether line names the address a, not a longer one that
// starts with it.
func namesAddr(line, a string) bool {
	for i := 0; ; {
		j := strings.Index(line[i:], a)
		if j < 0 {
			return false
		}
		end := i + j + len(a)
		if end == len(line) || line[end] < '0' || line[end] > '9' {
			return true
		}
		i = end
	}
}

// log writes line about the node at addr, unless the same line was logged
// less than goRedisRepeat ago.
func (r *logRoute) log(ctx context.Context, addr, line string) {
	now := r.now()
	key := addr + "\x00" + line
	r.mu.Lock()
	s := r.seen[key]
	if s != nil && now.Sub(s.at) < goRedisRepeat {
		s.held++
		r.mu.Unlock()
		return
	}
	held := 0
	if s != nil {
		held = s.held
	}
	if len(r.seen) > 1000 { // bounded: lines that name changing things must not grow it for ever
		clear(r.seen)
	}
	r.seen[key] = &lineSeen{at: now}
	r.mu.Unlock()
	attrs := []any{"from", "go-redis", "node", addr, "line", strings.TrimPrefix(line, "redis: ")}
	if held > 0 {
		attrs = append(attrs, "held_back", held) // the same line, since it was last logged
	}
	r.logger.WarnContext(ctx, "redlock: go-redis", attrs...)
}
