-- Claim capacity for VMs on hosts: for each, check the fit rule and reserve in one atomic step.
-- Keyed by VM id: a VM that already holds a claim gets that claim back; nothing is reserved twice.
-- The claims of one call run in order, as one script: a later claim sees what an earlier one took.
-- A claim for a member of a server group checks the group's rule in the same step, against the
-- group's members per domain (its counts hash, kept by this script and release.lua), and counts it.
-- KEYS: changed zset, seq counter, then per claim: host hash, claim hash, host's claimed-vm set,
--   group's counts hash, group's claimed-vm set (placeholders for a VM of no group)
-- ARGV: now, mode: '0' each claim alone; '1' all or nothing (every claim is checked before any is
--   reserved, and none is reserved unless all fit; those on one host count together, and so do
--   members of one group in one domain); 'p' preempt (one claim, made only if it fits once the
--   victims named after it leave its host: then their claims are released in the same step), then
--   per claim: vm_id, host_id, then one amount per resource (RESOURCE_FIELDS order), the number of
--   named extra resources asked for and, sorted by name, each one's name and amount (checked against
--   the host's 'extra' and 'a_extra' maps only when there are any), the number of storage pools its
--   volumes take and, sorted by name, each one's name, GB and tags (a JSON list; lua/pool_claim.lua),
--   then group id ('' for none),
--   reason name, hard ('1' or '0'), policy, topology key,
--   max_per_domain, max_skew, the number of eligible domains (spread) and the domains
-- Returns {results, changes}: per claim {outcome, detail}: {'claimed', host} | {'held', host} |
--   {'unknown_host', ''} | {'offline', status} | {'paused', ''} | {'insufficient', resource name} |
--   {'storage', why} (a pool its volumes take is not reached, lacks a tag or has no room) |
--   {'group', why} | {'gang', ''} (all or nothing: this one fits, another does not; nothing was
--   reserved) | {'victim_moved', vm_id} (preempt: a victim holds no claim on the host any more);
-- In preempt mode, after the claim: ARGV the victims' vm_ids, KEYS their claim hashes.
--   and per host claimed on, host, the change number it had before this call, its new one: the
--   caller, who booked these claims on its own copy, need not read those hosts again.
{{fit rule}}

{{pool rule}}

{{group rule}}

{{counts}}

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

{{release claim}}

{{pool claim}}

-- Why the host cannot take need (and the named extras of `extra`, if any) on top of what it holds
-- (and of `booked`, what earlier claims of an all-or-nothing call would add), or nil when it can.
local function refusal(host_key, need, extra, booked)
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
    used[i] = tonumber(h[at + 3] or '0') + (booked and booked[i] or 0)
    ratio[i] = RATIO_FIELDS[i] and tonumber(h[at + 4] or '1') or 1
  end
  local missing = shortfall(need, capacity, reserved, ratio, used)
  if not missing and extra then
    local x = redis.call('HMGET', host_key, 'extra', 'a_extra')
    local used_extra = add_counts(decode_counts(x[2]), booked and booked.extra or {}, 1)
    missing = extra_shortfall(extra.names, extra.need, decode_counts(x[1]), used_extra)
  end
  if missing then
    return {'insufficient', missing}
  end
  return nil
end

-- A domain's members: as counted in Redis, plus what earlier claims of an all-or-nothing call
-- would add (`pending`, domain -> count, or nil).
local function members(group_key, domain, pending)
  return tonumber(redis.call('HGET', group_key, domain) or '0') + (pending and pending[domain] or 0)
end

-- HMGET in slices: unpack() of many thousand arguments overflows Lua's stack.
local function fewest(key, fields, start, pending)
  local lowest = start
  for first = 1, #fields, 1000 do
    local slice = {}
    for i = first, math.min(first + 999, #fields) do
      slice[#slice + 1] = fields[i]
    end
    for j, n in ipairs(redis.call('HMGET', key, unpack(slice))) do
      local domain = slice[j]
      lowest = math.min(lowest, tonumber(n or '0') + (pending and pending[domain] or 0))
    end
  end
  return lowest
end

-- The domain the host is in for the group, or nil; and why the group refuses it, or nil.
local function group_check(host_key, group_key, host, group, pending)
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
  local here = members(group_key, domain, pending)
  local total, lowest = here, here
  if group.policy == 'affinity' then
    total = 0
    for _, n in ipairs(redis.call('HVALS', group_key)) do
      total = total + tonumber(n)
    end
    for _, n in pairs(pending or {}) do
      total = total + n
    end
  elseif group.policy == 'spread' then
    lowest = fewest(group_key, group.eligible, here, pending)
  end
  if group_refuses(group.policy, group.max_per_domain, group.max_skew, here, total, lowest) then
    return domain, group.name .. ': ' .. group.key .. '=' .. domain .. ' holds ' .. here .. ' (' .. group.policy ..
      ', ' .. total .. ' in all, emptiest eligible ' .. lowest .. ')'
  end
  return domain, nil
end

-- Why the claim cannot be made, or nil and the group domain it would be counted in (nil for none).
local function check(k, booked, pending, pools_booked)
  local why = refusal(k.host_key, k.need, k.extra, booked)
  if why then
    return why, nil
  end
  local storage = pools_refusal(k, pools_booked)
  if storage then
    return {'storage', storage}, nil
  end
  if k.group then
    local domain, refused = group_check(k.host_key, k.group_key, k.host, k.group, pending)
    if refused then
      return {'group', refused}, nil
    end
    return nil, domain
  end
  return nil, nil
end

local function reserve(k, domain, now)
  local record = {'host', k.host, 'at', now}
  for i = 1, R do
    local f = RESOURCE_FIELDS[i]
    if k.need[i] ~= 0 then
      redis.call('HINCRBY', k.host_key, 'a_' .. f, k.need[i])
    end
    record[#record + 1] = f
    record[#record + 1] = k.need[i]
  end
  if k.extra then
    local used = add_counts(decode_counts(redis.call('HGET', k.host_key, 'a_extra')), k.extra.need, 1)
    redis.call('HSET', k.host_key, 'a_extra', encode_counts(used))
    record[#record + 1] = 'extra'
    record[#record + 1] = encode_counts(k.extra.need)
  end
  redis.call('HINCRBY', k.host_key, 'vm_count', 1)
  redis.call('HSET', k.claim_key, unpack(record))
  redis.call('SADD', k.vms_key, k.vm)
  if domain then
    redis.call('HINCRBY', k.group_key, domain, 1)
    redis.call('SADD', k.group_vms_key, k.vm)
    redis.call('HSET', k.claim_key, 'group', k.group.id, 'domain', domain)
  end
  reserve_pools(k)
  changed[k.host] = true
  return {'claimed', k.host}
end

local claims = {}
local arg = 3
local preempt = ARGV[2] == 'p'
for c = 1, preempt and 1 or (#KEYS - 2) / 5 do
  local need = {}
  for i = 1, R do
    need[i] = tonumber(ARGV[arg + 1 + i])
  end
  local at = arg + 2 + R
  local extra
  local extra_count = tonumber(ARGV[at])
  if extra_count > 0 then
    extra = {names = {}, need = {}}
    for j = 1, extra_count do
      local name = ARGV[at + 2 * j - 1]
      extra.names[j] = name
      extra.need[name] = tonumber(ARGV[at + 2 * j])
    end
  end
  at = at + 1 + 2 * extra_count
  local pools
  local pool_count = tonumber(ARGV[at])
  if pool_count > 0 then
    pools = {}
    for j = 1, pool_count do
      local t = at + 3 * (j - 1)
      pools[j] = {name = ARGV[t + 1], gb = tonumber(ARGV[t + 2]), tags = decode_list(ARGV[t + 3])}
    end
  end
  at = at + 1 + 3 * pool_count
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
  claims[c] = {
    host_key = KEYS[k], claim_key = KEYS[k + 1], vms_key = KEYS[k + 2], group_key = KEYS[k + 3],
    group_vms_key = KEYS[k + 4], vm = ARGV[arg], host = ARGV[arg + 1], need = need, extra = extra, group = group,
    pools = pools
  }
  claims[c].pools_key = pools_key_of(KEYS[k], ARGV[arg + 1])
  arg = at + 8 + eligible_count
end

local results = {}
if preempt then
  local k = claims[1]
  local held = redis.call('HGET', k.claim_key, 'host')
  if held then
    results[1] = {'held', held}
  else
    -- What the victims hold on the host comes off its allocations before the fit rule is checked.
    local freed = {extra = {}}
    for i = 1, R do
      freed[i] = 0
    end
    for v = 1, #KEYS - 7 do
      local c = redis.call('HMGET', KEYS[7 + v], 'host', 'extra', unpack(RESOURCE_FIELDS))
      if c[1] ~= k.host or redis.call('SISMEMBER', k.vms_key, ARGV[arg + v - 1]) == 0 then
        results[1] = {'victim_moved', ARGV[arg + v - 1]}
        break
      end
      for i = 1, R do
        freed[i] = freed[i] - tonumber(c[i + 2] or '0')
      end
      add_counts(freed.extra, decode_counts(c[2]), -1)
    end
    if not results[1] then
      local why, domain = check(k, freed, nil)
      if why then
        results[1] = why
      else
        local prefix = string.sub(k.host_key, 1, #k.host_key - #(':host:' .. k.host))
        for v = 1, #KEYS - 7 do
          release_claim(prefix, KEYS[7 + v], ARGV[arg + v - 1])
        end
        results[1] = reserve(k, domain, ARGV[1])
      end
    end
  end
elseif ARGV[2] == '1' then
  -- All or nothing: check every claim, each host with what earlier ones put on it and each group
  -- domain with the members earlier ones put in it, before any is kept.
  local booked, pending, domains, refused, pools_booked = {}, {}, {}, false, {}
  for c, k in ipairs(claims) do
    local held = redis.call('HGET', k.claim_key, 'host')
    if held then
      results[c] = {'held', held}
    else
      local group_pending = k.group and pending[k.group.id]
      local why, domain = check(k, booked[k.host_key], group_pending, pools_booked)
      if why then
        results[c], refused = why, true
      else
        book_pools(k, pools_booked)
        local sum = booked[k.host_key] or {}
        for i = 1, R do
          sum[i] = (sum[i] or 0) + k.need[i]
        end
        if k.extra then
          sum.extra = add_counts(sum.extra or {}, k.extra.need, 1)
        end
        booked[k.host_key] = sum
        if domain then
          group_pending = group_pending or {}
          group_pending[domain] = (group_pending[domain] or 0) + 1
          pending[k.group.id] = group_pending
        end
        domains[c] = domain
      end
    end
  end
  for c, k in ipairs(claims) do
    if not results[c] then
      results[c] = refused and {'gang', ''} or reserve(k, domains[c], ARGV[1])
    end
  end
else
  for c, k in ipairs(claims) do
    local held = redis.call('HGET', k.claim_key, 'host')
    if held then
      results[c] = {'held', held}
    else
      local why, domain = check(k, nil, nil)
      results[c] = why or reserve(k, domain, ARGV[1])
    end
  end
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
