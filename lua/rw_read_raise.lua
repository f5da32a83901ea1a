-- Slow path of a reader's token: the register of one of the nodes that
-- admitted the reader was at or above the reader's proposal, so the reader
-- takes that value as its token (readers may share one) and writes it on
-- a quorum, but only where it is still admitted, as raise.lua does for a
-- writer. A register already at or above the token stays as it is.
-- KEYS[1] writer key (unused: the keys of the reader's extension),
-- KEYS[2] fence register, KEYS[3] readers (ZSET: owner value -> expiry in µs)
-- ARGV[1] owner value, ARGV[2] token, ARGV[3] the fence register's lifetime
-- in ms (0: it never expires)
-- Returns {1} when the register now holds at least the token, {0} when the
-- reader is not admitted here.
local score = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not score or tonumber(score) <= nowus then
  return {0}
end
local stored = redis.call('GET', KEYS[2])
if tonumber(ARGV[2]) > tonumber(stored or '0') then
  if ARGV[3] ~= '0' then
    redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  else
    redis.call('SET', KEYS[2], ARGV[2])
  end
else
  -- The register holds the token already (another reader's raise, or a
  -- retried command): the yes still writes, the same value, so that a
  -- WAIT behind this call covers a write of its own connection (see
  -- acquire.lua).
  redis.call('SET', KEYS[2], stored, 'KEEPTTL')
end
return {1}
