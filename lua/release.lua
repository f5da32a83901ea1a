-- Delete the lock only if we own it, and tell waiting clients it is free.
-- KEYS[1] lock key, KEYS[2] (only with metadata) the holder key, which is ours
-- while the lock key is; ARGV[1] owner value, ARGV[2] the lock's release channel
-- ("<lock key>:released", in the key's hash slot), or "" to stay quiet: the
-- cleanup of a failed attempt frees nothing anyone waits for, and waking
-- every waiter for it makes contenders collide again in lockstep.
-- The message is the owner value: waiters drop the copies that the other
-- nodes publish for the same release.
-- Returns {1} when deleted, {0} when the key was not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if KEYS[2] then
    redis.call('DEL', KEYS[2])
  end
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], ARGV[1])
  end
  return {1}
end
return {0}
