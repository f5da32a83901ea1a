-- Extend the lock if we still own it here. If the key is gone (the node lost
-- its data, or our key expired and nobody took it) set it again, unless the
-- fence register shows a newer holder: that repairs a node that restarted empty.
-- KEYS[1] lock key, KEYS[2] fence register, KEYS[3] (only with metadata) holder key
-- ARGV[1] owner value, ARGV[2] TTL in ms, ARGV[3] the lock's token (0: fencing off),
-- ARGV[4] the fence register's lifetime in ms (0: it never expires),
-- ARGV[5] (with KEYS[3]) the holder's metadata
-- Returns {status, sec, usec}: 1 extended, 2 repaired, 0 another owner holds it,
-- -1 a newer token was issued here (our lock is stale).
local held = renew(KEYS[1], ARGV[1], ARGV[2])
if held == 1 and KEYS[3] then
  redis.call('PEXPIRE', KEYS[3], ARGV[2]) -- the metadata lives as long as the lock
end
if held then
  return {held, sec, usec}
end
if not raise(KEYS[2], ARGV[3], ARGV[4]) then
  return {-1, sec, usec}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if KEYS[3] then
  redis.call('SET', KEYS[3], ARGV[1] .. ARGV[5], 'PX', ARGV[2])
end
return {2, sec, usec}
