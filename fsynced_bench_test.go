package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlabs/redlock"
	"github.com/quorumlabs/redlock/redistest"
)

// BenchmarkFsyncedVotes measures what FsyncedVotes costs an acquire: three
// nodes with appendfsync everysec whose votes wait for WAITAOF's
// confirmation of their fsync, against appendfsync always (fsynced before
// the reply, no WAITAOF) and against no persistence (the nodes sit out the
// restart grace after a restart instead; an acquire pays nothing). One
// acquire and release at a time, p50 and p99 of the acquires. Run it on a
// server whose WAITAOF FsyncedVotes trusts, Redis 8.0+ (on Valkey and Redis
// 7.x the option keeps the always-only rule for persistence, and its votes
// wait for a WAITAOF all the same; on Redis 7.0 it is an unknown command):
//
//	REDLOCK_TEST_SERVER=redis-8.6 go test -run '^$' -bench BenchmarkFsyncedVotes -benchtime 100x -count 3 .
func BenchmarkFsyncedVotes(b *testing.B) {
	for _, tc := range []struct {
		name   string
		server redistest.Options
		opts   redlock.Options
	}{
		{"everysec+waitaof", redistest.Options{Args: everysec},
			redlock.Options{TTL: 10 * time.Second, NodeTimeout: 3 * time.Second, FsyncedVotes: true}},
		{"always", redistest.Options{Persistence: true},
			redlock.Options{TTL: 10 * time.Second}},
		// The option sends its WAITAOF whatever the node's persistence:
		// with always it confirms at once (the write was fsynced before
		// the reply), with the AOF off it is refused at once and the vote
		// counts unconfirmed.
		{"always+waitaof", redistest.Options{Persistence: true},
			redlock.Options{TTL: 10 * time.Second, NodeTimeout: 3 * time.Second, FsyncedVotes: true}},
		{"none-grace", redistest.Options{},
			// The nodes were started just now: without persistence they
			// would sit out the grace first, which is not what is measured.
			redlock.Options{TTL: 10 * time.Second, RestartGrace: redlock.NoRestartGrace}},
		{"none+waitaof", redistest.Options{},
			redlock.Options{TTL: 10 * time.Second, NodeTimeout: 3 * time.Second, RestartGrace: redlock.NoRestartGrace, FsyncedVotes: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cl := redistest.StartT(b, 3, tc.server)
			c, err := redlock.New(cl.Clients(), tc.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			// First contact (probes, and with FsyncedVotes the barrier)
			// is not an acquire's steady cost.
			if l, err := c.Acquire(ctx, "warm-up"); err != nil {
				b.Fatal(err)
			} else if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
			acquireLatencies(b, ctx, c, true)
		})
	}
}
