package redlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
	"github.com/redis/go-redis/v9"
)

// goRedisLines is a go-redis logger that keeps its lines.
type goRedisLines struct {
	mu    sync.Mutex
	lines []string
}

func (g *goRedisLines) Printf(_ context.Context, format string, v ...any) {
	g.mu.Lock()
	g.lines = append(g.lines, fmt.Sprintf(format, v...))
	g.mu.Unlock()
}

// naming gives the lines that name addr.
func naming(lines []string, addr string) []string {
	var out []string
	for _, l := range lines {
		if strings.Contains(l, addr+":") || strings.Contains(l, addr+" ") || strings.HasSuffix(l, addr) || strings.Contains(l, addr+`"`) {
			out = append(out, l)
		}
	}
	return out
}

func (g *goRedisLines) naming(addr string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return naming(g.lines, addr)
}

// go-redis' lines about the servers of clients NewFromURLs built reach the
// client's Options.Logger: also the servers they found rather than were
// given (a Cluster's master that the URL does not name, the master a
// Sentinel names). The lines of a go-redis client the program built itself
// stay with the program's go-redis logger, even about an address the
// library's client uses too.
func TestGoRedisLinesGoToTheLoggerOfTheClientTheyAreAbout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	others := &goRedisLines{}
	redlock.SetGoRedisLogger(others)
	t.Cleanup(func() { redlock.SetGoRedisLogger(quietLogger{}) })

	rc, ss := redistest.StartDeploymentsT(t, ctx, 0)
	seed, found := rc.Shards[0].Master, rc.Shards[1].Master // the URL names only the first
	sentinelURL := "redis+sentinel://" + ss.SentinelAddrs()[0] + "?master_name=" + ss.Name
	shared := refusedAddr(t) // down: the library's client and the program's own both dial it
	log := &recordingHandler{}
	c, err := redlock.NewFromURLs([]string{"redis+cluster://" + seed.Addr, sentinelURL, "redis://" + shared},
		redlock.Options{TTL: time.Second, RestartGrace: redlock.NoRestartGrace, AllowFailoverNodes: true, Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	own := redis.NewClient(&redis.Options{Addr: shared, DialerRetries: 1, MaxRetries: -1})
	defer own.Close()

	// A lock in the slots of the master the URL does not name.
	var name string
	for _, r := range [][2]int{{0, 8191}, {8192, 16383}} {
		n := nameInSlots(c, "job", r[0], r[1])
		if m, err := rc.MasterFor(ctx, c.Keys(n).Slot); err != nil {
			t.Fatal(err)
		} else if m == found {
			name = n
		}
	}
	if name == "" {
		t.Fatalf("%s serves neither half of the slots", found.Addr)
	}
	// Stop that master and the Sentinel's master (Sentinel names it until
	// it fails over), then make the client dial them: the lock, and Nodes.
	master := ss.Master
	for _, s := range []*redistest.Server{found, master} {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	// Until every line awaited came, however many attempts that takes.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _ = c.TryAcquire(ctx, name)
		_ = c.Nodes(ctx)
		_ = own.Ping(ctx).Err()
		lines := log.lines()
		var missing []string
		for _, addr := range []string{found.Addr, master.Addr, shared} {
			if len(naming(lines, addr)) == 0 {
				missing = append(missing, addr)
			}
		}
		if len(missing) == 0 && len(others.naming(shared)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, no go-redis line in the client's Logger about %v (the Cluster master found %s, the Sentinel master %s, the shared %s); the go-redis logger got %q",
				missing, found.Addr, master.Addr, shared, append(others.naming(found.Addr), others.naming(master.Addr)...))
		}
		time.Sleep(20 * time.Millisecond) // paces the polling: the dials fail at once
	}
	for _, addr := range []string{found.Addr, master.Addr} {
		if lines := others.naming(addr); len(lines) > 0 {
			t.Errorf("go-redis' lines about %s, a server of the library's client, went to the go-redis logger: %q", addr, lines)
		}
	}
	// The program's own client's failed dial is the program's: the
	// library's client gets its own (one, held back since), not this one too.
	if lines := others.naming(shared); !strings.Contains(strings.Join(lines, "\n"), "failed to dial") {
		t.Errorf("the program's own client's failed dial of %s did not reach its go-redis logger: %q", shared, lines)
	}
	if lines := naming(log.lines(), shared); len(lines) != 1 {
		t.Errorf("want the library's client's failed dial of %s told once in its Logger (the program's own client's lines are not its), got %q", shared, lines)
	}
}
