package redlock

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlabs/redlock/redistest"
)

// BenchmarkNativeServerCPU measures what the server spends per release and
// extend of a mutex with the scripts and with each server's native
// compare-and-act commands (native.go), on every server build, in one run:
//
//	go test -run '^$' -bench BenchmarkNativeServerCPU -benchtime 20000x -count 3 .
//
// The mutex is the only kind with a native form: every other kind's release
// and extend touch more than the one key (sorted sets, a queue, slots), which
// no native command does. Two metrics per row besides the client's ns/op:
// cmd-µs/op, the usec INFO commandstats gives the commands the path sends
// (evalsha for a script, whose time includes the commands it calls; the
// native commands, PUBLISH and TIME included, for the others), and
// cpu-µs/op, used_cpu_sys+used_cpu_user of the whole server, which also
// counts reading, parsing and answering each command, and the set-up.
//
// The rows, per server:
//   - release-quiet: the release of a failed attempt, which announces
//     nothing, of our own key (set again before each, in the same pipeline,
//     by a SET that cmd-µs/op does not count);
//   - release-foreign: the same release on a node whose key another owner
//     holds (a failed attempt releases on every node), nothing deleted;
//   - release-announced: a held lock's release, which wakes waiters: the
//     script, and DELEX/DELIFEQ followed by a PUBLISH in the same pipeline
//     (the form native.go does not use);
//   - extend: the script, which answers the node's TIME for the clock
//     guard; SET IFEQ PX with a TIME in the same pipeline, which would keep
//     that guard; and SET IFEQ PX alone, which would not.
func BenchmarkNativeServerCPU(b *testing.B) {
	ctx := context.Background()
	for _, server := range redistest.ServerNames {
		b.Run(server, func(b *testing.B) {
			cl := redistest.StartT(b, 1, redistest.Options{Server: server})
			rdb := cl.Servers[0].Client()
			caps := nativeCapsOf(rdb.Do(ctx, nativeCommands...))
			shas := map[*script]string{}
			for _, sc := range []*script{releaseScript, extendScript, extendScript.batched} {
				sha, err := rdb.ScriptLoad(ctx, sc.src).Result()
				if err != nil {
					b.Fatal(err)
				}
				shas[sc] = sha
			}
			const key, fence, value, other, channel = "bench{cpu}", "bench{cpu}:fence", "our-value-0123456789abcdef", "their-value-0123456789abcdef", "bench{cpu}:released"
			evalsha := func(sc *script, keys []string, argv ...any) []any {
				args := []any{"evalsha", shas[sc], len(keys)}
				for _, k := range keys {
					args = append(args, k)
				}
				return append(args, argv...)
			}
			type path struct {
				name  string
				setup []any   // sent first in the same pipeline, not counted in cmd-µs/op; nil for none
				cmds  [][]any // the operation
			}
			type row struct {
				op    string
				start string // the key's value before the row: the owner's that the setup or the row leaves there
				paths []path
			}
			setOurs := []any{"set", key, value, "px", 60000}
			// A renewal round of batchLocks locks: one batched run of the
			// extend script (renew.go), or a SET IFEQ PX per lock and one
			// TIME. The row's lock keys share key's slot; each holds value.
			const batchLocks = 16
			var calls, sets [][]any
			for i := range batchLocks {
				k := key + strconv.Itoa(i)
				calls = append(calls, extendScript.args([]string{k, k + ":fence"}, value, "30000", "0", "0"))
				sets = append(sets, []any{"set", k, value, "px", 30000, "ifeq", value})
			}
			batched := extendScript.batchArgs(calls, false)
			batched[0], batched[1] = "evalsha", shas[extendScript.batched]
			rows := []row{
				{"release-quiet", value, []path{
					{"script", setOurs, [][]any{evalsha(releaseScript, []string{key}, value, "")}},
					{"native", setOurs, [][]any{caps.deleteArgs(key, value)}},
				}},
				{"release-foreign", other, []path{
					{"script", nil, [][]any{evalsha(releaseScript, []string{key}, value, "")}},
					{"native", nil, [][]any{caps.deleteArgs(key, value)}},
				}},
				{"release-announced", value, []path{
					{"script", setOurs, [][]any{evalsha(releaseScript, []string{key}, value, channel)}},
					{"native+publish", setOurs, [][]any{caps.deleteArgs(key, value), {"publish", channel, value}}},
				}},
				{"release-announced-1-waiter", value, []path{
					{"script", setOurs, [][]any{evalsha(releaseScript, []string{key}, value, channel)}},
					{"native+publish", setOurs, [][]any{caps.deleteArgs(key, value), {"publish", channel, value}}},
				}},
				{"extend", value, []path{
					{"script", nil, [][]any{evalsha(extendScript, []string{key, fence}, value, 30000, 0, 0)}},
					{"native+time", nil, [][]any{{"set", key, value, "px", 30000, "ifeq", value}, {"time"}}},
					{"native", nil, [][]any{{"set", key, value, "px", 30000, "ifeq", value}}},
				}},
				{"renewal-16-locks", value, []path{
					{"script", nil, [][]any{batched}},
					{"native+time", nil, append(slices.Clone(sets), []any{"time"})},
				}},
			}
			for i := range batchLocks {
				if err := rdb.Set(ctx, key+strconv.Itoa(i), value, 0).Err(); err != nil {
					b.Fatal(err)
				}
			}
			for _, r := range rows {
				for _, p := range r.paths {
					if p.name != "script" && caps == 0 {
						continue // the server has no native form: the script is its only path
					}
					if strings.HasPrefix(p.name, "native") && !strings.HasPrefix(r.op, "release") && !setIfEq(ctx, rdb) {
						continue
					}
					b.Run(r.op+"/"+p.name, func(b *testing.B) {
						if err := rdb.Set(ctx, key, r.start, 0).Err(); err != nil {
							b.Fatal(err)
						}
						var counted []string
						for _, c := range p.cmds {
							if !slices.Contains(counted, c[0].(string)) {
								counted = append(counted, c[0].(string))
							}
						}
						if strings.HasSuffix(r.op, "-1-waiter") {
							// A waiter subscribed to the channel: each
							// PUBLISH delivers one message, as on a lock
							// that one client waits for.
							ps := rdb.Subscribe(ctx, channel)
							if _, err := ps.Receive(ctx); err != nil {
								b.Fatal(err)
							}
							msgs := ps.Channel(redis.WithChannelSize(1 << 16))
							go func() {
								for range msgs {
								}
							}()
							defer ps.Close()
						}
						once := func() {
							pipe := rdb.Pipeline()
							if p.setup != nil {
								pipe.Do(ctx, p.setup...)
							}
							for _, c := range p.cmds {
								pipe.Do(ctx, c...)
							}
							cmds, err := pipe.Exec(ctx)
							if err != nil && err != redis.Nil {
								b.Fatal(err)
							}
							for _, c := range cmds {
								if err := c.Err(); err != nil && err != redis.Nil {
									b.Fatal(err)
								}
							}
						}
						once() // connection made
						before := serverCPU(b, cl.Servers, counted...)
						b.ResetTimer()
						for range b.N {
							once()
						}
						b.StopTimer()
						after := serverCPU(b, cl.Servers, counted...)
						b.ReportMetric((after[0]-before[0])/float64(b.N), "cmd-µs/op")
						b.ReportMetric((after[1]-before[1])/float64(b.N), "cpu-µs/op")
						// What each row leaves: another owner's key untouched,
						// ours deleted by a release, ours kept by an extend.
						got, err := rdb.Get(ctx, key).Result()
						want := map[string]string{"release-foreign": other, "extend": value, "renewal-16-locks": value}[r.op]
						if err != nil && err != redis.Nil || got != want {
							b.Fatalf("%s left the key %q (%v), want %q", r.op, got, err, want)
						}
					})
				}
			}
		})
	}
}

// setIfEq tells whether the server takes SET ... IFEQ (Redis 8.4+, Valkey
// 8.1+), by trying it on a key of its own.
func setIfEq(ctx context.Context, rdb *redis.Client) bool {
	return rdb.Do(ctx, "set", "bench{ifeq}", "v", "ifeq", "v").Err() == redis.Nil
}
