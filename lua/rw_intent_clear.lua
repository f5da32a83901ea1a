-- Withdraw a writer's intent from this node once the writer got the lock
-- or gave up, and, when no other writer waits, tell the waiting readers.
-- KEYS[1] writer intents (ZSET: intent id -> expiry in µs of this node's clock)
-- ARGV[1] intent id, ARGV[2] the lock's release channel
-- Returns {1} when the intent was here, {0} otherwise.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return {0}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', nowus)
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('PUBLISH', ARGV[2], '*' .. ARGV[1])
end
return {1}
