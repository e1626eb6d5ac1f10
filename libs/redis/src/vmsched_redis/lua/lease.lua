-- A lease one process holds at a time (the scheduler's waker): taken when free, kept by its holder.
-- KEYS: the lease key. ARGV: owner, ttl in ms (0: give it up, if held by owner).
-- Returns 1 when owner holds the lease after the call, else 0.
local holder = redis.call('GET', KEYS[1])
if ARGV[2] == '0' then
  if holder == ARGV[1] then
    redis.call('DEL', KEYS[1])
  end
  return 0
end
if holder == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
