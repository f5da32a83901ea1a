-- Extend a semaphore's permit: lua/extend.lua on the slot won (renew the slot
-- key if we still own it, repair it if it is gone unless the fence register
-- shows a newer holder), and keep the record of the number of permits K
-- alive at least as long as the slot key (see lua/semaphore_acquire.lua). A
-- node that records another K gets no repair: its live slots were taken with
-- that K, and a slot of ours beside them would let more holders in than
-- either number allows.
-- KEYS[1] the slot key, KEYS[2] its fence register, KEYS[3] the record of K
-- ARGV[1] owner value, ARGV[2] TTL in ms, ARGV[3] the permit's token (0: fencing off),
-- ARGV[4] the fence register's lifetime in ms (0: it never expires), ARGV[5] K
-- Returns {status, sec, usec}: 1 extended, 2 repaired, 0 another owner holds
-- the slot or another K is recorded, -1 a newer token was issued here.
local recorded = redis.call('GET', KEYS[3])
if recorded and recorded ~= ARGV[5] then
  return {0, sec, usec}
end
local ttl = tonumber(ARGV[2])
local held = renew(KEYS[1], ARGV[1], ARGV[2])
if held == 0 then
  return {0, sec, usec}
end
if not held then
  if not raise(KEYS[2], ARGV[3], ARGV[4]) then
    return {-1, sec, usec}
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
-- The record lives at least as long as the slot key, extended or repaired.
if redis.call('PTTL', KEYS[3]) < ttl then
  redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[2])
end
return {held or 2, sec, usec}
