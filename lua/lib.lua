-- The steps several scripts share, written once (issue 26): the fence rule
-- of DESIGN §2 above all. scripts.go (assemble) gives each script the
-- pieces of this file it names, and those they name; a batched run defines
-- them once for all its calls. A piece is a comment and the code after it,
-- up to a blank line, and is named by the locals it declares. Only the
-- named pieces: the server makes a closure of every local function at
-- every run that meets its definition (0.03µs each, 0.035µs more an
-- upvalue, on a script of 5-15µs), which a script should not pay for
-- functions it never calls; so a piece of functions goes just before the
-- script's first statement that names it (a run that returns before never
-- makes it), and the clock is plain statements, in front. The whole file
-- is valid Lua too, so it may also stand in front of a script as it is.
-- Arguments stay the strings the client sent, as KEYS and ARGV are: a
-- value written back stays a string (a Lua number may be written in
-- exponent form).

-- The node's clock (sec, usec), read once per run: in a batched run every
-- call gets the run's TIME. A run is atomic and the server judges its keys'
-- expiry by the run's start time too, so the run decides each lock as if
-- every call had run at that instant, a schedule that could have happened;
-- the time each call answers still lies between the run's send and its
-- answer, which is all a clock sample (recheck) asks. It spares each lock
-- of a batched run one of its two or three server calls.
local clock = redis.call('TIME')
local sec, usec = tonumber(clock[1]), tonumber(clock[2])

-- The clock in µs, the unit of the read-write lock's sorted sets.
local nowus = sec * 1000000 + usec

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

-- Write a held lock's token into the fence register at key: a repair's
-- fence step (an extend that found the lock's key gone), and the slow
-- path's (lua/raise.lua). Returns false, writing nothing, when the register
-- shows a token above ours: a newer holder was issued one here, so the lock
-- is stale and must not be put back. Else true and whether it wrote: a
-- register with a lifetime (life ms) is always written, which renews it,
-- one without only when the token is higher; nil when the token is "0"
-- (fencing off: nothing is read). With check, it only checks.
local function raise(key, token, life, check)
  local t = tonumber(token)
  if t <= 0 then
    return true
  end
  local fence = tonumber(redis.call('GET', key) or '0')
  if fence > t then
    return false
  end
  if check then
    return true
  end
  if life ~= '0' then
    redis.call('SET', key, token, 'PX', life)
  elseif t > fence then
    redis.call('SET', key, token)
  else
    return true, false
  end
  return true, true
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
-- ttl ms of this node's clock from now: the score is its expiry in µs, so
-- the entry lives exactly the TTL, as a key set with PX would. The set
-- outlives its longest entry by a millisecond, so that it never vanishes
-- under a live one.
local function enter(key, member, ttl)
  redis.call('ZADD', key, nowus + ttl * 1000, member)
  if redis.call('PTTL', key) < ttl + 1 then
    redis.call('PEXPIRE', key, ttl + 1)
  end
end
