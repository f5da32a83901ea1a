-- Give back a permit on this node: delete every slot key that holds our
-- owner value, and tell waiting clients a permit is free. An attempt sets
-- at most one slot per node, but the nodes may have chosen different slots
-- (a split), so the release looks at all of them rather than trust the
-- slot the client won.
-- The record of K goes with the last slot key: if it records this K (a
-- record of another K guards slots this release does not look at), it is
-- deleted once none of the K slot keys is left here, and otherwise made to
-- expire with the slot key that lives longest: the acquires and extensions
-- only ever lengthen it.
-- KEYS[1..K] the slot keys, KEYS[K+1] the record of K; ARGV[1] owner value, ARGV[2] the semaphore's
-- release channel ("" to stay quiet: the cleanup of a failed attempt frees
-- nothing anyone waits for), ARGV[3] the slot the client won (-1: none),
-- ARGV[4] a slot to keep (-1: none): the won slot, when a won attempt only
-- clears the other slots some nodes gave it, ARGV[5] K.
-- Returns {1} when the won slot's key was ours and is deleted (with no slot
-- won: when any key was), {0} otherwise.
local won, keep = tonumber(ARGV[3]), tonumber(ARGV[4])
local k = #KEYS - 1
local deleted, wonDeleted = false, false
for i = 1, k do
  if i - 1 ~= keep and redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    deleted = true
    if i - 1 == won then
      wonDeleted = true
    end
  end
end
if redis.call('GET', KEYS[k + 1]) == ARGV[5] then
  -- The record is made to expire with the slot key that lives longest: never
  -- earlier, later by at most the time between the PTTL and the PEXPIRE
  -- below (Redis 7.0 reads its clock anew for each); it goes with the last.
  local longest = -2
  for i = 1, k do
    local pttl = redis.call('PTTL', KEYS[i])
    if pttl == -1 or (longest ~= -1 and pttl > longest) then
      longest = pttl
    end
  end
  if longest == -2 then
    redis.call('DEL', KEYS[k + 1])
  elseif longest > 0 then
    redis.call('PEXPIRE', KEYS[k + 1], longest)
  end
end
if deleted and ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], ARGV[1])
end
if wonDeleted or (won < 0 and deleted) then
  return {1}
end
return {0}
