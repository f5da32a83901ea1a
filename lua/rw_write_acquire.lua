-- Take the write side of a read-write lock on this node: only while no
-- writer holds it and no live reader does. In the same round trip read and
-- raise the fence register, exactly as the mutex's acquire does (DESIGN §2):
-- writers and mutex holders of one name share the register.
-- A refused writer that waits records its intent, which keeps new readers
-- out of this node until the intent expires or the writer is done.
-- KEYS[1] writer key (the mutex's lock key), KEYS[2] fence register,
-- KEYS[3] readers (ZSET: owner value -> expiry in µs of this node's clock),
-- KEYS[4] writer intents (ZSET: intent id -> expiry in µs); one hash tag.
-- ARGV[1] owner value, ARGV[2] TTL in ms, ARGV[3] fencing proposal (0: off),
-- ARGV[4] the fence register's lifetime in ms (0: it never expires),
-- ARGV[5] intent id ("" records none: a single try), ARGV[6] intent TTL in ms
-- Returns {1, fence before, sec, usec} when the lock is ours here,
--         {0, how long the holders keep it at most in ms, sec, usec}.
local owner = redis.call('GET', KEYS[1])
local won = owner == ARGV[1] -- a retried command that already won here
local hint = -1
if won then
  -- Its yes still writes (the same value, same expiry), so that a WAIT
  -- behind this call covers a write of its own connection (see
  -- acquire.lua).
  redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
elseif owner then
  hint = redis.call('PTTL', KEYS[1])
else
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', nowus)
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    won = true
  else
    hint = math.ceil((tonumber(last[2]) - nowus) / 1000)
  end
end
if won then
  if ARGV[5] ~= '' then
    redis.call('ZREM', KEYS[4], ARGV[5])
  end
  return {1, propose(KEYS[2], ARGV[3], ARGV[4]), sec, usec}
end
-- Refused: the writer's intent, when it waits. Here, after the winner's
-- return, so that a run that wins makes no closure of enter.
if ARGV[5] ~= '' then
  enter(KEYS[4], ARGV[5], tonumber(ARGV[6]))
end
return {0, hint, sec, usec}
