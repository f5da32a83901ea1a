-- Take one permit of a semaphore on this node: the first free slot in the
-- order the client chose for this attempt, and in the same round trip read
-- and raise that slot's fence register (DESIGN §2, §5 design (b)). Each slot
-- is a mutex of its own: this script sets at most one slot key, and only if
-- it was absent, so per slot it acts exactly as the mutex's acquire does.
-- The node also records the number of permits K its live slots were taken
-- with, and refuses another number: slot i is the same key for every K, so
-- a client of a larger K would take the slots a smaller K keeps free. The
-- record lives at least as long as every slot key here (the acquire and
-- lua/semaphore_extend.lua lengthen it to the slot's TTL, the release
-- deletes it with the last slot key).
-- KEYS[1..K] the slot keys, KEYS[K+1..2K] their fence registers, KEYS[2K+1]
-- the record of K (one hash tag)
-- ARGV[1] owner value, ARGV[2] TTL in ms, ARGV[3] fencing proposal (0: fencing off),
-- ARGV[4] the fence registers' lifetime in ms (0: they never expire),
-- ARGV[5] the slot to try first (0-based); the others follow in turn,
-- ARGV[6] K.
-- Returns {1, fence before, sec, usec, slot} when a slot is ours here,
--         {0, shortest pttl of the holders, sec, usec, -1} when all K are taken,
--         {2, pttl of the record, sec, usec, recorded K} when another K is
--         recorded (nothing is written then).
local k = (#KEYS - 1) / 2
local record = KEYS[2 * k + 1]
local recorded = redis.call('GET', record)
if recorded and recorded ~= ARGV[6] then
  return {2, redis.call('PTTL', record), sec, usec, tonumber(recorded) or -1}
end
local first = tonumber(ARGV[5])
local slot, free = -1, -1
for j = 0, k - 1 do
  local i = (first + j) % k
  local owner = redis.call('GET', KEYS[i + 1])
  -- A value equal to ours means a retried command already won here: keep
  -- that slot rather than take a second one.
  if owner == ARGV[1] then
    slot = i
    -- Its yes still writes (the same value, same expiry), so that a
    -- WAIT behind this call covers a write of its own connection (see
    -- lua/acquire.lua).
    redis.call('SET', KEYS[i + 1], ARGV[1], 'KEEPTTL')
    break
  end
  if not owner and free < 0 then
    free = i
  end
end
if slot < 0 and free >= 0 then
  slot = free
  redis.call('SET', KEYS[slot + 1], ARGV[1], 'PX', ARGV[2])
end
if slot < 0 then
  local shortest = -1
  for i = 1, k do
    local pttl = redis.call('PTTL', KEYS[i])
    if pttl >= 0 and (shortest < 0 or pttl < shortest) then
      shortest = pttl
    end
  end
  return {0, shortest, sec, usec, -1}
end
-- The record outlives the slot just taken (or kept): never shortened.
if redis.call('PTTL', record) < tonumber(ARGV[2]) then
  redis.call('SET', record, ARGV[6], 'PX', ARGV[2])
end
return {1, propose(KEYS[k + slot + 1], ARGV[3], ARGV[4]), sec, usec, slot}
