-- The node's register of the largest lock TTL that any client uses on it
-- (DESIGN §3). A node that restarted empty must sit out for the longest lock
-- it may have forgotten, whoever held it: a client learns that TTL from the
-- registers of the nodes that did not restart. Every client raises the
-- register on a node before its acquires and extends there count, and keeps
-- raising it while it uses the TTL, so the register decays once no client
-- uses a long TTL any more.
-- KEYS[1] the register; ARGV[1] TTL in ms to raise it to (0: only read);
-- ARGV[2] how long this raise must be kept, in ms.
-- Returns {the largest TTL in ms, 0 if none}.
local largest = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  -- Never shorten what an earlier raise promised to keep.
  local keep = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2]))
  largest = math.max(largest, ttl)
  redis.call('SET', KEYS[1], largest, 'PX', keep)
end
return {largest}
