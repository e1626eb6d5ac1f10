-- Claim capacity for VMs on hosts: for each, check the fit rule and reserve in one atomic step.
-- Keyed by VM id: a VM that already holds a claim gets that claim back; nothing is reserved twice.
-- The claims of one call run in order, as one script: a later claim sees what an earlier one took.
-- A claim for a member of a server group checks the group's rule in the same step, against the
-- group's members per domain (its counts hash, kept by this script and release.lua), and counts it.
-- KEYS: changed zset, seq counter, then per claim: host hash, claim hash, host's claimed-vm set,
--   group's counts hash, group's claimed-vm set (placeholders for a VM of no group)
-- ARGV: now, then per claim: vm_id, host_id, then one amount per resource (RESOURCE_FIELDS order),
--   then group id ('' for none), reason name, hard ('1' or '0'), policy, topology key, max_per_domain, max_skew,
--   the number of eligible domains (spread) and the domains
-- Returns {results, changes}: per claim {outcome, detail}: {'claimed', host} | {'held', host} |
--   {'unknown_host', ''} | {'offline', status} | {'paused', ''} | {'insufficient', resource name} |
--   {'group', why};
--   and per host claimed on, host, the change number it had before this call, its new one: the
--   caller, who booked these claims on its own copy, need not read those hosts again.
{{fit rule}}

{{group rule}}

local RESOURCE_FIELDS = {{resource fields}}
local RATIO_FIELDS = {{ratio fields}}
local R = #RESOURCE_FIELDS

-- What HMGET reads of a host: the gates, then per resource capacity, reserved, allocated and
-- (where the resource has one) its ratio.
local READ = {'synced', 'status', 'paused'}
for i = 1, R do
  local f = RESOURCE_FIELDS[i]
  READ[#READ + 1] = f
  READ[#READ + 1] = 'r_' .. f
  READ[#READ + 1] = 'a_' .. f
  READ[#READ + 1] = RATIO_FIELDS[i] or f -- HMGET needs a field; a resource without a ratio ignores it
end

local changed = {}

-- HMGET in slices: unpack() of many thousand arguments overflows Lua's stack.
local function fewest(key, fields, start)
  local lowest = start
  for first = 1, #fields, 1000 do
    local slice = {}
    for i = first, math.min(first + 999, #fields) do
      slice[#slice + 1] = fields[i]
    end
    for _, n in ipairs(redis.call('HMGET', key, unpack(slice))) do
      lowest = math.min(lowest, tonumber(n or '0'))
    end
  end
  return lowest
end

-- The domain the host is in for the group, or nil; and why the group refuses it, or nil.
local function group_check(host_key, group_key, host, group)
  local domain
  if group.key == 'host' then
    domain = host
  else
    domain = cjson.decode(redis.call('HGET', host_key, 'labels') or '{}')[group.key]
    if type(domain) ~= 'string' then
      -- In no domain: no member of a hard group; a soft group's member is not counted anywhere.
      if group.hard then
        return nil, group.name .. ': host has no ' .. group.key .. ' label'
      end
      return nil, nil
    end
  end
  local here = tonumber(redis.call('HGET', group_key, domain) or '0')
  local total, lowest = here, here
  if group.policy == 'affinity' then
    total = 0
    for _, n in ipairs(redis.call('HVALS', group_key)) do
      total = total + tonumber(n)
    end
  elseif group.policy == 'spread' then
    lowest = fewest(group_key, group.eligible, here)
  end
  if group_refuses(group.policy, group.max_per_domain, group.max_skew, here, total, lowest) then
    return domain, group.name .. ': ' .. group.key .. '=' .. domain .. ' holds ' .. here .. ' (' .. group.policy ..
      ', ' .. total .. ' in all, emptiest eligible ' .. lowest .. ')'
  end
  return domain, nil
end

local function claim(host_key, claim_key, vms_key, group_key, group_vms_key, vm, host, need, now, group)
  local held = redis.call('HGET', claim_key, 'host')
  if held then
    return {'held', held}
  end
  local h = redis.call('HMGET', host_key, unpack(READ))
  if h[1] ~= '1' then
    return {'unknown_host', ''}
  end
  if h[2] ~= 'online' then
    return {'offline', h[2] or ''}
  end
  if h[3] == '1' then
    return {'paused', ''}
  end
  local capacity, reserved, used, ratio = {}, {}, {}, {}
  for i = 1, R do
    local at = 3 + 4 * (i - 1)
    capacity[i] = tonumber(h[at + 1] or '0')
    reserved[i] = tonumber(h[at + 2] or '0')
    used[i] = tonumber(h[at + 3] or '0')
    ratio[i] = RATIO_FIELDS[i] and tonumber(h[at + 4] or '1') or 1
  end
  local missing = shortfall(need, capacity, reserved, ratio, used)
  if missing then
    return {'insufficient', missing}
  end
  local domain
  if group then
    local refused
    domain, refused = group_check(host_key, group_key, host, group)
    if refused then
      return {'group', refused}
    end
  end
  local record = {'host', host, 'at', now}
  for i = 1, R do
    local f = RESOURCE_FIELDS[i]
    if need[i] ~= 0 then
      redis.call('HINCRBY', host_key, 'a_' .. f, need[i])
    end
    record[#record + 1] = f
    record[#record + 1] = need[i]
  end
  redis.call('HINCRBY', host_key, 'vm_count', 1)
  redis.call('HSET', claim_key, unpack(record))
  redis.call('SADD', vms_key, vm)
  if domain then
    redis.call('HINCRBY', group_key, domain, 1)
    redis.call('SADD', group_vms_key, vm)
    redis.call('HSET', claim_key, 'group', group.id, 'domain', domain)
  end
  changed[host] = true
  return {'claimed', host}
end

local results = {}
local arg = 2
for c = 1, (#KEYS - 2) / 5 do
  local need = {}
  for i = 1, R do
    need[i] = tonumber(ARGV[arg + 1 + i])
  end
  local at = arg + 2 + R
  local group
  local eligible_count = tonumber(ARGV[at + 7])
  if ARGV[at] ~= '' then
    group = {
      id = ARGV[at], name = ARGV[at + 1], hard = ARGV[at + 2] == '1', policy = ARGV[at + 3], key = ARGV[at + 4],
      max_per_domain = tonumber(ARGV[at + 5]), max_skew = tonumber(ARGV[at + 6]), eligible = {}
    }
    for i = 1, eligible_count do
      group.eligible[i] = ARGV[at + 7 + i]
    end
  end
  local k = 5 * c - 2
  results[c] = claim(KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], ARGV[arg], ARGV[arg + 1], need,
    ARGV[1], group)
  arg = at + 8 + eligible_count
end
local changes = {}
for host in pairs(changed) do
  local before = redis.call('ZSCORE', KEYS[1], host) or '0'
  local seq = redis.call('INCR', KEYS[2])
  redis.call('ZADD', KEYS[1], seq, host)
  changes[#changes + 1] = host
  changes[#changes + 1] = tostring(before)
  changes[#changes + 1] = seq
end
return {results, changes}
