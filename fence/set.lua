-- Resource side of fencing: write a value only with a token at least as
-- high as any token this resource accepted before.
-- KEYS[1] resource hash (fields "value" and "fence"); ARGV[1] token, ARGV[2] value
-- Returns {1, highest before} when written, {0, highest} when the token is stale.
local highest = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) < highest then
  return {0, highest}
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return {1, highest}
