-- Extend a reader of a read-write lock if its entry is still live here. If
-- it is gone (the node lost its data) add it again, unless a writer holds
-- the lock here or a token above the reader's was issued here since (by a
-- writer, or by a later reader's proposal), and write the reader's token
-- into the register, as the mutex's repair does: that repairs a node that
-- restarted empty without ever holding a reader and a writer at once, and
-- a writer after the reader that counts this node draws a token above it.
-- A waiting writer's intent does not stop an extension: it only keeps new
-- readers out.
-- KEYS[1] writer key, KEYS[2] fence register, KEYS[3] readers
-- ARGV[1] owner value, ARGV[2] TTL in ms, ARGV[3] the reader's token (0:
-- fencing off, the register is left alone), ARGV[4] the fence register's
-- lifetime in ms (0: it never expires)
-- Returns {status, sec, usec}: 1 extended, 2 repaired, 0 a writer holds it,
-- -1 a newer token was issued here (our entry is not put back).
local ttl = tonumber(ARGV[2])
local score = redis.call('ZSCORE', KEYS[3], ARGV[1])
if score and tonumber(score) > nowus then
  enter(KEYS[3], ARGV[1], ttl)
  return {1, sec, usec}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, sec, usec}
end
if not raise(KEYS[2], ARGV[3], ARGV[4]) then
  return {-1, sec, usec}
end
enter(KEYS[3], ARGV[1], ttl)
return {2, sec, usec}
