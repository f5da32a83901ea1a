package redlock

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The compare-and-act scripts, one per file in lua/. They all answer with an
// array of integers, which go-redis reads without boxing a value per field.
var (
	//go:embed lua/acquire.lua
	acquireSrc string
	//go:embed lua/raise.lua
	raiseSrc string
	//go:embed lua/extend.lua
	extendSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/fenced_set.lua
	fencedSetSrc string
	//go:embed lua/ttl_register.lua
	ttlRegisterSrc string
	//go:embed lua/rw_read_acquire.lua
	rwReadAcquireSrc string
	//go:embed lua/rw_read_release.lua
	rwReadReleaseSrc string
	//go:embed lua/rw_read_extend.lua
	rwReadExtendSrc string
	//go:embed lua/rw_read_raise.lua
	rwReadRaiseSrc string
	//go:embed lua/rw_write_acquire.lua
	rwWriteAcquireSrc string
	//go:embed lua/rw_write_release.lua
	rwWriteReleaseSrc string
	//go:embed lua/rw_write_extend.lua
	rwWriteExtendSrc string
	//go:embed lua/rw_intent_clear.lua
	rwIntentClearSrc string
	//go:embed lua/semaphore_acquire.lua
	semaphoreAcquireSrc string
	//go:embed lua/semaphore_release.lua
	semaphoreReleaseSrc string
	//go:embed lua/semaphore_extend.lua
	semaphoreExtendSrc string
	//go:embed lua/fair_queue.lua
	fairQueueSrc string
	//go:embed lua/fair_extend.lua
	fairExtendSrc string

	acquireScript     = newScript(acquireSrc)
	raiseScript       = newScript(raiseSrc)
	extendScript      = newRenewalScript(extendSrc)
	releaseScript     = newScript(releaseSrc)
	fencedSetScript   = newScript(fencedSetSrc)
	ttlRegisterScript = newRenewalScript(ttlRegisterSrc)

	rwReadAcquireScript  = newScript(rwReadAcquireSrc)
	rwReadReleaseScript  = newScript(rwReadReleaseSrc)
	rwReadExtendScript   = newRenewalScript(rwReadExtendSrc)
	rwReadRaiseScript    = newScript(rwReadRaiseSrc)
	rwWriteAcquireScript = newScript(rwWriteAcquireSrc)
	rwWriteReleaseScript = newScript(rwWriteReleaseSrc)
	rwWriteExtendScript  = newRenewalScript(rwWriteExtendSrc)
	rwIntentClearScript  = newScript(rwIntentClearSrc)

	semaphoreAcquireScript = newScript(semaphoreAcquireSrc)
	semaphoreReleaseScript = newScript(semaphoreReleaseSrc)
	semaphoreExtendScript  = newRenewalScript(semaphoreExtendSrc)
	fairQueueScript        = newScript(fairQueueSrc)
	fairExtendScript       = newRenewalScript(fairExtendSrc)
)

// script is a Lua script run by EVALSHA, falling back to EVAL when the node
// does not know it yet (a fresh or restarted node).
//
// The client never hashes a script itself: Go refuses SHA-1 under
// GODEBUG=fips140=only, and a package that hashed its scripts at start-up
// could not even be loaded there. A script runs with EVAL (its source) until
// a node told its SHA in reply to SCRIPT LOAD, which every probe sends for
// the scripts still unknown (see loadScripts); from then on it runs with
// EVALSHA on every node, since the SHA depends on the source alone.
type script struct {
	src    string
	srcArg any                 // src, boxed once
	sha    atomic.Pointer[any] // the SHA, boxed once; nil until a node told it
	// renewal scripts go on a node's renewal pipe, apart from the acquires
	// (see nodePipes)
	renewal bool
	// batched is the script's batched form (see batchSrc), nil for a
	// batched form itself.
	batched *script
}

// scripts lists every script made by newScript: the probes load them all,
// so a new script needs nothing more than its newScript line.
var scripts []*script

func newScript(src string) *script {
	s := &script{src: src, srcArg: src}
	b := batchSrc(src)
	s.batched = &script{src: b, srcArg: b}
	scripts = append(scripts, s, s.batched)
	return s
}

func newRenewalScript(src string) *script {
	s := newScript(src)
	s.renewal = true
	s.batched.renewal = true
	return s
}

// batchSrc is the batched form of a script: its source becomes the body of
// a function one(KEYS, ARGV), called once per lock under pcall, so that one
// EVALSHA runs the script for many locks and a lock whose call fails (a
// key of the wrong type, an ACL refusal) gets its error as its own answer
// while the others run. The function starts on the source's first line, so
// a line of the source is the same line in both forms.
//
// An error caught by pcall carries no line (scripts have no debug library),
// so the batched form sees the script's calls through a local redis whose
// call records the command's name, and names it in the error: explain can
// then name an ACL refusal's command as it does from the line.
//
// That local redis also answers every call's TIME with the run's first
// (the same table: the scripts only read it): a run is atomic, no other command runs on the server
// between its start and any of its calls, and the server judges its keys'
// expiry by the run's start time too, so the run decides each lock as if
// every call had run at that first instant, a schedule that could have
// happened. The time each call answers still lies between the run's send
// and its answer, which is all a clock sample (recheck) asks. It spares
// each lock one of its two or three server calls.
//
// Each lock's KEYS and ARGV are two tables the run refills for every lock
// (the scripts keep no reference to them past their call).
//
// KEYS are every lock's keys in turn; ARGV[1] is the number of locks, then
// the locks in runs of one layout: a run's number of locks, their number of
// keys and their number of arguments, then each lock's arguments in turn
// (see batchArgs). The locks of a batch mostly share one layout (a renewal
// round's mutexes do), so the layout goes once a run, not once a lock: two
// arguments fewer a lock for the client to write and the server to read. The reply is one flat array of integers, so
// that the client reads a whole run into one []int64 (go-redis boxes every
// element of a nested reply, several allocations a lock): for each lock in
// turn, the length of its script's reply and that reply's integers, or,
// when its call failed, minus the length of the error's message and the
// message's bytes (see batchAnswers).
func batchSrc(src string) string {
	return "local call, last, now = redis.call, nil, nil " +
		"local redis = setmetatable({call = function(c, ...) last = c " +
		"if c == 'TIME' then now = now or call('TIME') return now end " +
		"return call(c, ...) end}, {__index = redis}) " +
		"local function one(KEYS, ARGV) " + src + `
end
local out, n, keys, argv, nk0, na0 = {}, 0, {}, {}, 0, 0
local k, p, left, nk, na = 1, 2, 0, 0, 0
for j = 1, tonumber(ARGV[1]) do
  if left == 0 then
    left, nk, na = tonumber(ARGV[p]), tonumber(ARGV[p + 1]), tonumber(ARGV[p + 2])
    p = p + 3
    for x = nk + 1, nk0 do
      keys[x] = nil
    end
    for x = na + 1, na0 do
      argv[x] = nil
    end
    nk0, na0 = nk, na
  end
  left = left - 1
  for x = 1, nk do
    keys[x] = KEYS[k]
    k = k + 1
  end
  for x = 1, na do
    argv[x] = ARGV[p]
    p = p + 1
  end
  last = nil
  local ok, r = pcall(one, keys, argv)
  if not ok then
    if type(r) == 'table' and r.err then
      r = r.err
    end
    r = tostring(r)
    if last then
      r = r .. "` + batchCallMarker + `" .. string.lower(last) .. "')"
    end
    n = n + 1
    out[n] = -#r
    for x = 1, #r do
      out[n + x] = string.byte(r, x)
    end
    n = n + #r
  else
    if type(r) ~= 'table' then
      r = {}
    end
    n = n + 1
    out[n] = #r
    for x = 1, #r do
      out[n + x] = r[x]
    end
    n = n + #r
  end
end
return out
`
}

// batchCallMarker ends the error of a lock's call in a batched run with the
// command the script was calling: "... (in the script's call of 'get')".
const batchCallMarker = " (in the script's call of '"

// batchArgs builds the command of the batched form of s for calls, each a
// command built by s.args: the calls' keys in turn, then the header and
// every call's arguments (see batchSrc). eval sends the batched form's
// source: the calls came back NOSCRIPT from a node that did not know the
// script (a batched run's SHA may be known to the client and not the node).
func (s *script) batchArgs(calls [][]any, eval bool) []any {
	nkeys, nargs := 0, 0
	for _, c := range calls {
		k := c[2].(int)
		nkeys += k
		nargs += len(c) - 3 - k
	}
	args := make([]any, 0, 3+nkeys+1+3*len(calls)+nargs)
	cmd, code := s.batched.head()
	if eval {
		cmd, code = "eval", s.batched.srcArg
	}
	args = append(args, cmd, code, nkeys)
	for _, c := range calls {
		args = append(args, c[3:3+c[2].(int)]...)
	}
	args = append(args, len(calls))
	for i := 0; i < len(calls); {
		k := calls[i][2].(int)
		a := len(calls[i]) - 3 - k
		j := i + 1
		for j < len(calls) && calls[j][2].(int) == k && len(calls[j])-3-k == a {
			j++
		}
		args = append(args, j-i, k, a)
		for _, c := range calls[i:j] {
			args = append(args, c[3+k:]...)
		}
		i = j
	}
	return args
}

// head gives the first two words of a call: EVALSHA and the SHA once
// known, EVAL and the source before.
func (s *script) head() (cmd, code any) {
	if sha := s.sha.Load(); sha != nil {
		return "evalsha", *sha
	}
	return "eval", s.srcArg
}

// learn records the SHA a node answered to SCRIPT LOAD of s. A reply that
// is not a SHA-1 in hex is ignored: the script keeps running by EVAL.
func (s *script) learn(sha string) {
	if len(sha) != 40 || strings.Trim(sha, "0123456789abcdef") != "" {
		return
	}
	boxed := any(sha)
	s.sha.CompareAndSwap(nil, &boxed)
}

// loadScripts queues a SCRIPT LOAD of every script whose SHA is not known
// yet in a probe's pipeline; the returned function, called after the
// pipeline ran, learns the SHAs from the replies. A node that refuses SCRIPT
// LOAD (an ACL user without it) costs only the EVALs' longer commands.
func loadScripts(ctx context.Context, pipe redis.Pipeliner) (learn func()) {
	var loads []*redis.StringCmd
	var loaded []*script
	for _, s := range scripts {
		if s.sha.Load() == nil {
			loads = append(loads, pipe.ScriptLoad(ctx, s.src))
			loaded = append(loaded, s)
		}
	}
	return func() {
		for i, cmd := range loads {
			if cmd.Err() == nil {
				loaded[i].learn(cmd.Val())
			}
		}
	}
}

// args builds the whole EVALSHA (or EVAL) command. The slice is only read
// by go-redis, so one built per operation is shared by the calls to every
// node.
func (s *script) args(keys []string, argv ...any) []any {
	args := make([]any, 0, 3+len(keys)+len(argv))
	cmd, code := s.head()
	args = append(args, cmd, code, len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	return append(args, argv...)
}

// explain turns an ACL refusal of a command inside the script into a
// NOPERM error that names the command. Redis 7.0 tells only the line ("ERR
// The user executing the script can't run this command or subcommand
// script: <sha>, on @user_script:17."), so the commands called on that line
// of the source are named instead. Redis 8 and Valkey 9 name the command but
// say ERR, not NOPERM ("ERR ACL failure in script: User u has no
// permissions to run the 'set' command script: <sha>, on
// @user_script:17."). Other errors are returned as they are.
func (s *script) explain(err error) error {
	if err == nil {
		return nil
	}
	if _, refused, ok := strings.Cut(err.Error(), aclRefusalNamed); ok && strings.Contains(err.Error(), "ACL failure in script") {
		name, _, _ := strings.Cut(refused, "'")
		return fmt.Errorf("NOPERM the ACL refused the lock script the command '%s' (see ACLRule): %w", strings.ToLower(name), err)
	}
	if !strings.Contains(err.Error(), "can't run this command") {
		return err
	}
	if _, call, ok := strings.Cut(err.Error(), batchCallMarker); ok { // a batched run's
		name, _, _ := strings.Cut(call, "'")
		return fmt.Errorf("NOPERM the ACL refused the lock script the command '%s' (see ACLRule): %w", name, err)
	}
	_, after, ok := strings.Cut(err.Error(), "@user_script:")
	if !ok {
		return err
	}
	digits := strings.TrimRight(after, ".")
	line := 0
	for _, d := range digits {
		if d < '0' || d > '9' {
			break
		}
		line = line*10 + int(d-'0')
	}
	lines := strings.Split(s.src, "\n")
	if line < 1 || line > len(lines) {
		return err
	}
	var cmds []string
	for rest := lines[line-1]; ; {
		_, call, found := strings.Cut(rest, "redis.call('")
		if !found {
			break
		}
		name, tail, _ := strings.Cut(call, "'")
		cmds = append(cmds, "'"+strings.ToLower(name)+"'")
		rest = tail
	}
	if len(cmds) == 0 {
		return err
	}
	return fmt.Errorf("NOPERM the ACL refused the lock script the command %s (see ACLRule): %w", strings.Join(cmds, " or "), err)
}

// aclRefusalNamed precedes the refused command's name in the ACL error of
// Redis 8 and Valkey 9 inside a script.
const aclRefusalNamed = "has no permissions to run the '"

// scriptRunner runs a script on one node. The real one talks to Redis; the
// quorum unit tests use fakes.
type scriptRunner interface {
	run(ctx context.Context, s *script, args []any) ([]int64, error)
}

// processor is the part of a go-redis client the scripts need.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

type redisRunner struct{ rdb processor }

func (r redisRunner) run(ctx context.Context, s *script, args []any) ([]int64, error) {
	cmd := redis.NewIntSliceCmd(ctx, args...)
	_ = r.rdb.Process(ctx, cmd)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		eval := make([]any, len(args))
		copy(eval, args)
		eval[0], eval[1] = "eval", s.srcArg
		cmd = redis.NewIntSliceCmd(ctx, eval...)
		_ = r.rdb.Process(ctx, cmd)
	}
	return cmd.Val(), s.explain(cmd.Err())
}

// runScript is run with a check of the reply's length, for callers off the
// hot path.
func runScript(ctx context.Context, rdb processor, s *script, want int, keys []string, argv ...any) ([]int64, error) {
	vals, err := redisRunner{rdb}.run(ctx, s, s.args(keys, argv...))
	if err == nil && len(vals) != want {
		err = fmt.Errorf("redlock: unexpected script reply %v", vals)
	}
	return vals, err
}
