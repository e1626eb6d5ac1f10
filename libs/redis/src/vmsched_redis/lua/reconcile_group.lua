-- Make one server group's Redis counts agree with PostgreSQL, the truth (after reconcile_host, which
-- restores the claims of committed VMs).
-- Members committed in PostgreSQL count in the domain PostgreSQL says; their claims learn the group,
-- so that releasing them gives the place back. Claims of the group PostgreSQL does not count yet are
-- kept (and counted) while younger than the grace period (a scheduler may be between claim and
-- commit), and forgotten after it. A member released since PostgreSQL's view was read (view_at, by
-- Redis's clock; see lua/reconcile_host.lua) is not counted from that stale view.
-- KEYS: group's counts hash, group's claimed-vm set
-- ARGV: key prefix, group id, now, grace, view_at, then per committed member: vm_id, domain
-- Returns {committed, in_flight, dropped}
local prefix, group, now, grace, view_at = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local released_key = prefix .. ':released'
local any_released = redis.call('ZCOUNT', released_key, view_at, '+inf') > 0
local counts = {}
local committed = {}
local members = 0
for i = 6, #ARGV, 2 do
  local vm, domain = ARGV[i], ARGV[i + 1]
  local gone = any_released and redis.call('ZSCORE', released_key, vm)
  if not (gone and tonumber(gone) >= view_at) then
    committed[vm] = true
    members = members + 1
    counts[domain] = (counts[domain] or 0) + 1
    local ck = prefix .. ':claim:' .. vm
    if redis.call('EXISTS', ck) == 1 then
      redis.call('HSET', ck, 'group', group, 'domain', domain)
    end
    redis.call('SADD', KEYS[2], vm)
  end
end
local in_flight, dropped = 0, 0
for _, vm in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if not committed[vm] then
    local c = redis.call('HMGET', prefix .. ':claim:' .. vm, 'group', 'domain', 'at')
    if c[1] == group and c[2] and c[3] and now - tonumber(c[3]) < grace then
      counts[c[2]] = (counts[c[2]] or 0) + 1
      in_flight = in_flight + 1
    else
      redis.call('SREM', KEYS[2], vm)
      dropped = dropped + 1
    end
  end
end
-- Rewritten only when it differs: this runs for every group every VMSCHED_RECONCILE_INTERVAL.
local current = redis.call('HGETALL', KEYS[1])
local differs = false
local seen = 0
for i = 1, #current, 2 do
  seen = seen + 1
  if counts[current[i]] ~= tonumber(current[i + 1]) then
    differs = true
  end
end
for _ in pairs(counts) do
  seen = seen - 1
end
if differs or seen ~= 0 then
  redis.call('DEL', KEYS[1])
  for domain, n in pairs(counts) do
    redis.call('HSET', KEYS[1], domain, n)
  end
end
return {members, in_flight, dropped}
