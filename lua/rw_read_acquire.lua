-- Admit a reader of a read-write lock on this node: only while no writer
-- holds it and no writer waits (writer intent), so a stream of readers
-- cannot starve a writer (DESIGN §5). In the same round trip read and raise
-- the fence register to the reader's proposal, as a writer's acquire does:
-- a writer after the reader then draws a token above it.
-- KEYS[1] writer key (the mutex's lock key), KEYS[2] fence register,
-- KEYS[3] readers (ZSET: owner value -> expiry in µs of this node's clock),
-- KEYS[4] writer intents (ZSET: intent id -> expiry in µs); one hash tag.
-- ARGV[1] owner value, ARGV[2] TTL in ms, ARGV[3] fencing proposal (0: off,
-- the register is left alone), ARGV[4] the fence register's lifetime in ms
-- (0: it never expires)
-- Returns {1, fence register before, sec, usec} when admitted here,
--         {0, writer's PTTL or -1 when a waiting writer refused us, sec, usec}.
-- A retried command that already won here is admitted again. Its yes
-- still writes (the entry, from now: it only lives longer than the reader
-- counts on), so that a WAIT behind this call covers a write of its own
-- connection (see acquire.lua).
local mine = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not (mine and tonumber(mine) > nowus) then
  local writer = redis.call('PTTL', KEYS[1])
  if writer ~= -2 then
    return {0, writer, sec, usec}
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', nowus)
  if redis.call('ZCARD', KEYS[4]) > 0 then
    return {0, -1, sec, usec}
  end
end
-- Admitted: the entry, then the acquire's fence step (a reader's
-- acquisition renews the register's lifetime too). No local function of
-- the file's own: a closure at every run.
enter(KEYS[3], ARGV[1], tonumber(ARGV[2]))
return {1, propose(KEYS[2], ARGV[3], ARGV[4]), sec, usec}
