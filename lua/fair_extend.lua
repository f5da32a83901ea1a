-- Extend a fair lock's holder (lua/fair_queue.lua) if we still own the key
-- here, as lua/extend.lua does for the mutex, and pin the key: a grant our
-- claim round never reached (the node sat out then) is ours but movable,
-- and settle must not hand it to another waiter once an extend counted it
-- for our validity. The holder waits no more: its queue entry here leaves.
-- If the key is gone (the node lost its data, or our key expired and
-- nobody took it) set it again, unless the fence register shows a newer
-- holder: that repairs a node that restarted empty. A repaired key has no
-- grant record, so settle never moves it.
-- KEYS[1] lock key, KEYS[2] fence register, KEYS[3] queue, KEYS[4] entry
-- expiries, KEYS[5] waiter settings, KEYS[6] grant record (fair_queue.lua)
-- ARGV[1] owner value, ARGV[2] TTL in ms, ARGV[3] the lock's token (0:
-- fencing off), ARGV[4] the fence register's lifetime in ms (0: for ever)
-- Returns {status, sec, usec}: 1 extended, 2 repaired, 0 another owner holds
-- it, -1 a newer token was issued here (our lock is stale).
local me, grant = ARGV[1], KEYS[6]
local function forget()
  redis.call('ZREM', KEYS[3], me)
  redis.call('ZREM', KEYS[4], me)
  redis.call('HDEL', KEYS[5], me)
end
local held = renew(KEYS[1], me, ARGV[2])
if held == 1 then
  if redis.call('HGET', grant, 'owner') == me then
    -- No wait of ours undoes this pin: we wait no more.
    redis.call('HSET', grant, 'claimed', 'held')
    redis.call('PEXPIRE', grant, ARGV[2])
  end
  forget()
  return {1, sec, usec}
end
if held then
  return {0, sec, usec}
end
if not raise(KEYS[2], ARGV[3], ARGV[4]) then
  return {-1, sec, usec}
end
redis.call('SET', KEYS[1], me, 'PX', ARGV[2])
redis.call('DEL', grant)
forget()
return {2, sec, usec}
