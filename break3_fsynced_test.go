package redlock_test

// Third-round adversarial tests of FsyncedVotes (docs/PROTOCOL.md §13),
// written on the branch fsync-break against fsync at 6192ddd.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// A vote counted on the master's own "appendonly is disabled" answer is
// unconfirmed for the client that counted it (X), and only X's guard
// learns of it (node.unconfirmed). Another client Y, whose last probe saw
// the master persistent (AOF on, everysec, WAITAOF trusted) and which has
// been idle since, still excuses the master's next restart: a restart
// that reads the config file (appendonly yes) and loads an AOF that lacks
// every write made while the AOF was off, X's vote among them.
//
// Schedule, every client with FsyncedVotes, 3 Redis 8.6 masters with
// appendonly yes and appendfsync everysec:
//  1. Y meets the nodes: all persistent through WAITAOF, voting.
//  2. The operator turns node 0's AOF off (CONFIG SET appendonly no).
//     Node 2 holds another owner's key for the lock (so X's quorum is
//     nodes 0 and 1).
//  3. X meets the nodes (after their uptime passed the grace), sees node
//     0's AOF off, and takes the lock on nodes 0 and 1: on node 0 its
//     WAITAOF 1 0 answers "appendonly is disabled", which fsyncVerdict
//     counts (unconfirmed).
//  4. Node 0 is killed (kill -9) and restarted on its own data; node 2's
//     other owner lets go.
//  5. Y, idle since step 1, takes the lock: node 0 restarted persistent
//     and was persistent at Y's last probe, so Y excuses the restart and
//     counts node 0 (which lost X's key) with node 2.
//
// The promise held: "every write a vote relies on is followed by WAITAOF
// and counts only once the master confirms its fsync, so such a node
// counts as persistent and sits out no grace" (the docs: "as long as
// every vote on it, by every client, was confirmed fsynced"). X counted a
// vote on node 0 that no fsync confirmed, and Y, which cannot know it,
// excused the restart that lost it. Fixed, X's vote on node 0 fails (or Y
// makes node 0 sit out), and Y is refused while X holds the lock.
//
// Run: REDLOCK_TEST_SERVER=redis-8.6 go test -race -count=1 -run TestBreak3AOFOffVoteExcusedByAnotherClient .
func TestBreak3AOFOffVoteExcusedByAnotherClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl := redistest.StartT(t, 3, redistest.Options{Server: redistest.Redis86, Args: everysec})
	started := time.Now()
	t.Logf("server: %s", cl.Servers[0].Build())
	opts := redlock.Options{TTL: 8 * time.Second, NodeTimeout: 2 * time.Second, RestartGrace: 8 * time.Second, FsyncedVotes: true}
	y := newClientOn(t, cl.Clients(), opts)
	for i, info := range y.Nodes(ctx) {
		if info.Err != nil || !info.Voting {
			t.Fatalf("Y, node %d: %+v, want it voting (persistent through WAITAOF)", i, info)
		}
	}
	const name = "job"
	key := y.Keys(name).Lock
	if err := cl.Servers[2].Client().Set(ctx, key, "another-owner", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Servers[0].Client().ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	// X meets node 0 while its AOF is off: a server that is not
	// persistent votes once it has been up longer than the grace (the
	// largest TTL in use, 8s, which Y's probe raised the register to).
	time.Sleep(time.Until(started.Add(11 * time.Second)))
	x := newClientOn(t, cl.Clients(), opts)
	for i, info := range x.Nodes(ctx) {
		t.Logf("X, node %d: voting %v %s", i, info.Voting, info.SitOutReason)
	}
	held, err := x.TryAcquire(ctx, name)
	if err != nil {
		t.Fatalf("X: %v", err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	if info, err := cl.Servers[0].Client().Info(ctx, "errorstats").Result(); err == nil {
		for _, l := range strings.Split(info, "\n") {
			if strings.HasPrefix(l, "errorstat_") {
				t.Logf("node 0 %s", strings.TrimSpace(l))
			}
		}
	}
	if err := cl.Servers[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Servers[0].Restart(true); err != nil {
		t.Fatal(err)
	}
	if n, err := cl.Servers[0].Client().Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("node 0 after the restart: exists %d, %v (want X's key lost)", n, err)
	}
	if err := cl.Servers[2].Client().Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	l, errY := y.TryAcquire(ctx, name)
	if errY == nil {
		defer func() { _ = l.Release(context.Background()) }()
		if time.Now().Before(held.Deadline()) {
			t.Fatalf("BROKEN: X counted a vote on node 0 that no fsync confirmed (its AOF was off: \"appendonly is disabled\"); node 0 was killed and restarted on its AOF, which lacks X's key; Y (FsyncedVotes, whose last probe saw node 0 persistent) excused the restart and took %q with %v of X's validity left",
				name, time.Until(held.Deadline()).Round(time.Millisecond))
		}
		t.Fatalf("Y took %q only after X's validity (a machine too slow to judge)", name)
	}
	t.Logf("Y refused: %v", errY)
}
