-- Release a reader of a read-write lock; the last reader out tells the
-- waiting writers (and readers) that the lock is free.
-- KEYS[1] readers (ZSET: owner value -> expiry in µs of this node's clock)
-- ARGV[1] owner value, ARGV[2] the lock's release channel, or "" to stay
-- quiet (the cleanup of a failed attempt).
-- The message is "*" and the owner value: "*" asks every waiter of the lock
-- to try, since readers do not exclude each other.
-- Returns {1} when our entry was still live here, {0} otherwise.
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return {0}
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', nowus)
if ARGV[2] ~= '' and redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('PUBLISH', ARGV[2], '*' .. ARGV[1])
end
if tonumber(score) > nowus then
  return {1}
end
return {0}
