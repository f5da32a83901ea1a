-- Extend a reader of a read-write lock if its entry is still live here. If
-- it is gone (the node lost its data) add it again, unless a writer holds
-- the lock here or was admitted here since the reader saw the fence
-- register: that repairs a node that restarted empty without ever holding
-- a reader and a writer at once. A waiting writer's intent does not stop
-- an extension: it only keeps new readers out.
-- KEYS[1] writer key, KEYS[2] fence register, KEYS[3] readers
-- ARGV[1] owner value, ARGV[2] TTL in ms, ARGV[3] the fence value the
-- reader saw (-1: fencing off), ARGV[4] unused (the writer's extend takes
-- the fence register's lifetime there)
-- Returns {status, sec, usec}: 1 extended, 2 repaired, 0 a writer holds it,
-- -1 a writer was admitted here since (our read is stale).
local now = redis.call('TIME')
local sec, usec = tonumber(now[1]), tonumber(now[2])
local nowus = sec * 1000000 + usec
local ttl = tonumber(ARGV[2])
local function keep()
  redis.call('ZADD', KEYS[3], nowus + ttl * 1000, ARGV[1])
  if redis.call('PTTL', KEYS[3]) < ttl + 1 then
    redis.call('PEXPIRE', KEYS[3], ttl + 1)
  end
end
local score = redis.call('ZSCORE', KEYS[3], ARGV[1])
if score and tonumber(score) > nowus then
  keep()
  return {1, sec, usec}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, sec, usec}
end
local seen = tonumber(ARGV[3])
if seen >= 0 and tonumber(redis.call('GET', KEYS[2]) or '0') > seen then
  return {-1, sec, usec}
end
keep()
return {2, sec, usec}
