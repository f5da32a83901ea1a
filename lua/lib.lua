-- The steps several scripts share, written once (issue 26): the fence rule
-- of DESIGN §2 above all. scripts.go puts in front of each script the
-- pieces of this file it names (a piece is a local function with its
-- comment and state, ending at the first "end" in column 1), and a batched
-- run defines them once for all its calls. Only the named pieces go in
-- front: the server makes a closure of every local function at every run,
-- which a script should not pay for functions it never calls. The whole
-- file is valid Lua too, so it may also stand in front of a script as it is.
-- Arguments stay the strings the client sent, as KEYS and ARGV are: a
-- value written back stays a string (a Lua number may be written in
-- exponent form).

-- The node's clock, read once per run: in a batched run every call gets
-- the run's first TIME. A run is atomic and the server judges its keys'
-- expiry by the run's start time too, so the run decides each lock as if
-- every call had run at that first instant, a schedule that could have
-- happened; the time each call answers still lies between the run's send
-- and its answer, which is all a clock sample (recheck) asks.
-- Returns the seconds and microseconds TIME gave.
local clockSec, clockUsec
local function clock()
  if not clockSec then
    local t = redis.call('TIME')
    clockSec, clockUsec = tonumber(t[1]), tonumber(t[2])
  end
  return clockSec, clockUsec
end

-- The acquire's fence step (DESIGN §2), once the lock is ours here: read
-- the fence register at key and raise it to the proposal p when p is
-- higher; with a lifetime (life ms, "0": it never expires) every
-- acquisition renews it. Returns the register before (0 when p is "0":
-- fencing is off and the register is left alone).
local function propose(key, p, life)
  if p == '0' then
    return 0
  end
  local stored = redis.call('GET', key)
  local fence = tonumber(stored or '0')
  local raised, higher = p, tonumber(p) > fence
  if not higher then
    raised = stored
  end
  if life ~= '0' then
    redis.call('SET', key, raised, 'PX', life)
  elseif higher then
    redis.call('SET', key, raised)
  end
  return fence
end

-- The fence register at key, 0 when absent.
local function fenceAt(key)
  return tonumber(redis.call('GET', key) or '0')
end

-- Whether the register at key shows a token above the lock's token (a
-- newer holder was issued one here: the lock is stale), and the register
-- as read. A token of "0" (fencing off) is never stale and reads nothing.
local function stale(key, token)
  if tonumber(token) <= 0 then
    return false
  end
  local fence = fenceAt(key)
  return fence > tonumber(token), fence
end

-- Write the lock's token into the register at key, read as fence and not
-- above the token (stale said no): a register with a lifetime (life ms) is
-- always written, which renews it, one without only when the token is
-- higher. Returns whether it wrote.
local function raise(key, token, life, fence)
  if life ~= '0' then
    redis.call('SET', key, token, 'PX', life)
  elseif tonumber(token) > fence then
    redis.call('SET', key, token)
  else
    return false
  end
  return true
end

-- The fence step of a repair (an extend that found the lock's key gone):
-- false when the lock is stale here, which must not put it back; else the
-- register holds at least the token afterwards.
local function restore(key, token, life)
  local old, fence = stale(key, token)
  if fence and not old then
    raise(key, token, life, fence)
  end
  return not old
end

-- The own-key extend: renew key for its owner me to ttl ms. Returns 1 when
-- it was ours (and is renewed), 0 when another owner holds it, nil when
-- it is gone.
local function renew(key, me, ttl)
  local owner = redis.call('GET', key)
  if owner == me then
    redis.call('PEXPIRE', key, ttl)
    return 1
  end
  if owner then
    return 0
  end
end

-- Record member in the sorted set at key (a reader, a writer's intent) for
-- ttl ms of this node's clock from nowus: the score is its expiry in µs.
-- The set outlives its longest entry by a millisecond, so that it never
-- vanishes under a live one.
local function enter(key, member, nowus, ttl)
  redis.call('ZADD', key, nowus + ttl * 1000, member)
  if redis.call('PTTL', key) < ttl + 1 then
    redis.call('PEXPIRE', key, ttl + 1)
  end
end
