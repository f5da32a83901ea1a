package redlock

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"

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
	//go:embed lua/fair_queue.lua
	fairQueueSrc string

	acquireScript     = newScript(acquireSrc)
	raiseScript       = newScript(raiseSrc)
	extendScript      = newScript(extendSrc)
	releaseScript     = newScript(releaseSrc)
	fencedSetScript   = newScript(fencedSetSrc)
	ttlRegisterScript = newScript(ttlRegisterSrc)
	fairQueueScript   = newScript(fairQueueSrc)
)

// script is a Lua script run by EVALSHA, falling back to EVAL when the node
// does not know it yet (a fresh or restarted node).
type script struct {
	src    string
	sha    string
	shaArg any // sha, boxed once: the hot path builds its commands without it
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	return &script{src: src, sha: sha, shaArg: sha}
}

// args builds the whole EVALSHA command. The slice is only read by go-redis,
// so one built per operation is shared by the calls to every node.
func (s *script) args(keys []string, argv ...any) []any {
	args := make([]any, 0, 3+len(keys)+len(argv))
	args = append(args, "evalsha", s.shaArg, len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	return append(args, argv...)
}

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
		eval[0], eval[1] = "eval", s.src
		cmd = redis.NewIntSliceCmd(ctx, eval...)
		_ = r.rdb.Process(ctx, cmd)
	}
	return cmd.Val(), cmd.Err()
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
