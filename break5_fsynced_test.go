package redlock_test

// Fifth-round adversarial tests of FsyncedVotes (docs/PROTOCOL.md §13),
// written on the branch break5 against 1770331. Each names the schedule it
// drives and the promise it holds the code to.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// PROTOCOL §13, rule 3: the probe that would count a server as persistent
// writes a barrier key and waits for WAITAOF 1 0 behind it, "read around as
// a vote is: INFO persistence before the INCR and after the WAITAOF"; and
// "Such a node then needs no restart grace after kill -9 ... and restart".
//
// Since 1770331 rewriteStarted (durable.go) also reads
// total_commands_processed, which is in INFO stats, not in INFO
// persistence; the votes now read "INFO persistence stats", but
// fsyncBarrier (probe.go) still reads "INFO persistence" alone. rewriteMarks
// then fails ("INFO persistence stats has no ... total_commands_processed"),
// rewriteStarted returns an error, every barrier fails, and no server is
// ever persistent through WAITAOF: FsyncedVotes does nothing, and every
// power-loss test that asks Y to excuse a restart passes vacuously (Y sits
// the grace out).
//
// Schedule: three fresh Redis 8.6 servers, appendonly yes, appendfsync
// everysec; Y (FsyncedVotes) meets them: every node must vote at once
// (persistent). X takes a lock, every server is killed with SIGKILL and
// restarted on its data; Y must be refused X's lock by the nodes (ErrLocked)
// and take another lock at once, with no node sitting out.
//
// Run: go test -race -count=1 -run TestBreak5BarrierReadsTheCommandCount .
func TestBreak5BarrierReadsTheCommandCount(t *testing.T) {
	inTheServerMatrix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	cl := redistest.StartT(t, 3, redistest.Options{Server: redistest.Redis86, Args: everysec})
	y := newClient(t, cl, fsyncedOptions())
	for i, info := range y.Nodes(ctx) {
		if info.Err != nil {
			t.Fatalf("Y, node %d: %v", i, info.Err)
		}
		if !info.Voting {
			t.Errorf("BROKEN: Y, node %d (fresh, everysec, Redis 8.6, FsyncedVotes) sits out: %s; want it persistent through the barrier", i, info.SitOutReason)
		}
	}
	if t.Failed() {
		return
	}
	x := newClient(t, cl, fsyncedOptions())
	const name = "job"
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("X: %v", err)
	}
	killAll(t, cl.Servers)
	restartAll(t, cl.Servers)
	_, errSame := y.TryAcquire(ctx, name)
	other, errOther := y.TryAcquire(ctx, "another")
	if errSame == nil {
		t.Errorf("BROKEN: Y took %q within X's validity", name)
	} else if !errors.Is(errSame, redlock.ErrLocked) || errors.Is(errSame, redlock.ErrNodeSittingOut) {
		t.Errorf("BROKEN: Y on %q: %v; want ErrLocked from the nodes that kept X's fsynced key, none sitting out", name, errSame)
	}
	if errOther != nil {
		t.Errorf("BROKEN: Y on another lock after the kill -9: %v; want it taken at once (persistent nodes sit out no grace)", errOther)
	} else {
		_ = other.Release(ctx)
	}
	_ = held.Release(ctx)
}

// monitorTrace is MONITOR on one server, over a raw connection, until a
// marker ECHO comes back through it.
type monitorTrace struct {
	s     *redistest.Server
	conn  net.Conn
	lines chan string
}

func startMonitor(t *testing.T, s *redistest.Server) *monitorTrace {
	t.Helper()
	conn, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReaderSize(conn, 1<<20)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR on %s: %q %v", s.Addr, line, err)
	}
	m := &monitorTrace{s: s, conn: conn, lines: make(chan string, 1<<16)}
	go func() {
		defer close(m.lines)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			m.lines <- strings.TrimSuffix(strings.TrimPrefix(line, "+"), "\r\n")
		}
	}()
	return m
}

var monitorLine = regexp.MustCompile(`^\S+ \[\d+ ([^\]]+)\] "([^"]*)"(.*)$`)

// writesWithoutWAITAOF reads the trace up to the marker and returns, per
// connection, the script calls that wrote (a write command inside the
// script, on any key but the TTL register) and that no WAITAOF on the
// same connection followed before that connection's next INFO (the start
// of its next write) or the end of the trace.
func (m *monitorTrace) writesWithoutWAITAOF(ctx context.Context, t *testing.T, marker string) (bad []string, votes, waits int) {
	t.Helper()
	if err := m.s.Client().Echo(ctx, marker).Err(); err != nil {
		t.Fatal(err)
	}
	writes := map[string]bool{"set": true, "pexpire": true, "pexpireat": true, "zadd": true, "hset": true, "del": true, "incr": true,
		"zrem": true, "zremrangebyscore": true, "hdel": true, "expire": true, "unlink": true, "incrby": true}
	pending := map[string][]string{}
	var scriptConn, scriptCall string
	wrote := false
	flush := func() {
		if scriptConn != "" && wrote {
			pending[scriptConn] = append(pending[scriptConn], scriptCall)
			votes++
		}
		scriptConn, wrote = "", false
	}
	for {
		var line string
		var ok bool
		select {
		case line, ok = <-m.lines:
		case <-ctx.Done():
			t.Fatalf("%s: MONITOR never showed the marker", m.s.Addr)
		}
		if !ok {
			t.Fatalf("%s: MONITOR ended before the marker", m.s.Addr)
		}
		f := monitorLine.FindStringSubmatch(line)
		if f == nil {
			continue
		}
		src, cmd, rest := f[1], strings.ToLower(f[2]), f[3]
		if src == "lua" {
			if writes[cmd] && !strings.Contains(rest, "ttl-in-use") {
				wrote = true
			}
			continue
		}
		flush()
		switch cmd {
		case "echo":
			if strings.Contains(rest, marker) {
				for c, calls := range pending {
					bad = append(bad, fmt.Sprintf("%s on %s: %d script writes with no WAITAOF after them, first %.120s", m.s.Addr, c, len(calls), calls[0]))
				}
				return bad, votes, waits
			}
		case "eval", "evalsha", "fcall":
			scriptConn, scriptCall = src, line
		case "waitaof":
			waits++
			delete(pending, src)
		case "info":
			if calls := pending[src]; len(calls) > 0 {
				bad = append(bad, fmt.Sprintf("%s on %s: %d script writes, then a new write with no WAITAOF between, first %.120s", m.s.Addr, src, len(calls), calls[0]))
				delete(pending, src)
			}
		}
	}
}

// PROTOCOL §13 rule 1: "Every write a vote relies on goes through the
// node's pipe, which sends after it, on the same connection, WAITAOF"; the
// brief's question: with Options.Lanes > 1 each lane has a connection of
// its own, a multi-lock is many calls batched per lane, extends go on the
// renewal pipe. Does every script write of a vote (acquire, multi-lock,
// extend) have a WAITAOF behind it on its own connection (WAITAOF covers
// only what its own connection wrote: c->woff)? MONITOR on each server
// shows every command with its connection; the test takes a 6-lock
// multi-lock and 16 concurrent locks with 4 lanes, extends them all, and
// fails for any script write not followed by a WAITAOF on its connection.
//
// Run: go test -race -count=1 -run TestBreak5EveryLaneWaitsOnItsOwnConnection .
func TestBreak5EveryLaneWaitsOnItsOwnConnection(t *testing.T) {
	inTheServerMatrix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	cl := redistest.StartT(t, 3, redistest.Options{Server: redistest.Redis86, Args: everysec})
	mons := make([]*monitorTrace, len(cl.Servers))
	for i, s := range cl.Servers {
		mons[i] = startMonitor(t, s)
	}
	opts := fsyncedOptions()
	opts.Lanes = 4
	opts.RestartGrace = redlock.NoRestartGrace // fresh nodes: this test is about the votes, not the grace
	// Room for the queue: with 3s, calls queued behind a write that waits
	// for its fsync miss theirs (TestBreak5QueuedVotesMissTheirFsync).
	opts.NodeTimeout = 8 * time.Second
	x := newClient(t, cl, opts)
	names := make([]string, 6)
	for i := range names {
		names[i] = fmt.Sprintf("multi-%d", i)
	}
	ml, err := x.TryAcquireMulti(ctx, names)
	if err != nil {
		t.Fatalf("multi-lock: %v", err)
	}
	locks := make([]*redlock.Lock, 16)
	errs := make(chan error, len(locks))
	for i := range locks {
		go func() {
			l, err := x.TryAcquire(ctx, fmt.Sprintf("solo-%d", i))
			if err == nil {
				locks[i] = l
				err = l.Extend(ctx)
			}
			errs <- err
		}()
	}
	for range locks {
		if err := <-errs; err != nil {
			t.Fatalf("solo lock: %v", err)
		}
	}
	if err := ml.Extend(ctx); err != nil {
		t.Fatalf("multi-lock extend: %v", err)
	}
	total := 0
	for _, m := range mons {
		bad, votes, waits := m.writesWithoutWAITAOF(ctx, t, "break5-end")
		t.Logf("%s: %d script writes, %d WAITAOF", m.s.Addr, votes, waits)
		total += votes
		for _, b := range bad {
			t.Errorf("BROKEN: %s", b)
		}
	}
	if total == 0 {
		t.Fatal("MONITOR showed no script write: the trace proves nothing")
	}
	_ = ml.Release(ctx)
	for _, l := range locks {
		_ = l.Release(ctx)
	}
}
