package redlock

// The script machinery: running a registered script (EVALSHA once a node
// told its SHA, EVAL before), loading the scripts on the nodes, batching
// several calls into one run, and mapping a server's error back to the
// script's file, line and command. The registry is scripts.go.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
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
	file   string // its file in lua/, e.g. "acquire.lua"
	src    string // the file with the pieces of lua/lib.lua it names (see assemble)
	srcArg any    // src, boxed once
	// lines tells where each line of src comes from: the library's
	// pieces and the file's runs of lines between them (a batched form
	// has its own: every piece, then the file)
	lines []lineRun
	sha   atomic.Pointer[any] // the SHA, boxed once; nil until a node told it
	// renewal scripts go on a node's renewal pipe, apart from the acquires
	// (see nodePipes)
	renewal bool
	// batched is the script's batched form (see batchSrc), nil for a
	// batched form itself.
	batched *script
	// sharded is the form a node whose wake-ups are sharded runs (see
	// shardedForm), nil for a script that publishes nothing and for a
	// sharded form itself.
	sharded *script
}

// lineRun is a run of n lines of file from line first on, placed one after
// the other in a script's source.
type lineRun struct {
	file     string
	first, n int
}

// where names the file and line of line n of the script's source, e.g.
// "lua/lib.lua:35 for lua/acquire.lua"; "" for a line of neither (the
// loop of a batched form).
func (s *script) where(n int) string {
	for _, r := range s.lines {
		if n <= r.n {
			if r.file != s.file {
				return fmt.Sprintf("lua/%s:%d for lua/%s", r.file, r.first+n-1, s.file)
			}
			return fmt.Sprintf("lua/%s:%d", r.file, r.first+n-1)
		}
		n -= r.n
	}
	return ""
}

// batchSrc is the batched form of a script: its library pieces (lib),
// defined once for the whole run, then its file (body) as the body of a
// function one(KEYS, ARGV), called once per lock under pcall, so that one
// EVALSHA runs the script for many locks and a lock whose call fails (a
// key of the wrong type, an ACL refusal) gets its error as its own answer
// while the others run. The library starts on the run's first line and
// the function on the line after it. The plain form places a piece of
// functions where the file first needs it (see assemble), so a line of the
// file may have another number here: a call's error is placed by the
// batched form's lines (explain). Both forms have the same lines in all
// (the same pieces and file), and the same pieces of statements on their
// first lines, so a run's own error, which only those or the loop can
// meet, has the same place in both.
//
// Defined once for the run, the library's clock reads TIME once for all
// the run's calls (see lua/lib.lua clock). That spares each lock one of its
// two or three server calls.
//
// An error caught by pcall carries no line of its own (scripts have no
// debug library), so the batched form sees the script's calls through a
// local redis whose call raises a call's error from the line that made the
// call (error's level 2), and records the command's name: the error names
// both. explain can then name the command and place it as it does from a
// plain run's error.
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
func batchSrc(lib, body string) string {
	return "local pcall_, failed = redis.pcall, nil " +
		"local redis = setmetatable({call = function(c, ...) local r = pcall_(c, ...) " +
		"if type(r) == 'table' and r.err then failed = c error(r.err, 2) end " +
		"return r end}, {__index = redis}) " + lib +
		"local function one(KEYS, ARGV) " + body + `
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
  failed = nil
  local ok, r = pcall(one, keys, argv)
  if not ok then
    if type(r) == 'table' and r.err then
      r = r.err
    end
    r = tostring(r)
    local line, msg = string.match(r, '^user_script:(%d+): (.*)$')
    if line then
      r = msg
    end
    local tag = ''
    if failed then
      tag = "` + batchCallMarker + `" .. string.lower(failed) .. "'"
    end
    if line then
      tag = tag .. (failed and ', on' or ' (on') .. ' @user_script:' .. line
    end
    if tag ~= '' then
      r = r .. tag .. ')'
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

// batchCallMarker follows the error of a lock's call in a batched run with
// the command the script was calling and the line it called it from:
// "... (in the script's call of 'get', on @user_script:12)".
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

// explain places an error the script met on the node: it names the file
// and line in lua/ (the server numbers the lines of the source it ran, the
// script's file with the library's pieces: see where; one call's error in
// a batched run, those of the batched form) and the command
// called there, wrapping the server's error. An ACL refusal of a command
// inside the script becomes a NOPERM error that names the command. Redis
// 7.0 tells only the line ("ERR The user executing the script can't run
// this command or subcommand script: <sha>, on @user_script:17."), so the
// commands called on that line of the source are named instead. Redis 8
// and Valkey 9 name the command but say ERR, not NOPERM ("ERR ACL failure
// in script: User u has no permissions to run the 'set' command script:
// <sha>, on @user_script:17."). A batched run's error names both (see
// batchCallMarker). Errors that are no script's (a timeout, NOSCRIPT) are
// returned as they are.
func (s *script) explain(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	form := s // the form whose lines the server numbered
	if _, ok := errors.AsType[callError](err); ok && s.batched != nil {
		form = s.batched // one call's error in a batched run (a grouped call's too)
	}
	place, cmds := "", []string(nil)
	if i := strings.LastIndex(msg, "user_script:"); i >= 0 {
		line := 0
		for _, d := range msg[i+len("user_script:"):] {
			if d < '0' || d > '9' {
				break
			}
			line = line*10 + int(d-'0')
		}
		place = form.where(line)
		cmds = form.callsOn(line)
	}
	if _, call, ok := strings.Cut(msg, batchCallMarker); ok { // a batched run's
		name, _, _ := strings.Cut(call, "'")
		cmds = []string{"'" + name + "'"}
	}
	if _, refused, ok := strings.Cut(msg, aclRefusalNamed); ok && strings.Contains(msg, "ACL failure in script") {
		name, _, _ := strings.Cut(refused, "'")
		cmds = []string{"'" + strings.ToLower(name) + "'"}
		return fmt.Errorf("NOPERM the ACL refused the lock script the command %s%s (see ACLRule): %w", cmds[0], at(place), err)
	}
	if strings.Contains(msg, "can't run this command") && len(cmds) > 0 {
		return fmt.Errorf("NOPERM the ACL refused the lock script the command %s%s (see ACLRule): %w", strings.Join(cmds, " or "), at(place), err)
	}
	if place == "" {
		return err
	}
	if len(cmds) > 0 {
		place += ", in its call of " + strings.Join(cmds, " or ")
	}
	return fmt.Errorf("%w (at %s)", err, place)
}

func at(place string) string {
	if place == "" {
		return ""
	}
	return " at " + place
}

// callsOn gives the commands (quoted, in lower case) that line n of the
// script's source calls.
func (s *script) callsOn(n int) []string {
	lines := strings.Split(s.src, "\n")
	if n < 1 || n > len(lines) {
		return nil
	}
	var cmds []string
	for rest := lines[n-1]; ; {
		_, call, found := strings.Cut(rest, "redis.call('")
		if !found {
			break
		}
		name, tail, _ := strings.Cut(call, "'")
		cmds = append(cmds, "'"+strings.ToLower(name)+"'")
		rest = tail
	}
	return cmds
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
