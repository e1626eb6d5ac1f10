-- Claim capacity for VMs on hosts: for each, check the fit rule and reserve in one atomic step.
-- Keyed by VM id: a VM that already holds a claim gets that claim back; nothing is reserved twice.
-- The claims of one call run in order, as one script: a later claim sees what an earlier one took.
-- KEYS: changed zset, seq counter, then per claim: host hash, claim hash, host's claimed-vm set
-- ARGV: now, all_or_nothing ('1': every claim is checked before any is reserved, and none is
--   reserved unless all fit, those on one host together), then per claim: vm_id, host_id, then one
--   amount per resource (RESOURCE_FIELDS order)
-- Returns {results, changes}: per claim {outcome, detail}: {'claimed', host} | {'held', host} |
--   {'unknown_host', ''} | {'offline', status} | {'paused', ''} | {'insufficient', resource name} |
--   {'gang', ''} (all or nothing: this one fits, another does not; nothing was reserved);
--   and per host claimed on, host, the change number it had before this call, its new one: the
--   caller, who booked these claims on its own copy, need not read those hosts again.
{{fit rule}}

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

-- Why the host cannot take need on top of what it holds (and of `booked`, what earlier claims of an
-- all-or-nothing call would add), or nil when it can.
local function refusal(host_key, need, booked)
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
  if missing then
    return {'insufficient', missing}
  end
  return nil
end

local function reserve(host_key, claim_key, vms_key, vm, host, need, now)
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
  changed[host] = true
  return {'claimed', host}
end

local function claim(host_key, claim_key, vms_key, vm, host, need, now)
  local held = redis.call('HGET', claim_key, 'host')
  if held then
    return {'held', held}
  end
  return refusal(host_key, need, nil) or reserve(host_key, claim_key, vms_key, vm, host, need, now)
end

local claims = {}
local arg = 3
for c = 1, (#KEYS - 2) / 3 do
  local need = {}
  for i = 1, R do
    need[i] = tonumber(ARGV[arg + 1 + i])
  end
  claims[c] = {KEYS[3 * c], KEYS[3 * c + 1], KEYS[3 * c + 2], ARGV[arg], ARGV[arg + 1], need}
  arg = arg + 2 + R
end

local results = {}
if ARGV[2] == '1' then
  -- All or nothing: check every claim, each host with what earlier ones put on it, before any is kept.
  local booked, refused = {}, false
  for c, k in ipairs(claims) do
    local held = redis.call('HGET', k[2], 'host')
    if held then
      results[c] = {'held', held}
    else
      local why = refusal(k[1], k[6], booked[k[1]])
      if why then
        results[c], refused = why, true
      else
        local sum = booked[k[1]] or {}
        for i = 1, R do
          sum[i] = (sum[i] or 0) + k[6][i]
        end
        booked[k[1]] = sum
      end
    end
  end
  for c, k in ipairs(claims) do
    if not results[c] then
      results[c] = refused and {'gang', ''} or reserve(k[1], k[2], k[3], k[4], k[5], k[6], ARGV[1])
    end
  end
else
  for c, k in ipairs(claims) do
    results[c] = claim(k[1], k[2], k[3], k[4], k[5], k[6], ARGV[1])
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
