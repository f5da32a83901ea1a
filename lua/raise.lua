-- Slow path of the fencing protocol: raise the fence register to the token
-- the client chose, but only while this node still holds the lock for us.
-- KEYS[1] lock key, KEYS[2] fence register; ARGV[1] owner value, ARGV[2] token
-- (at least 1: the slow path's token is max f + 1, with fencing on),
-- ARGV[3] the fence register's lifetime in ms (0: it never expires)
-- Returns {1} when the register now holds at least the token, {0} otherwise.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0}
end
local ok, wrote = raise(KEYS[2], ARGV[2], ARGV[3])
if not ok then
  return {0}
end
if wrote == false then
  -- Already raised (a retried command): the yes still writes, the same
  -- value, so that a WAIT behind it covers a write of its own
  -- connection (see acquire.lua).
  redis.call('SET', KEYS[2], ARGV[2], 'KEEPTTL')
end
return {1}
