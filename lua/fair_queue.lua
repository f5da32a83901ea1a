-- The fair lock on one node (DESIGN §5): a queue of waiters ordered by
-- ticket, and the rule that the node grants its lock key only to the live
-- head of that queue. Every operation first drops the waiters whose entry
-- expired, then does its own part, then applies the rule (settle), so a
-- free key or a grant to a dead waiter moves on whenever anyone calls.
--
-- KEYS[1] lock key, KEYS[2] fence register, KEYS[3] queue (ZSET: score the
-- ticket, member the owner value; equal tickets order by the random owner
-- value, the same on every node), KEYS[4] entry expiries (ZSET: score the
-- node's time in ms), KEYS[5] waiter settings (HASH: owner value -> TTL in
-- ms), KEYS[6] the grant record (HASH: owner, claimed = 0 while movable,
-- else the claim round that pinned it, or "held" once the holder extended
-- it; see lua/fair_extend.lua), all in one slot.
-- ARGV[1] op: wait | take | leave | release
-- ARGV[2] owner value, ARGV[3] ticket, ARGV[4] TTL in ms,
-- ARGV[5] wait, take: the caller's last take round that fell short (0: none),
-- ARGV[6] take: the round's fencing proposal (0: fencing off),
-- ARGV[7] fence register lifetime in ms (0: for ever), ARGV[8] queue entry
-- lifetime in ms, ARGV[9] the lock's channel, ARGV[10] "1": a release that
-- frees the key stays quiet (a cleanup), ARGV[11] take: this round's number
-- (1, 2, ...).
-- Returns {status, value, sec, usec}:
--   wait:    status 1 the key is ours here (granted), 0 not; value the
--            holder's PTTL (-2: no key)
--   take:    a wait that, when the key is ours after it, claims it: status
--            1 claimed (key extended to the TTL, grant pinned with the
--            round's number, fence register raised to the proposal), value
--            the fence register before; 0 not ours, value the PTTL
--   leave:   {0, PTTL}: the caller holds the lock by a take round and
--            leaves this queue
--   release: {1} the key was ours (handed on or deleted), {0} not
local nowms = sec * 1000 + math.floor(usec / 1000)
local op, me = ARGV[1], ARGV[2]
local queue, expiry, settings, grant = KEYS[3], KEYS[4], KEYS[5], KEYS[6]

local function forget(w)
  redis.call('ZREM', queue, w)
  redis.call('ZREM', expiry, w)
  redis.call('HDEL', settings, w)
end

-- Nobody queued, not even an expired entry: the uncontended case needs
-- none of the queue's work below.
if redis.call('EXISTS', queue) == 0 then
  local holder = redis.call('GET', KEYS[1])
  if op == 'take' and not holder then
    -- A free key: the general path would register us, give us the key as
    -- the head, claim it and drop our entry again; this leaves the same
    -- key, grant record (both fields written) and fence register.
    redis.call('SET', KEYS[1], me, 'PX', ARGV[4])
    redis.call('HSET', grant, 'owner', me, 'claimed', ARGV[11])
    redis.call('PEXPIRE', grant, ARGV[4])
    return {1, propose(KEYS[2], ARGV[6], ARGV[7]), sec, usec}
  end
  if op == 'release' and holder == me then
    redis.call('DEL', KEYS[1], grant)
    if ARGV[10] ~= '1' then
      redis.call('PUBLISH', ARGV[9], me)
    end
    return {1}
  end
end

-- Waiters that stopped refreshing (gave up uncleanly, or died) leave.
for _, w in ipairs(redis.call('ZRANGEBYSCORE', expiry, '-inf', nowms)) do
  forget(w)
end

-- Give the key to waiter w: set it with w's TTL and record the grant,
-- movable until w claims it. The fence register is left alone: the claim
-- raises it, with a proposal taken when the claim round starts (DESIGN §2
-- through a hand-off).
local function give(w)
  local ttl = string.match(redis.call('HGET', settings, w), '^(%d+)')
  redis.call('SET', KEYS[1], w, 'PX', ttl)
  redis.call('DEL', grant)
  redis.call('HSET', grant, 'owner', w, 'claimed', '0')
  redis.call('PEXPIRE', grant, ttl)
  -- A take claims what it gives its own caller in the same call: no
  -- notice needed (and on a Cluster node a PUBLISH reaches every master).
  if w ~= me or op ~= 'take' then
    redis.call('PUBLISH', ARGV[9], 'granted ' .. w)
  end
end

-- The node's rule: a free key goes to the live head; a grant not yet
-- claimed moves to the head when the head is someone else (an earlier
-- ticket that registered late, or the grantee left the queue). A claimed
-- key, or one a plain mutex holds, stays until released or expired.
local function settle()
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  -- An entry without its settings (they are written together, so only
  -- after a partial loss of the node's data) cannot be served: it leaves.
  while head and redis.call('HEXISTS', settings, head) == 0 do
    forget(head)
    head = redis.call('ZRANGE', queue, 0, 0)[1]
  end
  local holder = redis.call('GET', KEYS[1])
  if not holder then
    if head then
      give(head)
    end
    return
  end
  local g = redis.call('HMGET', grant, 'owner', 'claimed')
  if g[1] ~= holder or g[2] ~= '0' or holder == head then
    return
  end
  if head then
    give(head)
  else -- the grantee left and nobody waits
    redis.call('DEL', KEYS[1], grant)
    redis.call('PUBLISH', ARGV[9], holder)
  end
end

-- The claim step, once the key is ours by a grant: extend it to our TTL
-- (the caller dates its validity from the round's start, before this),
-- pin the grant with the round's number so that it no longer moves, leave
-- the queue, and do the acquire's fencing step (lua/lib.lua propose).
local function claim(round)
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  -- Pinned by this round, unless a later round (whose take overtook a
  -- late one of ours) or the holder's extend pinned it already.
  local pin = tonumber(redis.call('HGET', grant, 'claimed'))
  if pin and pin < round then
    redis.call('HSET', grant, 'claimed', round)
  end
  redis.call('PEXPIRE', grant, ARGV[4])
  forget(me)
  return {1, propose(KEYS[2], ARGV[6], ARGV[7]), sec, usec}
end


local holder = redis.call('GET', KEYS[1])
if op == 'wait' or op == 'take' then
  if holder == me then
    local g = redis.call('HMGET', grant, 'owner', 'claimed')
    if g[1] == me and g[2] ~= '0' then
      local round = tonumber(g[2])
      if not round or round > tonumber(ARGV[5]) then
        if op == 'take' then
          -- A take runs again after a take of the same round pinned
          -- the grant (the client sent it again: the first reply was
          -- lost), or after the holder's extend did. The caller reads
          -- this answer's value as the fence register before the take:
          -- the claim answers with the register now, at least the value
          -- the first run read, so the token still exceeds every earlier
          -- holder's (at worst by a raise the first run made needless).
          -- The claim's writes also give a WAIT behind this call a write
          -- of this connection to cover (PROTOCOL §12).
          return claim(tonumber(ARGV[11]))
        end
        -- Pinned by a take round the caller has not seen fail, or by its
        -- extend: this wait was sent before that take, and reached us
        -- late (a call that timed out on the client). The take stands,
        -- and the holder registers no more.
        return {1, redis.call('PTTL', KEYS[1]), sec, usec}
      end
      -- Still waiting, so this pin belongs to a take round that fell
      -- short of a quorum: the grant becomes movable again.
      redis.call('HSET', grant, 'claimed', '0')
    end
  end
  local entryTTL = tonumber(ARGV[8])
  redis.call('ZADD', queue, ARGV[3], me)
  redis.call('ZADD', expiry, nowms + entryTTL, me)
  redis.call('HSET', settings, me, ARGV[4])
  -- The queue's keys outlive their longest entry, and no more.
  local keep = math.max(redis.call('PTTL', queue), entryTTL)
  for _, k in ipairs({queue, expiry, settings}) do
    redis.call('PEXPIRE', k, keep)
  end
  settle()
  if redis.call('GET', KEYS[1]) == me then
    if op == 'wait' then
      return {1, redis.call('PTTL', KEYS[1]), sec, usec}
    end
    -- Only a grant is claimed: a key of ours without its record is one a
    -- holder's extend repaired, which no waiter's round may count.
    if redis.call('HGET', grant, 'owner') == me then
      return claim(tonumber(ARGV[11]))
    end
  end
  return {0, redis.call('PTTL', KEYS[1]), sec, usec}
end

if op == 'leave' then
  -- A holder whose winning take found this node's key not yet ours, and
  -- registered it here: it waits no more. A grant that came to it since
  -- was not counted, and moves on to the head.
  forget(me)
  settle()
  return {0, redis.call('PTTL', KEYS[1]), sec, usec}
end

-- release: leave the queue and hand the key on if it is ours.
forget(me)
if holder ~= me then
  settle()
  return {0}
end
redis.call('DEL', KEYS[1], grant)
if redis.call('ZCARD', queue) > 0 then
  settle()
elseif ARGV[10] ~= '1' then
  redis.call('PUBLISH', ARGV[9], me)
end
return {1}
