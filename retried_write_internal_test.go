package redlock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quorumlabs/redlock/redistest"
)

// Every vote script that answers yes writes, also when it runs a second
// time (a call go-redis sent again after its connection broke, which finds
// its own value): from Redis 7.2, and on Valkey, a WAIT covers only its
// connection's own writes, so a yes without a write makes the WAIT behind
// it prove nothing (PROTOCOL §12). A write shows as the master's
// replication offset moving: each script here runs twice, and the second
// run must move it. (A replication PING may move it too, every 10s: that
// can only hide a failure in the rare run it falls into.)
func TestEveryVoteScriptWritesWhenItAnswersYesAgain(t *testing.T) {
	masters, _ := redistest.StartReplicatedT(t, 1, redistest.Options{}) // in sync: the offset counts from here
	m := masters.Servers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := m.Client()
	offset := func() int64 {
		t.Helper()
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		off, err := strconv.ParseInt(parseInfo(info)["master_repl_offset"], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return off
	}
	run := func(s *script, keys []string, argv ...any) []int64 {
		t.Helper()
		vals, err := redisRunner{rdb}.run(ctx, s, s.args(keys, argv...))
		if err != nil {
			t.Fatal(err)
		}
		return vals
	}
	const owner, ttl = "owner-value", int64(10000)
	fence := int64(1_000_000)
	for _, tc := range []struct {
		what  string
		setup func(k string) // the calls before the one run twice
		call  func(k string) []int64
	}{
		{"acquire (fencing off)", nil, func(k string) []int64 {
			return run(acquireScript, []string{k, k + fenceSuffix}, owner, ttl, 0, 0)
		}},
		{"acquire (fencing on, register kept for ever)", nil, func(k string) []int64 {
			return run(acquireScript, []string{k, k + fenceSuffix}, owner, ttl, fence, 0)
		}},
		{"raise (register kept for ever)", func(k string) {
			run(acquireScript, []string{k, k + fenceSuffix}, owner, ttl, fence, 0)
		}, func(k string) []int64 {
			return run(raiseScript, []string{k, k + fenceSuffix}, owner, fence+1, 0)
		}},
		{"extend", func(k string) {
			run(acquireScript, []string{k, k + fenceSuffix}, owner, ttl, 0, 0)
		}, func(k string) []int64 {
			return run(extendScript, []string{k, k + fenceSuffix}, owner, ttl, 0, 0)
		}},
		{"reader's acquire", nil, func(k string) []int64 {
			return run(rwReadAcquireScript, []string{k, k + fenceSuffix, k + ":readers", k + ":intents"}, owner, ttl, 0, 0)
		}},
		{"reader's raise", func(k string) {
			run(rwReadAcquireScript, []string{k, k + fenceSuffix, k + ":readers", k + ":intents"}, owner, ttl, fence, 0)
		}, func(k string) []int64 {
			return run(rwReadRaiseScript, []string{k, k + fenceSuffix, k + ":readers"}, owner, fence, 0)
		}},
		{"reader's extend", func(k string) {
			run(rwReadAcquireScript, []string{k, k + fenceSuffix, k + ":readers", k + ":intents"}, owner, ttl, 0, 0)
		}, func(k string) []int64 {
			return run(rwReadExtendScript, []string{k, k + fenceSuffix, k + ":readers"}, owner, ttl, 0, 0)
		}},
		{"writer's acquire", nil, func(k string) []int64 {
			return run(rwWriteAcquireScript, []string{k, k + fenceSuffix, k + ":readers", k + ":intents"}, owner, ttl, 0, 0, "", 0)
		}},
		{"writer's extend", func(k string) {
			run(rwWriteAcquireScript, []string{k, k + fenceSuffix, k + ":readers", k + ":intents"}, owner, ttl, 0, 0, "", 0)
		}, func(k string) []int64 {
			return run(rwWriteExtendScript, []string{k, k + fenceSuffix, k + ":readers"}, owner, ttl, 0, 0)
		}},
		{"semaphore's acquire", nil, func(k string) []int64 {
			return run(semaphoreAcquireScript, []string{k + ":0", k + ":0" + fenceSuffix, k + ":k"}, owner, ttl, 0, 0, 0, 1)
		}},
		{"semaphore's extend", func(k string) {
			run(semaphoreAcquireScript, []string{k + ":0", k + ":0" + fenceSuffix, k + ":k"}, owner, ttl, 0, 0, 0, 1)
		}, func(k string) []int64 {
			return run(semaphoreExtendScript, []string{k + ":0", k + ":0" + fenceSuffix, k + ":k"}, owner, ttl, 0, 0, 1)
		}},
		{"fair take", nil, func(k string) []int64 {
			return run(fairQueueScript, fairKeys(k), "take", owner, 1, ttl, 0, 0, 0, ttl, k+":released", "0", 1)
		}},
		{"fair extend", func(k string) {
			run(fairQueueScript, fairKeys(k), "take", owner, 1, ttl, 0, 0, 0, ttl, k+":released", "0", 1)
		}, func(k string) []int64 {
			return run(fairExtendScript, fairKeys(k), owner, ttl, 0, 0)
		}},
		{"TTL register's raise", nil, func(k string) []int64 {
			return run(ttlRegisterScript, []string{k}, ttl, 3*ttl)
		}},
	} {
		k := "{" + tc.what + "}"
		if tc.setup != nil {
			tc.setup(k)
		}
		first := tc.call(k)
		before := offset()
		again := tc.call(k)
		if len(first) == 0 || len(again) == 0 || (tc.what != "TTL register's raise" && (first[0] != 1 || again[0] != 1)) {
			t.Errorf("%s: answered %v, then %v: want yes twice", tc.what, first, again)
			continue
		}
		if after := offset(); after == before {
			t.Errorf("%s: answered yes a second time without a write (replication offset %d before and after)", tc.what, before)
		}
	}
}

func fairKeys(k string) []string {
	return []string{k, k + fenceSuffix, k + queueSuffix, k + expirySuffix, k + settingsSuffix, k + grantSuffix}
}
