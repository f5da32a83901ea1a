-- Take the lock on this node and, in the same round trip, read and raise
-- the fence register (DESIGN §2).
-- KEYS[1] lock key, KEYS[2] fence register, KEYS[3] (only with metadata) holder
-- key, all with one hash tag
-- ARGV[1] owner value, ARGV[2] TTL in ms, ARGV[3] fencing proposal (0: fencing off),
-- ARGV[4] the fence register's lifetime in ms (0: it never expires),
-- ARGV[5] (with KEYS[3]) the holder's metadata
-- Returns {1, fence before, sec, usec} when the lock is ours here,
--         {0, pttl of the holder, sec, usec} when another owner has it.
-- The node's TIME rides along so the client can spot a clock jump for free.
-- A value equal to ours means a retried command already won here. Its
-- yes must still write (here the same value, same expiry): from Redis 7.2
-- a WAIT behind this call covers only this connection's own writes, and
-- without one it would be answered by the replicas' earlier
-- acknowledgements (PROTOCOL §12).
local won = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if not won and redis.call('GET', KEYS[1]) == ARGV[1] then
  won = redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
end
if won then
  if KEYS[3] then
    -- Prefixed with the owner value: a reader shows it only beside that owner's key.
    redis.call('SET', KEYS[3], ARGV[1] .. ARGV[5], 'PX', ARGV[2])
  end
  return {1, propose(KEYS[2], ARGV[3], ARGV[4]), sec, usec}
end
return {0, redis.call('PTTL', KEYS[1]), sec, usec}
