-- Extend the write side of a read-write lock if we still own it here. If
-- the key is gone (the node lost its data) set it again, unless a live
-- reader or a newer token is here: the mutex's repair (extend.lua), which
-- must also never put a writer beside a reader.
-- KEYS[1] writer key, KEYS[2] fence register, KEYS[3] readers
-- ARGV[1] owner value, ARGV[2] TTL in ms, ARGV[3] the lock's token (0: fencing off),
-- ARGV[4] the fence register's lifetime in ms (0: it never expires)
-- Returns {status, sec, usec}: 1 extended, 2 repaired, 0 another owner
-- (a writer or a reader) holds it, -1 a newer token was issued here.
local now = redis.call('TIME')
local sec, usec = tonumber(now[1]), tonumber(now[2])
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, sec, usec}
end
if owner then
  return {0, sec, usec}
end
local token = tonumber(ARGV[3])
if token > 0 then
  local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
  if fence > token then
    return {-1, sec, usec}
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', sec * 1000000 + usec)
if redis.call('ZCARD', KEYS[3]) > 0 then
  return {0, sec, usec}
end
if token > 0 then
  local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
  if ARGV[4] ~= '0' then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4]) -- token >= fence here
  elseif token > fence then
    redis.call('SET', KEYS[2], ARGV[3])
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {2, sec, usec}
