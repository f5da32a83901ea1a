package redlock

import "strings"

// aclCommands are the commands the client sends, each for a reason:
//
//   - evalsha, eval: every lock operation is a script (lua/); eval runs a
//     script a node does not know yet, and the TTL register in the probe.
//   - script|load: the probe learns the scripts' SHA from the node (the
//     client never hashes them itself, see scripts.go). Without it the
//     scripts run by eval, longer commands and nothing else.
//   - get, set, pttl, pexpire, del, publish, time: the commands the scripts
//     run; Redis checks them against the caller's rules like any other.
//     get and pttl also serve Inspect.
//   - subscribe, unsubscribe, ping: a waiting Acquire listens to its lock's
//     release channel and confirms the subscription with a PING.
//   - spublish, ssubscribe, sunsubscribe: the same on a Redis Cluster node
//     whose masters have them (7.0+, Valkey): the scripts announce with
//     spublish, which stays in the lock's shard, and waiters listen on
//     the master of the lock's slot. A 6.x server's ACL cannot name them:
//     drop the three from the rule there.
//   - info, time, config|get: the node guards' probe (run_id, role, uptime,
//     persistence, clock). Without config|get a node never counts as
//     persistent and always sits out the restart grace after a restart.
//   - hello: go-redis' connection handshake (RESP3). go-redis also sends
//     CLIENT SETINFO (Redis 7.2 on) and goes on when it is refused.
//   - exists, zadd, zcard, zrange, zrangebyscore, zrem, zremrangebyscore,
//     zscore, hset, hget, hmget, hdel, hexists: the read-write lock's
//     readers and writer intents and the fair lock's queue are sorted sets
//     and hashes in the lock's hash slot (lua/rw_*.lua, lua/fair_queue.lua);
//     zrange also serves Client.Queue.
//   - wait, command|info: durable votes (Options.DurableVotes) wait for
//     the replicas after each vote (and read them with info after the
//     wait), and the probe asks whether the server has WAITAOF. A 7.2+ server whose AOF is on is sent WAITAOF instead,
//     which a 7.0 server's ACL cannot name: add +waitaof to the rule there.
//   - command|info, command|docs: the probe asks whether the server has
//     the native compare-and-act commands (native.go): DELEX and SET's
//     IFEQ (Redis 8.4+), DELIFEQ (Valkey 9.0+). A plain mutex's quiet
//     release and its extend use them. The rule cannot name DELEX or
//     DELIFEQ: each server refuses a rule naming a command it does not
//     have, and no server has both (aclNativeCommands). Add +delex on
//     Redis 8.4+, +delifeq on Valkey 9.0+; without it the node answers
//     NOPERM once and the client keeps the script there.
var aclCommands = []string{
	"evalsha", "eval", "script|load",
	"get", "set", "pttl", "pexpire", "del", "publish", "time",
	"subscribe", "unsubscribe", "ping",
	"spublish", "ssubscribe", "sunsubscribe",
	"info", "config|get",
	"hello",
	"exists", "zadd", "zcard", "zrange", "zrangebyscore", "zrem", "zremrangebyscore", "zscore",
	"hset", "hget", "hmget", "hdel", "hexists",
	"wait", "command|info", "command|docs",
}

// aclNativeCommands are the native commands a node may be sent where its
// server has them and its ACL allows them (see aclCommands): not in
// ACLRule, which every server must accept.
var aclNativeCommands = []string{"delex", "delifeq"}

// ACLRule is the least-privilege Redis ACL rule for the users of a client
// with the given key prefix (Options.KeyPrefix; "" for the default), to put
// after "ACL SETUSER <name> on ><password>" or "user <name> on ><password>"
// in an ACL file. It allows the commands the client sends and nothing
// else, on the keys and pub/sub channels under the prefix: the locks
// ("<prefix>{<name>}"), their fence registers ("<prefix>{<name>}:fence"),
// the register of the largest TTL in use ("<prefix>ttl-in-use"), the
// data-kept marker the probe sets and reads ("<prefix>data-kept{...}"), the
// read-write and fair locks' sets and a semaphore's slots and record of its
// number of permits beside them, and the release channels
// ("<prefix>{<name>}:released"). One rule serves every primitive.
// ForceUnlock needs incr on top; fence.Set needs hget and hset on the
// resource's own key.
func ACLRule(keyPrefix string) string {
	if keyPrefix == "" {
		keyPrefix = DefaultKeyPrefix
	}
	// The prefix is a glob in the rule: its own glob characters are escaped.
	pattern := globEscaper.Replace(keyPrefix) + "*"
	var b strings.Builder
	b.WriteString("resetkeys resetchannels -@all ~" + pattern + " &" + pattern)
	for _, c := range aclCommands {
		b.WriteString(" +" + c)
	}
	return b.String()
}

var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)
