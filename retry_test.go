package redlock_test

// Calls that run twice on a node: go-redis sends a command again on a new
// connection when the first one broke before its reply came back (its
// default retries), so a script may run a second time, after its first
// run's effects. The second run's answer must be as good as the first's.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// skewedClock is the system clock moved by d.
type skewedClock struct{ d time.Duration }

func (s skewedClock) Now() time.Time { return time.Now().Add(s.d) }

// awaitKey returns a function that waits until s holds key: the lost
// command ran there.
func awaitKey(t *testing.T, ctx context.Context, s *redistest.Server, key string) func() {
	return func() {
		err := redistest.Await(ctx, "the command ran on "+s.Addr, 10*time.Second, func(ctx context.Context) (bool, error) {
			n, err := s.Client().Exists(ctx, key).Result()
			return n == 1, err
		})
		if err != nil {
			t.Error(err)
		}
	}
}

// A fair take whose reply was lost runs a second time. The first run
// claimed the key and raised the fence register; the second finds the
// grant pinned by this same round, a round the caller has not seen fail.
// Its answer must still carry the fence register in the slot where the
// caller reads the value before the take, or the caller draws a token that
// need not exceed an earlier holder's: here the earlier holder's clock ran
// an hour ahead, so its token is above this client's time-based proposal.
func TestFairTakeRetriedAfterALostReplyDrawsATokenAboveTheLastHolders(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "job"
	ahead := newClient(t, cl, redlock.Options{TTL: 5 * time.Second, Clock: skewedClock{time.Hour}})
	prev, err := ahead.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := prev.Release(ctx); err != nil {
		t.Fatal(err)
	}

	var loss replyLoss
	rdb := loss.client(cl.Servers[0].Addr)
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClientOn(t, []redis.UniversalClient{rdb}, redlock.Options{TTL: 5 * time.Second, RestartGrace: redlock.NoRestartGrace, AllowNoFaultTolerance: true})
	if err := c.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	// A warm-up take: a node that was never asked to load the scripts
	// (this process learnt their SHAs from another) answers the first
	// EVALSHA with NOSCRIPT, and the take runs by EVAL after that.
	warm, err := c.TryAcquire(ctx, "warm-up", redlock.WithFairness())
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lost := loss.arm("take", awaitKey(t, ctx, cl.Servers[0], c.Keys(name).Lock))
	l, err := c.TryAcquire(ctx, name, redlock.WithFairness())
	if err != nil {
		t.Fatalf("the retried take: %v", err)
	}
	defer l.Release(context.Background())
	select {
	case <-lost:
	default:
		t.Fatal("the take's reply was not lost: the schedule did not run")
	}
	if l.Token() <= prev.Token() {
		t.Fatalf("the retried take drew token %d, not above the last holder's %d", l.Token(), prev.Token())
	}
}

// stallProxy forwards TCP between a replica and its master. Stall stops
// the master's stream to the replica while both connections stay open:
// the master still lists the replica as connected, and the replica still
// acknowledges the offset it had reached (REPLCONF ACK), so a WAIT for it
// blocks, and what the master writes from then on never reaches it (a
// paused replica would get it from its socket buffer once resumed).
type stallProxy struct {
	ln      net.Listener
	target  string
	stalled atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
	wg      sync.WaitGroup
}

func startStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *stallProxy) serve() {
	defer p.wg.Done()
	for {
		replica, err := p.ln.Accept()
		if err != nil {
			return
		}
		master, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = replica.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, replica, master)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(master, replica)
		}()
		go func() {
			defer p.wg.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := master.Read(buf)
				if n > 0 && !p.stalled.Load() {
					if _, werr := replica.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func (p *stallProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Schedule 6 of issue 25: a vote script that answers yes must write, or
// the WAIT behind it proves nothing. One node, a master M with one
// replica R, durable votes, fencing off (with fencing, the acquire rewrites
// the fence register and writes anyway), and a go-redis client with its
// default retries. R acknowledged every earlier write, then stalls (M
// still lists it). An acquire's script runs on M, and its connection
// breaks before the reply. go-redis sends [script, WAIT, ...] again on a
// new connection: the script finds its own owner value. From Redis 7.2,
// and on Valkey, a connection's WAIT waits for that connection's last
// write only: if the second run writes nothing, the WAIT is answered at
// once by R's earlier acknowledgements, and the vote counts although R,
// which may be promoted, lacks the key.
//
// Redis 7.0 moves a connection's WAIT offset after every command, so the
// second WAIT blocks there whatever the script does: on 7.0 this test
// passes without the fix. It is meant for Redis 8.6 and Valkey 9.1
// (REDLOCK_TEST_SERVER, or their bin directory first in PATH).
func TestRetriedDurableAcquireWaitsForItsOwnWrite(t *testing.T) {
	m := redistest.StartT(t, 1, redistest.Options{}).Servers[0]
	proxy := startStallProxy(t, m.Addr)
	r := redistest.StartT(t, 1, redistest.Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(proxy.port())}}).Servers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := redistest.RestoreReplication(ctx, r); err != nil { // awaits the sync
		t.Fatal(err)
	}

	var loss replyLoss
	rdb := loss.client(m.Addr)
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redlock.New([]redis.UniversalClient{rdb}, redlock.Options{TTL: 10 * time.Second, NodeTimeout: 2 * time.Second, AllowNoFaultTolerance: true,
		RestartGrace: redlock.NoRestartGrace, DurableVotes: true, DisableFencing: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// Meets M with R connected, and runs the scripts once: the first
	// EVALSHA of a node that was never asked to load them is a NOSCRIPT.
	takeAndRelease(t, ctx, c.TryAcquire, "warm-up")
	if err := redistest.Await(ctx, "R acknowledged every write", 10*time.Second, func(ctx context.Context) (bool, error) {
		n, err := r.Client().Exists(ctx, c.Keys("warm-up").Lock).Result()
		return err == nil && n == 0, err
	}); err != nil {
		t.Fatal(err)
	}
	proxy.stalled.Store(true)

	const name = "job"
	lost := loss.arm("wait", awaitKey(t, ctx, m, c.Keys(name).Lock))
	l, err := c.TryAcquire(ctx, name)
	select {
	case <-lost:
	default:
		t.Fatalf("the acquire's reply was not lost: the schedule did not run (acquire: %v)", err)
	}
	if err != nil {
		if !errors.Is(err, redlock.ErrVoteNotDurable) {
			t.Fatalf("R stalled: want ErrVoteNotDurable, got %v", err)
		}
		return
	}
	defer l.Release(context.Background())
	n, err := r.Client().Exists(ctx, c.Keys(name).Lock).Result()
	t.Fatalf("the retried acquire's vote counted although R, which stalled, holds %d copies of its key (%v): a promotion of R gives the lock to a second client", n, err)
}

// replyLoss loses the reply to one command of a go-redis client: the
// server runs it, then the client's connection breaks before the reply is
// read, and go-redis sends the command again on a new connection (its
// default retries, which a client handed to redlock.New keeps), as after a
// network fault between the two.
type replyLoss struct {
	mu     sync.Mutex
	marker []byte // a write that holds it loses its reply; nil: disarmed
	before func() // awaits the command's effect on the server, before the loss
	lost   chan struct{}
}

// arm makes the next write that holds the RESP argument arg (a command's
// name or one of its arguments, framed as go-redis writes it: a script's
// source that mentions the word does not match) lose its reply, once
// before returns. lost is closed then.
func (l *replyLoss) arm(arg string, before func()) (lost <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.marker = []byte("$" + strconv.Itoa(len(arg)) + "\r\n" + arg + "\r\n")
	l.before = before
	l.lost = make(chan struct{})
	return l.lost
}

// take disarms l and returns its before and lost if b holds the marker.
func (l *replyLoss) take(b []byte) (func(), chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.marker == nil || !bytes.Contains(b, l.marker) {
		return nil, nil
	}
	l.marker = nil
	return l.before, l.lost
}

// dial is a redis.Options.Dialer.
func (l *replyLoss) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &lossyConn{Conn: conn, l: l}, nil
}

// client is a go-redis client of addr whose replies l can lose.
func (l *replyLoss) client(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Dialer: l.dial, ContextTimeoutEnabled: true, DisableIdentity: true})
}

type lossyConn struct {
	net.Conn
	l      *replyLoss
	before func()
	lost   chan struct{}
}

func (c *lossyConn) Write(b []byte) (int, error) {
	if before, lost := c.l.take(b); before != nil {
		c.before, c.lost = before, lost
	}
	return c.Conn.Write(b)
}

func (c *lossyConn) Read(b []byte) (int, error) {
	if c.before != nil {
		c.before()
		c.before = nil
		_ = c.Conn.Close()
		close(c.lost)
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}
