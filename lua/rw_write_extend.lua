-- Extend the write side of a read-write lock if we still own it here. If
-- the key is gone (the node lost its data) set it again, unless a live
-- reader or a newer token is here: the mutex's repair (extend.lua), which
-- must also never put a writer beside a reader.
-- KEYS[1] writer key, KEYS[2] fence register, KEYS[3] readers
-- ARGV[1] owner value, ARGV[2] TTL in ms, ARGV[3] the lock's token (0: fencing off),
-- ARGV[4] the fence register's lifetime in ms (0: it never expires)
-- Returns {status, sec, usec}: 1 extended, 2 repaired, 0 another owner
-- (a writer or a reader) holds it, -1 a newer token was issued here.
local held = renew(KEYS[1], ARGV[1], ARGV[2])
if held then
  return {held, sec, usec}
end
if not raise(KEYS[2], ARGV[3], ARGV[4], true) then
  return {-1, sec, usec}
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', sec * 1000000 + usec)
if redis.call('ZCARD', KEYS[3]) > 0 then
  return {0, sec, usec}
end
raise(KEYS[2], ARGV[3], ARGV[4])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {2, sec, usec}
