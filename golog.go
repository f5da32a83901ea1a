package redlock

import (
	"context"
	"fmt"
	"log"
	"log/slog"
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
// for its log in Options.Logger. NewFromURLs therefore installs, once per
// process, a go-redis logger that sends each line that names the address of
// a node of a live client built by NewFromURLs to that client's Logger (at
// Warn, the same line at most once per goRedisRepeat and node, with how
// many were held back), and every other line to stderr, as go-redis' own
// default logger does.
//
// It is installed once, at the first NewFromURLs, and never again: a
// program that calls redis.SetLogger after that keeps its own logger (and
// gets every line). go-redis offers no way to read the logger in place, so
// one that set its own logger before would lose it: such a program gives
// it to SetGoRedisLogger instead, which keeps it for every line that is not
// routed to a client's Logger.

// goRedisRepeat is how long the same go-redis line about one node is held
// back after it was logged once.
const goRedisRepeat = 10 * time.Second

var goRedisLog = struct {
	once   sync.Once
	mu     sync.Mutex
	routes map[string][]*logRoute // a node's address -> the live clients that use it
	other  GoRedisLogger          // the lines routed to no client
}{routes: map[string][]*logRoute{}, other: stderrLogger{log.New(os.Stderr, "redis: ", log.LstdFlags)}}

// GoRedisLogger is go-redis' logging interface, as redis.SetLogger takes it.
type GoRedisLogger interface {
	Printf(ctx context.Context, format string, v ...any)
}

// SetGoRedisLogger is redis.SetLogger for a program that uses NewFromURLs:
// l gets every go-redis line that is not about a node of a live client
// built by NewFromURLs (those go to that client's Options.Logger). Calling
// redis.SetLogger instead would take those lines too, or, before the first
// NewFromURLs, be replaced by it.
func SetGoRedisLogger(l GoRedisLogger) {
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
}

type lineSeen struct {
	at   time.Time
	held int // lines held back since
}

// routeGoRedisLog sends go-redis' lines about addrs to logger until the
// returned function is called (Close).
func routeGoRedisLog(addrs []string, logger *slog.Logger, now func() time.Time) func() {
	goRedisLog.once.Do(func() { redis.SetLogger(goRedisRouter{}) })
	r := &logRoute{logger: logger, seen: map[string]*lineSeen{}, now: now}
	goRedisLog.mu.Lock()
	for _, a := range addrs {
		goRedisLog.routes[a] = append(goRedisLog.routes[a], r)
	}
	goRedisLog.mu.Unlock()
	return func() {
		goRedisLog.mu.Lock()
		defer goRedisLog.mu.Unlock()
		for _, a := range addrs {
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
	}
}

// goRedisRouter is the go-redis logger that routeGoRedisLog installs.
type goRedisRouter struct{}

// Printf implements go-redis' logging interface.
func (goRedisRouter) Printf(ctx context.Context, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	var addr string
	var routes []*logRoute
	goRedisLog.mu.Lock()
	other := goRedisLog.other
	for a, rs := range goRedisLog.routes {
		// The longest address that the line names: "host:6379" must not
		// take the lines of "host:63790".
		if len(a) > len(addr) && namesAddr(line, a) {
			addr, routes = a, append(routes[:0], rs...)
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
