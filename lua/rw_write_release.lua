-- Release the write side of a read-write lock if we own it here, and tell
-- every waiter of the lock: the readers may all come in at once.
-- KEYS[1] writer key; ARGV[1] owner value, ARGV[2] the lock's release
-- channel, or "" to stay quiet (the cleanup of a failed attempt).
-- The message is "*" and the owner value: "*" wakes every waiter, not one.
-- Returns {1} when deleted, {0} when the key was not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], '*' .. ARGV[1])
  end
  return {1}
end
return {0}
