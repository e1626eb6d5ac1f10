-- A migration is done: the VM's claim on its source is given back (as release.lua gives one back)
-- and its claim on the target, keyed by the target claim id, becomes the VM's claim, in one step.
-- Idempotent: without a target claim (the claims moved already, or a flush took it) nothing changes.
-- KEYS: changed zset, seq counter, the VM's claim hash, its target claim hash
-- ARGV: key prefix, vm_id, target claim id
-- Returns {the host the VM's claim was released on or false, the host its target claim moved to or false}
local RESOURCE_FIELDS = {{resource fields}}
local R = #RESOURCE_FIELDS
local READ = {'host'}
for i = 1, R do
  READ[#READ + 1] = RESOURCE_FIELDS[i]
end
READ[#READ + 1] = 'group'
READ[#READ + 1] = 'domain'
local prefix, vm, moving = ARGV[1], ARGV[2], ARGV[3]
local changed = {}

local t = redis.call('HMGET', KEYS[4], 'host', 'group')
if not t[1] then
  return {false, false}
end

local source = false
local c = redis.call('HMGET', KEYS[3], unpack(READ))
if c[1] then
  source = c[1]
  local hk = prefix .. ':host:' .. source
  -- As release.lua: only a synced hash that lists the VM holds the claim's share.
  if redis.call('HGET', hk, 'synced') == '1' and redis.call('SISMEMBER', hk .. ':vms', vm) == 1 then
    for i = 1, R do
      local amount = tonumber(c[i + 1] or '0')
      if amount ~= 0 then
        redis.call('HINCRBY', hk, 'a_' .. RESOURCE_FIELDS[i], 0 - amount)
      end
    end
    redis.call('HINCRBY', hk, 'vm_count', -1)
  end
  redis.call('SREM', hk .. ':vms', vm)
  local group, domain = c[R + 2], c[R + 3]
  if group and domain then
    local gk = prefix .. ':group:' .. group
    if redis.call('SREM', gk .. ':vms', vm) == 1 and redis.call('HINCRBY', gk, domain, -1) <= 0 then
      redis.call('HDEL', gk, domain)
    end
  end
  redis.call('DEL', KEYS[3])
  changed[source] = true
end

local target = t[1]
redis.call('RENAME', KEYS[4], KEYS[3])
local hk = prefix .. ':host:' .. target
if redis.call('SREM', hk .. ':vms', moving) == 1 then
  redis.call('SADD', hk .. ':vms', vm)
end
if t[2] then
  local gk = prefix .. ':group:' .. t[2]
  if redis.call('SREM', gk .. ':vms', moving) == 1 then
    redis.call('SADD', gk .. ':vms', vm)
  end
end
changed[target] = true

for host in pairs(changed) do
  redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[2]), host)
end
return {source, target}
