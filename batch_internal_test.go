package redlock

// The batched form of the scripts (scripts.go batchSrc) and the renewals
// sent in it (renew.go runBatched), on real servers: each lock of a batch
// gets the answer its own script call would have given.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/redistest"
)

// scriptRuns counts the extend commands a client sends (or those of the
// scripts in of), by whether they run a batched form, and the writes that
// carry them. A call the server did not know the script of (it
// runs again by EVAL) is not counted: the scripts' SHAs are learned once
// per process, and a test's fresh servers do not know them.
type scriptRuns struct {
	of                     []*script // nil: the extend scripts
	mu                     sync.Mutex
	plain, batched, writes int
}

func (w *scriptRuns) count(err error, cmds ...redis.Cmder) {
	w.mu.Lock()
	defer w.mu.Unlock()
	before := w.plain + w.batched
	defer func() {
		if w.plain+w.batched > before {
			w.writes++
		}
	}()
	for _, cmd := range cmds {
		args := cmd.Args()
		e := cmd.Err()
		if e == nil {
			e = err
		}
		if e != nil && redis.HasErrorPrefix(e, "NOSCRIPT") {
			continue
		}
		if len(args) < 2 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
			continue
		}
		code, _ := args[1].(string)
		of := w.of
		if of == nil {
			of = extendScripts
		}
		switch scriptForm(code, of) {
		case "batched":
			w.batched++
		case "plain":
			w.plain++
		}
	}
}

// extendScripts are the scripts scriptRuns counts by default: the other
// scripts (the TTL register's refresh, a background release) run when they
// fall due.
var extendScripts = []*script{extendScript, semaphoreExtendScript, rwReadExtendScript, rwWriteExtendScript, fairExtendScript}

// scriptForm tells whether code (a script's source or SHA) is one of ss,
// "plain", or its batched form, "batched"; "" if neither.
func scriptForm(code string, ss []*script) string {
	is := func(s *script) bool {
		if code == s.src {
			return true
		}
		sha := s.sha.Load()
		return sha != nil && *sha == code
	}
	for _, s := range ss {
		switch {
		case is(s):
			return "plain"
		case is(s.batched):
			return "batched"
		}
	}
	return ""
}

func (w *scriptRuns) reset() (plain, batched int) {
	plain, batched, _ = w.resetWrites()
	return plain, batched
}

func (w *scriptRuns) resetWrites() (plain, batched, writes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	plain, batched, writes = w.plain, w.batched, w.writes
	w.plain, w.batched, w.writes = 0, 0, 0
	return plain, batched, writes
}

func (w *scriptRuns) DialHook(next redis.DialHook) redis.DialHook { return next }
func (w *scriptRuns) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		w.count(err, cmd)
		return err
	}
}
func (w *scriptRuns) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		w.count(nil, cmds...)
		return err
	}
}

// Every script's batched form compiles on a real server, and every script
// keeps to what the batched form assumes: it writes nothing into KEYS or
// ARGV, and keeps no reference to them (the run refills them for the next
// lock). The clock a run's calls share is the library's (see
// TestOnlyTheLibraryReadsTheClock).
func TestEveryBatchedFormLoads(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{})
	rdb := cl.Clients()[0]
	writes := regexp.MustCompile(`\b(KEYS|ARGV)\s*\[[^]]*\]\s*=[^=]|=\s*(KEYS|ARGV)\s*(\n|$|,)`)
	for _, s := range scripts {
		if s.batched == nil {
			continue
		}
		if m := writes.FindString(s.src); m != "" {
			t.Errorf("%.60q writes or keeps KEYS or ARGV: %q", s.src, m)
		}
		if err := rdb.ScriptLoad(context.Background(), s.batched.src).Err(); err != nil {
			t.Fatalf("the batched form of %.60q: %v", s.src, err)
		}
	}
}

// heldKinds takes, on c, one lock of every primitive and side: a mutex, a
// semaphore's permit, a read-write lock's reader and writer, a fair lock.
func heldKinds(t *testing.T, c *Client, prefix string) (names []string, locks []*Lock) {
	t.Helper()
	ctx := context.Background()
	m, err := c.TryAcquire(ctx, prefix+"-mutex")
	if err != nil {
		t.Fatal(err)
	}
	sem, err := c.Semaphore(prefix+"-sem", 3)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.RWLock(prefix + "-rwr").TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.RWLock(prefix + "-rww").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.TryAcquire(ctx, prefix+"-fair", WithFairness())
	if err != nil {
		t.Fatal(err)
	}
	return []string{"mutex", "semaphore", "rw reader", "rw writer", "fair"}, []*Lock{m, p.Lock, r, w, f}
}

// A batch of extends answers each lock as its lone extend does, for every
// primitive and every answer an extend can get: renewed (1), repaired (2),
// another owner (0), a newer token (-1), and an error of its own (a key of
// the wrong type), which the other locks of the batch do not share.
func TestBatchedExtendsAnswerAsSingleOnes(t *testing.T) {
	cl, c, runs := oneNodeWithRuns(t)
	ctx := context.Background()
	rdb := cl.Clients()[0]
	n := c.nodes[0]

	states := []string{"held", "gone", "other", "newer", "wrongtype"}
	// set makes the lock of args (its extend command) be in state on the
	// node. A reader's own entry is in the readers (KEYS[3]), everything
	// else's in KEYS[1].
	set := func(kind string, args []any, state string) {
		keys := make([]string, args[2].(int))
		for i := range keys {
			keys[i] = args[3+i].(string)
		}
		own := keys[0]
		if kind == "rw reader" {
			own = keys[2]
		}
		var err error
		switch state {
		case "gone":
			err = rdb.Del(ctx, own).Err()
		case "other":
			err = rdb.Del(ctx, own).Err()
			if err == nil {
				err = rdb.Set(ctx, keys[0], "someone", time.Minute).Err()
			}
		case "newer":
			err = rdb.Del(ctx, own).Err()
			if err == nil {
				err = rdb.Set(ctx, keys[1], int64(1)<<60, 0).Err()
			}
		case "wrongtype":
			err = rdb.Del(ctx, own).Err()
			if err == nil {
				err = rdb.RPush(ctx, own, "x").Err()
			}
			if err == nil && kind == "rw reader" {
				err = rdb.Del(ctx, own).Err()
				if err == nil {
					err = rdb.Set(ctx, own, "x", 0).Err()
				}
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Two sets of locks in the same states: one extended call by call, one
	// in a batch.
	type call struct {
		what string
		s    *script
		args []any
	}
	var sets [2][]call
	for k := range sets {
		for _, state := range states {
			kinds, locks := heldKinds(t, c, fmt.Sprintf("b%d-%s", k, state))
			for i, l := range locks {
				args := l.extendArgs()
				set(kinds[i], args, state)
				sets[k] = append(sets[k], call{kinds[i] + " " + state, l.a.spec.extend, args})
			}
		}
	}
	runs.reset()
	single := make([][]int64, len(sets[0]))
	singleErrs := make([]error, len(sets[0]))
	for i, cl := range sets[0] {
		v, e := runBatched(ctx, n, []*script{cl.s}, [][]any{cl.args})
		single[i], singleErrs[i] = v[0], e[0]
	}
	if plain, batched := runs.reset(); plain != len(sets[0]) || batched != 0 {
		t.Fatalf("lone extends: %d plain and %d batched script runs, want %d plain", plain, batched, len(sets[0]))
	}
	var ss [][]any
	var scs []*script
	distinct := map[*script]bool{}
	for _, cl := range sets[1] {
		ss, scs = append(ss, cl.args), append(scs, cl.s)
		distinct[cl.s] = true
	}
	vals, errs := runBatched(ctx, n, scs, ss)
	if plain, batched := runs.reset(); plain != 0 || batched != len(distinct) {
		t.Fatalf("a batch of %d extends of %d scripts: %d plain and %d batched script runs, want %d batched",
			len(ss), len(distinct), plain, batched, len(distinct))
	}
	for i, cl := range sets[1] {
		var want, got string
		if singleErrs[i] != nil {
			want = "error " + strings.Fields(singleErrs[i].Error())[0]
		} else {
			want = fmt.Sprint("status ", single[i][0])
		}
		if errs[i] != nil {
			got = "error " + strings.Fields(errs[i].Error())[0]
		} else if len(vals[i]) == 3 {
			got = fmt.Sprint("status ", vals[i][0])
		} else {
			got = fmt.Sprint("reply ", vals[i])
		}
		t.Logf("%s: alone %s, in a batch %s", cl.what, want, got)
		if got != want {
			t.Errorf("%s: alone %s, in a batch %s", cl.what, want, got)
		}
		if strings.HasPrefix(cl.what, "mutex") {
			expect := map[string]string{"held": "status 1", "gone": "status 2", "other": "status 0", "newer": "status -1", "wrongtype": "error WRONGTYPE"}
			if e := expect[strings.Fields(cl.what)[1]]; got != e {
				t.Errorf("%s: in a batch %s, want %s", cl.what, got, e)
			}
		}
	}
}

// A lock whose key holds a wrong type on every node fails its renewal
// alone: the other locks renewed in the same batch keep their quorum.
func TestBatchedRenewalWrongTypeFailsAlone(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	runs := make([]*scriptRuns, 3)
	for i, rdb := range cl.Clients() {
		runs[i] = &scriptRuns{}
		rdb.AddHook(runs[i])
	}
	c, err := New(cl.Clients(), Options{TTL: 10 * time.Second, RestartGrace: NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	scriptsOnly(c) // the batched script's own behaviour (the native form's: TestNativeRenewalWrongTypeFailsAlone)
	ctx := context.Background()
	locks := acquireEach(t, ctx, c, "wrongtype", 20)
	bad := locks[7]
	c.bg.wait() // every acquire call has ended: a late one would write the key over the list
	listOn(t, ctx, cl.Servers, bad.a.keys[0])
	for _, r := range runs {
		r.reset()
	}
	errs := renewalRound(ctx, c, locks)
	for i, r := range runs {
		if plain, batched := r.reset(); plain != 0 || batched != 1 {
			t.Errorf("node %d: %d plain and %d batched script runs for a batch of 20 extends, want 1 batched", i, plain, batched)
		}
	}
	for i, err := range errs {
		var qe *QuorumError
		switch {
		case locks[i] == bad:
			if !errors.As(err, &qe) || qe.Won != 0 || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Errorf("the lock on a list: %v, want a quorum error of WRONGTYPE from every node", err)
			}
		case err != nil:
			t.Errorf("wrongtype-%d: %v", i, err)
		}
	}
}

// A batch above batchBound goes as several batched runs, and a lock left
// alone in the last chunk as its plain script; every lock is renewed. A
// write carries runs of at most maxBatch locks in all, not maxBatch runs.
func TestBatchedExtendsSplitAtTheBound(t *testing.T) {
	_, c, runs := oneNodeWithRuns(t)
	ctx := context.Background()
	var args [][]any
	var ss []*script
	const full = 5
	for i := range full*batchBound + 1 {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("bound-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		args, ss = append(args, l.extendArgs()), append(ss, l.a.spec.extend)
	}
	runBatched(ctx, c.nodes[0], ss, args) // the server learns the batched form
	runs.reset()
	vals, errs := runBatched(ctx, c.nodes[0], ss, args)
	// The runs' locks fill the writes in turn: full runs of batchBound,
	// then the lone call.
	writes, room := 1, maxBatch
	for _, w := range append(slices.Repeat([]int{batchBound}, full), 1) {
		if w > room {
			writes, room = writes+1, maxBatch
		}
		room -= w
	}
	if plain, batched, w := runs.resetWrites(); plain != 1 || batched != full || w != writes {
		t.Fatalf("%d extends: %d plain and %d batched script runs in %d writes, want %d batched and 1 plain in %d writes",
			len(args), plain, batched, w, full, writes)
	}
	for i := range args {
		if errs[i] != nil || len(vals[i]) != 3 || vals[i][0] != 1 {
			t.Fatalf("bound-%d: %v %v, want renewed", i, vals[i], errs[i])
		}
	}
}

// A batched run sends each layout (keys and arguments a call) once per run
// of calls that share it: mutexes with metadata (three keys, five
// arguments) and without (two keys, four) alternating in one run each get
// their own answer, and a lock with metadata keeps its holder key alive.
func TestBatchedExtendsOfMixedLayoutsAnswerEachLock(t *testing.T) {
	cl, c, runs := oneNodeWithRuns(t)
	ctx := context.Background()
	rdb := cl.Clients()[0]
	// Runs of one layout of 1, 2 and 3 calls, and a layout that comes back.
	withMD := []bool{false, true, true, false, false, false, true, false}
	var args [][]any
	var ss []*script
	want := make([]int64, len(withMD))
	for i, md := range withMD {
		var opts []LockOption
		if md {
			opts = append(opts, WithMetadata(fmt.Sprint("md-", i)))
		}
		l, err := c.TryAcquire(ctx, fmt.Sprintf("layout-%d", i), opts...)
		if err != nil {
			t.Fatal(err)
		}
		a := l.extendArgs()
		if md != (a[2].(int) == 3) {
			t.Fatalf("layout-%d: extend of %d keys, metadata %v", i, a[2], md)
		}
		// Every third lock has another owner: a shifted layout would
		// answer the wrong lock.
		want[i] = 1
		if i%3 == 2 {
			want[i] = 0
			if err := rdb.Set(ctx, a[3].(string), "someone", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if md {
			// The holder key's TTL must be renewed with the lock's.
			if err := rdb.PExpire(ctx, a[5].(string), time.Second).Err(); err != nil {
				t.Fatal(err)
			}
		}
		args, ss = append(args, a), append(ss, l.a.spec.extend)
	}
	runs.reset()
	vals, errs := runBatched(ctx, c.nodes[0], ss, args)
	if plain, batched := runs.reset(); plain != 0 || batched != 1 {
		t.Fatalf("%d extends: %d plain and %d batched script runs, want 1 batched", len(args), plain, batched)
	}
	for i := range args {
		if errs[i] != nil || len(vals[i]) != 3 || vals[i][0] != want[i] {
			t.Errorf("layout-%d (metadata %v): %v %v, want status %d", i, withMD[i], vals[i], errs[i], want[i])
		}
		if withMD[i] && want[i] == 1 {
			if ttl := rdb.PTTL(ctx, args[i][5].(string)).Val(); ttl <= 5*time.Second {
				t.Errorf("layout-%d: holder key's TTL %v after the extend, want the lock's 10s", i, ttl)
			}
		}
	}
}

// On a Cluster node the keys of one script must share a hash slot: the
// extends are batched by slot, and each lock is renewed.
func TestBatchedExtendsOnAClusterGoBySlot(t *testing.T) {
	rc := redistest.StartRedisClusterT(t, 3, 0, redistest.Options{})
	cc := rc.ClusterClient()
	t.Cleanup(func() { _ = cc.Close() })
	runs := &scriptRuns{}
	cc.AddHook(runs)
	c, err := New([]redis.UniversalClient{cc}, Options{AllowNoFaultTolerance: true, TTL: 10 * time.Second, RestartGrace: NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	names := namesInTwoSlotsAndALoneOne(c)
	var args [][]any
	var ss []*script
	var locks []*Lock
	for _, name := range names {
		l, err := c.TryAcquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		args, ss = append(args, l.extendArgs()), append(ss, l.a.spec.extend)
		locks = append(locks, l)
	}
	runs.reset()
	vals, errs := runBatched(ctx, c.nodes[0], ss, args)
	if plain, batched := runs.reset(); plain != 1 || batched != 2 {
		t.Errorf("%d extends in 3 slots: %d plain and %d batched script runs, want 2 batched and 1 plain", len(args), plain, batched)
	}
	for i, name := range names {
		if errs[i] != nil || len(vals[i]) != 3 || vals[i][0] != 1 {
			t.Errorf("%s (slot %d): %v %v, want renewed", name, c.keySlotOf(name), vals[i], errs[i])
		}
	}
	// A renewal round sends the same runs (the plan it builds once for
	// the nodes sent every lock groups them by slot too).
	roundErrs := renewalRound(ctx, c, locks)
	if plain, batched := runs.reset(); plain != 1 || batched != 2 {
		t.Errorf("a round of %d extends in 3 slots: %d plain and %d batched script runs, want 2 batched and 1 plain", len(locks), plain, batched)
	}
	for i, err := range roundErrs {
		if err != nil {
			t.Errorf("%s (slot %d): %v in a round, want renewed", names[i], c.keySlotOf(names[i]), err)
		}
	}
}

// An ACL refusal inside a batched run is the refused lock's error, and
// names the command refused, as the lone script's error does from its line.
func TestBatchedExtendNamesTheCommandAnACLRefused(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{})
	ctx := context.Background()
	if err := cl.Clients()[0].Do(ctx, "acl", "setuser", "nopexpire", "on", ">pw", "~*", "&*", "+@all", "-pexpire").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: cl.Servers[0].Addr, Username: "nopexpire", Password: "pw"})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New([]redis.UniversalClient{rdb}, Options{AllowNoFaultTolerance: true, TTL: 10 * time.Second, RestartGrace: NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var args [][]any
	var ss []*script
	for i := range 3 {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("acl-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		args, ss = append(args, l.extendArgs()), append(ss, l.a.spec.extend)
	}
	_, alone := runBatched(ctx, c.nodes[0], ss[:1], args[:1])
	_, batched := runBatched(ctx, c.nodes[0], ss, args)
	for i, err := range append(alone, batched...) {
		if err == nil || !strings.Contains(err.Error(), "NOPERM the ACL refused the lock script the command 'pexpire'") {
			t.Errorf("extend %d: %v, want the ACL's refusal of 'pexpire' named", i, err)
		}
	}
}

// The acquire and release scripts of every primitive, counted by the tests
// of the pipe's grouping.
var acquireReleaseScripts = []*script{
	acquireScript, releaseScript,
	semaphoreAcquireScript, semaphoreReleaseScript,
	rwReadAcquireScript, rwReadReleaseScript, rwWriteAcquireScript, rwWriteReleaseScript,
	fairQueueScript,
}

// batchClient is a client of nodes whose acquire and release commands
// are counted, with a node timeout that a test's held pipe does not reach.
// The nodes know every script: a call the node answers NOSCRIPT runs
// again by EVAL when its caller gets the answer, alone.
func batchClient(t *testing.T, nodes []redis.UniversalClient) (*Client, []*scriptRuns) {
	t.Helper()
	return batchClientWith(t, nodes, Options{TTL: time.Minute, NodeTimeout: 5 * time.Second, RestartGrace: NoRestartGrace})
}

// batchClientWith is batchClient with opts.
func batchClientWith(t *testing.T, nodes []redis.UniversalClient, opts Options) (*Client, []*scriptRuns) {
	t.Helper()
	runs := make([]*scriptRuns, len(nodes))
	for i, rdb := range nodes {
		for _, s := range scripts {
			if err := rdb.ScriptLoad(context.Background(), s.src).Err(); err != nil {
				t.Fatal(err)
			}
		}
		runs[i] = &scriptRuns{of: acquireReleaseScripts}
		rdb.AddHook(runs[i])
	}
	opts.AllowNoFaultTolerance = len(nodes) < 3 // the arithmetic of a quorum is not what these tests look at
	c, err := New(nodes, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, runs
}

// holdPipes makes every lane of every node's acquire stream busy, as a
// write in flight does: the calls made meanwhile queue, until free ends
// that write and they go out together.
func holdPipes(t *testing.T, c *Client) (free func()) {
	t.Helper()
	var ps []*pipe
	for _, n := range c.nodes {
		for _, p := range n.pipes.acquire {
			occupy(t, p)
			ps = append(ps, p)
		}
	}
	var once sync.Once
	free = func() {
		once.Do(func() {
			for _, p := range ps {
				p.idle()
			}
		})
	}
	t.Cleanup(free)
	return free
}

// waitQueued waits until the lanes of every node's acquire stream hold n
// calls in all.
func waitQueued(t *testing.T, c *Client, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d calls queued on every node", n), func() bool { return queuedEverywhere(c, n) })
}

// queueState tells, node by node, the calls queued on its acquire stream
// and what keeps a call from it.
func queueState(c *Client) string {
	var out []string
	for i, n := range c.nodes {
		queued := 0
		for _, p := range n.pipes.acquire {
			queued += p.queued()
		}
		guard := "no guard"
		if g := n.guard.Load(); g != nil {
			guard = fmt.Sprintf("guard %v old, vote %v", c.clock.Now().Sub(g.probed), g.voteErr(c.clock.Now(), c.graceFor(), ""))
		}
		out = append(out, fmt.Sprintf("node %d: %d queued, down %v, stale %v, %s", i, queued, c.down(n), n.stale.Load(), guard))
	}
	return strings.Join(out, "; ")
}

// queuedEverywhere tells whether the lanes of every node's acquire stream
// hold n calls in all.
func queuedEverywhere(c *Client, n int) bool {
	for _, node := range c.nodes {
		queued := 0
		for _, p := range node.pipes.acquire {
			queued += p.queued()
		}
		if queued < n {
			return false
		}
	}
	return true
}

// sameLane gives n lock names made of prefix and a number whose calls all
// go to one lane of a node's acquire stream: calls of them queued together
// share writes and batched runs, as on a node with one lane.
func sameLane(c *Client, prefix string, n int) []string {
	var names []string
	for i := 0; len(names) < n; i++ {
		name := fmt.Sprint(prefix, i)
		if laneOf(c.lockKey(name), len(c.nodes[0].pipes.acquire)) == 0 {
			names = append(names, name)
		}
	}
	return names
}

// acquireBurst acquires names on c, all queued while a write is in flight,
// so they go out in one write.
func acquireBurst(t *testing.T, c *Client, names ...string) ([]*Lock, []error) {
	t.Helper()
	free := holdPipes(t, c)
	locks := make([]*Lock, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	var returned atomic.Int32
	for i, name := range names {
		wg.Go(func() {
			locks[i], errs[i] = c.TryAcquire(context.Background(), name)
			returned.Add(1)
		})
	}
	// A call that skips a node (a guard refused it, its probe failed, the
	// node is held down after a timeout) never queues there: say which.
	deadline := time.Now().Add(10 * time.Second)
	for !queuedEverywhere(c, len(names)) {
		if returned.Load() > 0 || time.Now().After(deadline) {
			state := queueState(c)
			free()
			wg.Wait()
			t.Fatalf("%d calls did not all queue on every node (%s): %v", len(names), state, errors.Join(errs...))
		}
		time.Sleep(time.Millisecond)
	}
	free()
	wg.Wait()
	waitWritten(t, c)
	return locks, errs
}

// waitWritten waits until every node's acquire pipe is idle: the calls a
// quorum did not wait for are answered too.
func waitWritten(t *testing.T, c *Client) {
	t.Helper()
	waitFor(t, "every node's calls answered", func() bool {
		for _, n := range c.nodes {
			for _, p := range n.pipes.acquire {
				p.mu.Lock()
				busy := p.busy
				p.mu.Unlock()
				if busy {
					return false
				}
			}
		}
		return true
	})
}

// A burst of acquires on distinct keys, queued while a write is in flight,
// is one batched script run on each node, and so is the burst of their
// releases.
func TestQueuedAcquiresAndReleasesGoAsOneRunPerNode(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c, runs := batchClient(t, cl.Clients())
	ctx := context.Background()
	const burst = 20
	names := sameLane(c, "burst-", burst)
	locks, errs := acquireBurst(t, c, names...)
	for i, r := range runs {
		if plain, batched := r.reset(); plain != 0 || batched != 1 {
			t.Errorf("node %d: %d acquires went as %d plain and %d batched script runs, want 1 batched", i, burst, plain, batched)
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", names[i], err)
		}
	}

	free := holdPipes(t, c)
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Go(func() { errs[i] = l.Release(ctx) })
	}
	waitQueued(t, c, burst)
	free()
	wg.Wait()
	waitWritten(t, c)
	for i, r := range runs {
		if plain, batched := r.reset(); plain != 0 || batched != 1 {
			t.Errorf("node %d: %d releases went as %d plain and %d batched script runs, want 1 batched", i, burst, plain, batched)
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("release of %s: %v", names[i], err)
		}
	}
	for i, rdb := range cl.Clients() {
		if keys, err := rdb.Keys(ctx, c.lockKey("burst-*")).Result(); err != nil || len(keys) != 0 {
			t.Errorf("node %d keeps %v (%v) after the releases, want none", i, keys, err)
		}
	}
}

// A key of the wrong type on every node fails, in a burst of acquires that
// go as one batched run, its own lock only.
func TestQueuedAcquireOfAWrongTypeKeyFailsAlone(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c, runs := batchClient(t, cl.Clients())
	ctx := context.Background()
	names := sameLane(c, "wt-", 5)
	bad := names[2]
	for _, rdb := range cl.Clients() {
		if err := rdb.RPush(ctx, c.lockKey(bad), "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, errs := acquireBurst(t, c, names...)
	for i, r := range runs {
		if _, batched := r.reset(); batched != 1 {
			t.Errorf("node %d: %d batched script runs for a burst of %d acquires, want 1", i, batched, len(names))
		}
	}
	for i, err := range errs {
		var qe *QuorumError
		switch {
		case names[i] == bad:
			if !errors.As(err, &qe) || qe.Won != 0 || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Errorf("the lock on a list: %v, want a quorum error of WRONGTYPE from every node", err)
			}
		case err != nil:
			t.Errorf("%s: %v", names[i], err)
		}
	}
}

// Grouping keeps the order of the calls on one key: an acquire of another
// key, a release of a held lock's key and a new acquire of that key, queued
// in that order, run in that order, so the new acquire finds the key free;
// an acquire of a third key queued after them joins the new acquire's run.
func TestGroupingKeepsTheOrderOfAKeysCalls(t *testing.T) {
	cl := redistest.StartT(t, 1, redistest.Options{})
	c, runs := batchClient(t, cl.Clients())
	ctx := context.Background()
	names := sameLane(c, "g-", 3) // of one lane, so they share a write
	a, k, b := names[0], names[1], names[2]
	held, err := c.TryAcquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	runs[0].reset()

	free := holdPipes(t, c)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	steps := []func() error{
		func() error { _, err := c.TryAcquire(ctx, a); return err },
		func() error { return held.Release(ctx) },
		func() error { _, err := c.TryAcquire(ctx, k); return err },
		func() error { _, err := c.TryAcquire(ctx, b); return err },
	}
	for i, step := range steps {
		wg.Go(func() { errs[i] = step() })
		waitQueued(t, c, i+1)
	}

	free()
	wg.Wait()
	waitWritten(t, c)
	for i, what := range []string{"acquire of a", "release of k", "new acquire of k", "acquire of b"} {
		if errs[i] != nil {
			t.Errorf("%s: %v", what, errs[i])
		}
	}
	if plain, batched := runs[0].reset(); plain != 2 || batched != 1 {
		t.Errorf("the 4 calls went as %d plain and %d batched script runs, want 2 plain (a's acquire, the release) and 1 batched (k's and b's acquires)", plain, batched)
	}
}

// On a Cluster node queued acquires are grouped by hash slot: two slots of
// three names each go as two batched runs, a name alone in its slot as its
// plain script.
func TestQueuedAcquiresOnAClusterGoBySlot(t *testing.T) {
	rc := redistest.StartRedisClusterT(t, 3, 0, redistest.Options{})
	cc := rc.ClusterClient()
	t.Cleanup(func() { _ = cc.Close() })
	c, runs := batchClient(t, []redis.UniversalClient{cc})
	names := namesInTwoSlotsAndALoneOne(c)
	_, errs := acquireBurst(t, c, names...)
	if plain, batched := runs[0].reset(); plain != 1 || batched != 2 {
		t.Errorf("%d acquires in 3 slots: %d plain and %d batched script runs, want 2 batched and 1 plain", len(names), plain, batched)
	}
	for i, name := range names {
		if errs[i] != nil {
			t.Errorf("%s (slot %d): %v", name, c.keySlotOf(name), errs[i])
		}
	}
}

// A node that forgot the scripts (a restart, SCRIPT FLUSH) answers a
// batched run NOSCRIPT as a whole: each call of the run then runs again by
// EVAL, as a lone call would, and every lock is acquired and released.
func TestQueuedCallsOfAScriptTheNodeForgotRunAgainByEval(t *testing.T) {
	cl := redistest.StartT(t, 3, redistest.Options{})
	c, _ := batchClient(t, cl.Clients())
	ctx := context.Background()
	for _, rdb := range cl.Clients() {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, 10)
	for i := range names {
		names[i] = fmt.Sprint("forgot-", i)
	}
	locks, errs := acquireBurst(t, c, names...)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", names[i], err)
		}
	}
	for _, rdb := range cl.Clients() {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	free := holdPipes(t, c)
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Go(func() { errs[i] = l.Release(ctx) })
	}
	waitQueued(t, c, len(locks))
	free()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("release of %s: %v", names[i], err)
		}
	}
	waitWritten(t, c)
	for i, rdb := range cl.Clients() {
		if keys, err := rdb.Keys(ctx, c.lockKey("forgot-*")).Result(); err != nil || len(keys) != 0 {
			t.Errorf("node %d keeps %v (%v) after the releases, want none", i, keys, err)
		}
	}
}

// With durable votes, a batched run of acquires is a vote like a lone
// acquire: the write's WAIT covers it, and when a majority of the masters'
// replicas stop acknowledging, every acquire of the run fails as not
// durable.
func TestQueuedAcquiresWithDurableVotesWaitForTheReplicas(t *testing.T) {
	masters, replicas := redistest.StartReplicatedT(t, 3, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// NodeTimeout is also what each call of the second burst waits for the
	// replicas that no longer acknowledge. A shorter one, under load, lets
	// a write or a probe time out, and the burst then skips the node that
	// is held down or not probed. CI once failed so (which node state, it
	// did not say; acquireBurst now does), on Valkey 9.1 beside another
	// race-detector suite.
	c, runs := batchClientWith(t, masters.Clients(), Options{TTL: 10 * time.Second, NodeTimeout: 3 * time.Second, RestartGrace: NoRestartGrace, DurableVotes: true})
	names := sameLane(c, "durable-", 5)
	locks, errs := acquireBurst(t, c, names...)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s, replication working: %v", names[i], err)
		}
	}
	for i, r := range runs {
		if plain, batched := r.reset(); plain != 0 || batched != 1 {
			t.Errorf("master %d: %d acquires went as %d plain and %d batched script runs, want 1 batched", i, len(names), plain, batched)
		}
	}
	for _, l := range locks {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range replicas[:2] {
		if err := redistest.CutReplication(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	_, errs = acquireBurst(t, c, names...)
	for i, err := range errs {
		if !errors.Is(err, ErrVoteNotDurable) {
			t.Errorf("%s, replication of 2 of 3 masters cut: %v, want ErrVoteNotDurable", names[i], err)
		}
	}
}

// namesInTwoSlotsAndALoneOne gives three lock names in each of two hash
// slots, then one name alone in a third.
func namesInTwoSlotsAndALoneOne(c *Client) []string {
	bySlot := map[int][]string{}
	var slots []int
	for i := 0; len(slots) < 2; i++ {
		name := fmt.Sprintf("slot-%d", i)
		s := c.keySlotOf(name)
		bySlot[s] = append(bySlot[s], name)
		if len(bySlot[s]) == 3 {
			slots = append(slots, s)
		}
	}
	names := append(append([]string{}, bySlot[slots[0]]...), bySlot[slots[1]]...)
	for i := 0; ; i++ {
		name := fmt.Sprintf("lone-%d", i)
		if s := c.keySlotOf(name); s != slots[0] && s != slots[1] {
			return append(names, name)
		}
	}
}

// oneNodeWithRuns starts one node and a client of it whose script runs
// are recorded in runs.
func oneNodeWithRuns(t *testing.T) (*redistest.Cluster, *Client, *scriptRuns) {
	t.Helper()
	cl := redistest.StartT(t, 1, redistest.Options{})
	runs := &scriptRuns{}
	cl.Clients()[0].AddHook(runs)
	c, err := New(cl.Clients(), Options{AllowNoFaultTolerance: true, TTL: 10 * time.Second, RestartGrace: NoRestartGrace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return cl, c, runs
}
