package redlock_test

// Adversarial tests of FsyncedVotes (docs/PROTOCOL.md §13), written on the
// branch breakaof for the author of waitaof to run. Each names the
// schedule it drives and the promise it holds the code to.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// aofTrace is strace attached to one server: every write(2) and fsync of
// its threads, in the order the kernel saw them, into a file.
type aofTrace struct {
	s     *redistest.Server
	cmd   *exec.Cmd
	out   string // strace's log
	aofFD string // the fd of the server's open incremental AOF file
	aof   string // its path
}

// inTheServerMatrix skips t in make test (no REDLOCK_TEST_SERVER): the
// FsyncedVotes review and power-loss tests mostly wait for everysec
// fsyncs, minutes in all, and make test must stay under 25 minutes; they
// run in the server matrix of .ci/run (make test-matrix-root), each in the
// run of the server it pins or selects. make test keeps FsyncedVotes'
// own tests (fsynced_votes_test.go, fsynced_rule_test.go).
func inTheServerMatrix(t *testing.T) {
	t.Helper()
	if os.Getenv(redistest.ServerEnv) == "" {
		t.Skipf("SKIPPED in make test: a FsyncedVotes review or power-loss test, slow (it waits for fsyncs); it runs in the server matrix (%s set: make test-matrix-root, in .ci/run)", redistest.ServerEnv)
	}
}

// traceAOF attaches strace to s and returns once strace says it is
// attached to every thread of the server. It fails the test when strace
// is missing or may not attach (ptrace refused): tools/install-deps.sh
// installs it, and a power-loss test that cannot see the fsyncs checks
// nothing.
func traceAOF(t *testing.T, s *redistest.Server) *aofTrace {
	t.Helper()
	if _, err := exec.LookPath("strace"); err != nil {
		t.Fatalf("needs strace to see the server's fsyncs (tools/install-deps.sh installs it): %v", err)
	}
	pid := s.PID()
	tr := &aofTrace{s: s, out: filepath.Join(t.TempDir(), fmt.Sprintf("strace.%d", pid))}
	tr.aofFD, tr.aof = openIncr(t, s)
	tr.cmd = exec.Command("strace", "-f", "-s", "8192", "-e", "trace=write,fdatasync,fsync", "-p", strconv.Itoa(pid), "-o", tr.out)
	stderr, err := tr.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.cmd.Start(); err != nil {
		t.Fatalf("strace: %v", err)
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "attached") {
			go func() { // drain the rest
				for sc.Scan() {
				}
			}()
			return tr
		}
		if strings.Contains(line, "Operation not permitted") {
			_ = tr.cmd.Process.Kill()
			_ = tr.cmd.Wait()
			t.Fatalf("strace may not attach here (ptrace refused: run as root, or kernel.yama.ptrace_scope=0): %s", line)
		}
	}
	_ = tr.cmd.Wait()
	t.Fatalf("strace ended before it attached to %d", pid)
	return nil
}

// fsyncedPair starts Y and X, two clients with FsyncedVotes, and checks
// what they make of three fresh everysec servers. On Redis 8.0+ they
// count them as persistent (everysec with a WAITAOF that confirms only
// fsynced writes), so the fresh servers vote at once. On Valkey (9.1.2
// confirms WAITAOF 1 0 before its fsync) FsyncedVotes does not count
// everysec as persistent: the fresh servers sit out the grace, and the
// reason says why; X, the holder, then turns the grace off to take its
// lock at all (Y's view is what the test judges).
func fsyncedPair(ctx context.Context, t *testing.T, cl *redistest.Cluster) (y, x *redlock.Client) {
	t.Helper()
	trusted := cl.Servers[0].Build().Name == redistest.Redis86
	xOpts := fsyncedOptions()
	if !trusted {
		xOpts.RestartGrace = redlock.NoRestartGrace
	}
	y = newClient(t, cl, fsyncedOptions())
	x = newClient(t, cl, xOpts)
	for i, info := range y.Nodes(ctx) {
		switch {
		case info.Err != nil:
			t.Fatalf("node %d: %v", i, info.Err)
		case trusted && !info.Voting:
			t.Fatalf("node %d: %+v, want it voting (persistent: everysec with WAITAOF on Redis 8.0+)", i, info)
		case !trusted && (info.Voting || !strings.Contains(info.SitOutReason, "may confirm WAITAOF before it fsyncs")):
			t.Fatalf("node %d: voting %v (%s), want it sitting out, not persistent: its WAITAOF may confirm before it fsyncs", i, info.Voting, info.SitOutReason)
		}
	}
	wantEveryNodeVoting(ctx, t, x, "X, node %d: %+v, want it voting")
	return y, x
}

// openIncr is the fd and path of the incremental AOF file s appends to now:
// the one of the highest sequence (a rewrite opens a new one; the old one
// is closed in the background).
func openIncr(t *testing.T, s *redistest.Server) (fd, path string) {
	t.Helper()
	pid := s.PID()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("cannot read the server's fds: %v", err)
	}
	seq := -1
	for _, f := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, f.Name()))
		if err != nil || !strings.HasSuffix(target, ".incr.aof") {
			continue
		}
		parts := strings.Split(filepath.Base(target), ".")
		if len(parts) < 4 {
			continue
		}
		if n, err := strconv.Atoi(parts[len(parts)-3]); err == nil && n > seq {
			seq, fd, path = n, f.Name(), target
		}
	}
	if fd == "" {
		t.Fatalf("%s: no open .incr.aof among the server's fds (AOF off?)", s.Addr)
	}
	return fd, path
}

var (
	straceWrite = regexp.MustCompile(`^\d+\s+write\((\d+), "(.*)"(?:\.\.\.)?, (\d+)`)
	straceFsync = regexp.MustCompile(`^\d+\s+f(?:data)?sync\(`)
	straceDone  = regexp.MustCompile(`^\d+\s+(?:<\.\.\. f(?:data)?sync resumed>|f(?:data)?sync\(\d+\)\s+=)`)
)

// unfsyncedSuffix reads the trace of a server that has been killed and
// tells whether the first write to its AOF that holds marker was never
// covered by an fsync: no fsync started after that write, and none that
// started before it was still running when it was made. If so, cut is the
// number of bytes the AOF got from that write on: bytes the kernel held
// but never flushed, which a power loss at the kill may take away.
func (tr *aofTrace) unfsyncedSuffix(t *testing.T, marker string) (never bool, cut int64, summary string) {
	t.Helper()
	_ = tr.cmd.Wait() // strace ends with the process it traces
	f, err := os.Open(tr.out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	found := false
	running := 0 // fsyncs started and not yet returned
	fsyncsAfter, aofWrites := 0, 0
	for sc.Scan() {
		line := sc.Text()
		switch {
		case straceFsync.MatchString(line):
			if found {
				fsyncsAfter++
			}
			if !straceDone.MatchString(line) {
				running++
			}
		case straceDone.MatchString(line):
			running--
		default:
			m := straceWrite.FindStringSubmatch(line)
			if m == nil || m[1] != tr.aofFD {
				continue
			}
			if !found && strings.Contains(m[2], marker) {
				found = true
				if running > 0 {
					return false, 0, "an fsync was running when the vote was written"
				}
			}
			if found {
				n, _ := strconv.ParseInt(m[3], 10, 64)
				cut += n
				aofWrites++
			}
		}
	}
	if !found {
		return false, 0, "the vote's write is not in the trace"
	}
	if fsyncsAfter > 0 {
		return false, 0, fmt.Sprintf("%d fsyncs started after the vote's write", fsyncsAfter)
	}
	return true, cut, fmt.Sprintf("no fsync after the vote's write; %d AOF writes (%d bytes) from it on", aofWrites, cut)
}

// A vote that FsyncedVotes counts must be on disk, not only in the
// kernel's page cache: that is the whole of docs/PROTOCOL.md §13 ("numlocal
// ≥ 1 means ... fsync returned for them"), and what lets a node skip the
// restart grace after a crash of its machine. The test watches each
// server's write(2) and fsync calls with strace while X takes a lock on
// three everysec nodes, kills every server with SIGKILL right after, and
// then plays a power loss at that moment: on each server where no fsync
// ran after X's vote was written, the AOF loses the bytes written from
// the vote on (what the kernel held and never flushed; a power loss may
// lose exactly that, and the server had not fsynced it). Y, whose last
// probe saw the nodes persistent, then asks for X's lock.
//
// On Redis 8.6 every counted vote's WAITAOF waits for an fsync begun after
// it, so at most the straggler's node can lose the vote: Y is refused. On
// Valkey 9.1.2 (and Redis 7.2/7.4, before redis/redis#13793) WAITAOF 1 0
// answers numlocal 1 for a write made less than a second after the last
// fsync without any fsync (aof.c, flushAppendOnlyFile, the empty-buffer
// branch sets fsynced_reploff_pending to the replication offset): X's
// votes count with nothing on disk, the power loss takes them, the nodes
// restart "persistent", and Y takes X's lock within X's validity.
//
// Since the fix (probe.go, fsyncTrustedBuild) FsyncedVotes does not count
// everysec as persistent on Valkey: the fresh nodes sit out the grace for
// Y (fsyncedPair checks the reason), X takes its lock with the grace off,
// and after the power loss Y finds the restarted nodes sitting out.
//
// Run: REDLOCK_TEST_SERVER=valkey-9.1 go test -race -count=1 -run TestBreakAOFPowerLossAfterAnUnfsyncedConfirmation .
// (REDLOCK_TEST_SERVER=redis-8.6 is the control; unset runs Valkey 9.1.)
func TestBreakAOFPowerLossAfterAnUnfsyncedConfirmation(t *testing.T) {
	inTheServerMatrix(t)
	server := redistest.SelectedServer()
	if server == redistest.Redis70 {
		server = redistest.Valkey91 // WAITAOF is the subject
	}
	// The vote must be written less than a second after the server's last
	// fsync for Valkey's early answer, and the kill must come before the
	// next one: a run that misses says so and starts over.
	untilTheScheduleIsHit(t, "in three runs no quorum of servers confirmed X's vote before an fsync of it (as a correct server never does)", func(try int) bool {
		return powerLossAfterConfirmation(t, server, try)
	})
}

func powerLossAfterConfirmation(t *testing.T, server string, try int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := startEverysecRun(t, server, try)
	y, x := fsyncedPair(ctx, t, cl)
	traces := traceAOFs(t, cl.Servers)
	// Each server fsyncs what it holds now (a write and WAITAOF 1 0 on
	// its own connection; the answer may be early, the next step does not
	// rely on it), so that X's vote comes soon after a server's fsync.
	for _, s := range cl.Servers {
		rdb := s.Client()
		_ = rdb.Set(ctx, "primer", "x", 0).Err()
		_ = rdb.Do(ctx, "waitaof", 1, 0, 0).Err()
	}
	const name = "job"
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("X: %v", err)
	}
	lost := powerLossAtKill(t, cl.Servers, traces, x.Keys(name).Lock)
	kept := serversHolding(ctx, t, cl.Servers, x.Keys(name).Lock)
	t.Logf("X's vote had no fsync on %d of 3 servers when they died; its key is on %d after the restart", lost, kept)
	errY := secondHolderRefused(ctx, t, y.TryAcquire, name, held, func(left time.Duration) string {
		return fmt.Sprintf("BROKEN: X's votes counted (FsyncedVotes, WAITAOF answered numlocal 1) on %d servers that had not fsynced them; after a power loss at their kill -9 Y took %q with %v of X's validity left",
			lost, name, left)
	})
	if !errors.Is(errY, redlock.ErrLocked) && !errors.Is(errY, redlock.ErrNodeSittingOut) {
		t.Errorf("Y: %v, want ErrLocked (X's key kept) or the nodes sitting out", errY)
	}
	t.Logf("Y refused: %v", errY)
	_ = held.Release(ctx)
	return lost >= 2 // a run that lost X's quorum and stayed safe settles it
}

// playPowerLoss plays a power loss at the kill of the traced servers,
// which must be down: each server whose AOF never had the write holding
// marker fsynced loses the bytes from that write on, as the kernel may
// lose what it was never asked to flush. It tells on how many servers.
func playPowerLoss(t *testing.T, traces []*aofTrace, marker string) (lost int) {
	t.Helper()
	for _, tr := range traces {
		never, cut, why := tr.unfsyncedSuffix(t, marker)
		t.Logf("%s: %s", tr.s.Addr, why)
		if !never {
			continue
		}
		st, err := os.Stat(tr.aof)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(tr.aof, st.Size()-cut); err != nil {
			t.Fatal(err)
		}
		lost++
	}
	return lost
}

// fsyncNow has each server fsync what it holds now, all at once: a write
// and a WAITAOF 1 0 behind it on the server's own connection. A vote
// written less than a second later then waits, with everysec, for the
// next fsync about a second after this one.
func fsyncNow(ctx context.Context, servers []*redistest.Server) {
	done := make(chan struct{}, len(servers))
	for _, s := range servers {
		go func() {
			rdb := s.Client()
			_ = rdb.Set(ctx, "primer", "x", 0).Err()
			_ = rdb.Do(ctx, "waitaof", 1, 0, 2000).Err()
			done <- struct{}{}
		}()
	}
	for range servers {
		<-done
	}
}

// slowRewrite starts a routine AOF rewrite (BGREWRITEAOF, the AOF on all
// along, as auto-aof-rewrite-percentage starts one) that lasts half a
// minute or more (makeRewritesSlow).
func slowRewrite(ctx context.Context, t *testing.T, s *redistest.Server) {
	t.Helper()
	makeRewritesSlow(ctx, t, s)
	rdb := s.Client()
	if err := rdb.BgRewriteAOF(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	info, err := rdb.Info(ctx, "persistence").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "aof_enabled:1") || !strings.Contains(info, "aof_rewrite_in_progress:1") {
		t.Fatalf("%s: want the AOF on and a rewrite running:\n%s", s.Addr, info)
	}
}

// makeRewritesSlow has every AOF rewrite of s from now on last 30s or
// more: it writes 60 keys and has the rewrite's child sleep 0.5s a key
// (rdb-key-save-delay).
func makeRewritesSlow(ctx context.Context, t *testing.T, s *redistest.Server) {
	t.Helper()
	rdb := s.Client()
	for i := range 60 {
		if err := rdb.Set(ctx, fmt.Sprintf("pad:%d", i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.ConfigSet(ctx, "rdb-key-save-delay", "500000").Err(); err != nil {
		t.Fatal(err)
	}
}

// Two clients with FsyncedVotes judge the same server at different times:
// Y probed it before a routine AOF rewrite (BGREWRITEAOF, which Redis also
// starts by itself at auto-aof-rewrite-percentage) and counts it
// persistent; X probes it during the rewrite, counts it not persistent,
// and so (since 46bec1a) sends its votes there without a WAITAOF and counts
// them unconfirmed. PROTOCOL §13 rule 4 undoes persistence for the client
// that counted the unconfirmed vote only: Y's guard still says persistent.
// The machines of the two servers lose power right after X's acquire,
// before their next everysec fsync (played as in
// TestBreakAOFPowerLossAfterAnUnfsyncedConfirmation, only on servers whose
// trace shows no fsync after X's vote), and restart on their disks. Y, idle
// throughout (a job that takes its lock once a minute), excuses the
// restart (persistent at its last probe, persistent now) and takes X's
// lock within X's validity. The rewrite is routine, which PROTOCOL §11
// says "costs a grace after a restart, never safety"; §13 lists only a
// client without the option as not covered.
//
// Since the fix (durable.go, masterWrite) X's votes on the rewriting
// servers wait for their WAITAOF all the same, which a routine rewrite
// confirms after an fsync: the power loss takes nothing counted, and the
// schedule is "not hit" (the trace shows an fsync after X's vote). Since
// the fourth review's fix (rewriteStarted) a rewrite running at either of
// the vote's INFO reads fails the vote: X's acquire fails on the two
// rewriting servers with ErrVoteNotDurable, and nothing is left to lose.
//
// Run: REDLOCK_TEST_SERVER=redis-8.6 go test -race -count=1 -run TestBreakAOFUnconfirmedVoteOfAnotherFsyncedClient .
// (valkey-9.1 too; unset runs Redis 8.6.)
func TestBreakAOFUnconfirmedVoteOfAnotherFsyncedClient(t *testing.T) {
	inTheServerMatrix(t)
	server := redistest.SelectedServer()
	if server == redistest.Redis70 {
		server = redistest.Redis86 // WAITAOF is the subject
	}
	untilTheScheduleIsHit(t, "in three runs the servers fsynced X's vote before the kill: the schedule was not hit", func(try int) bool {
		return unconfirmedVoteOfAnotherClient(t, server, try)
	})
}

func unconfirmedVoteOfAnotherClient(t *testing.T, server string, try int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := startEverysecRun(t, server, try)
	y, x := fsyncedPair(ctx, t, cl)
	crashed := cl.Servers[:2]
	for _, s := range crashed {
		slowRewrite(ctx, t, s)
	}
	// X looks again: the two servers rewrite, so they are not
	// persistent for X; they vote all the same (no restart).
	wantEveryNodeVoting(ctx, t, x, "X, node %d during the rewrite: %+v, want it voting")
	traces := traceAOFs(t, crashed)
	fsyncNow(ctx, crashed)
	const name = "job"
	held, err := x.TryAcquire(ctx, name)
	if errors.Is(err, redlock.ErrVoteNotDurable) {
		t.Logf("X refused while 2 of the 3 servers rewrite their AOF: %v", err)
		return true
	}
	if err != nil {
		t.Fatalf("X: %v", err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	lost := powerLossAtKill(t, crashed, traces, x.Keys(name).Lock)
	t.Logf("X's vote had no fsync on %d of the 2 servers that lost power", lost)
	// Z meets the servers only after their restart: its first probe's
	// barrier confirms what they hold now, and nothing tells it of X.
	z := newClient(t, cl, fsyncedOptions())
	if l, errZ := z.TryAcquire(ctx, name); errZ == nil {
		t.Errorf("BROKEN: Z (FsyncedVotes, first contact after the restart) took %q with %v of X's validity left", name, time.Until(held.Deadline()).Round(time.Millisecond))
		_ = l.Release(ctx)
	} else {
		t.Logf("Z refused: %v", errZ)
	}
	errY := secondHolderRefused(ctx, t, y.TryAcquire, name, held, func(left time.Duration) string {
		return fmt.Sprintf("BROKEN: X counted votes without a WAITAOF on 2 servers it saw rewriting; after a power loss there Y (FsyncedVotes, last probe before the rewrite) excused the restart and took %q with %v of X's validity left",
			name, left)
	})
	t.Logf("Y refused: %v", errY)
	return lost == 2
}
