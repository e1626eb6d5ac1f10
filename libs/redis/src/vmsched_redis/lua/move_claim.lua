-- A migration is done: the VM's claim on its source is given back (as release.lua gives one back)
-- and its claim on the target, keyed by the target claim id, becomes the VM's claim, in one step.
-- Idempotent: without a target claim (the claims moved already, or a flush took it) nothing changes.
-- KEYS: changed zset, seq counter, the VM's claim hash, its target claim hash
-- ARGV: key prefix, vm_id, target claim id
-- Returns {the host the VM's claim was released on or false, the host its target claim moved to or false}
{{counts}}

local RESOURCE_FIELDS = {{resource fields}}
local R = #RESOURCE_FIELDS
local changed = {}

{{release claim}}

local prefix, vm, moving = ARGV[1], ARGV[2], ARGV[3]

local t = redis.call('HMGET', KEYS[4], 'host', 'group')
if not t[1] then
  return {false, false}
end

-- The VM's volumes on shared pools stay where they are: they move to its new claim, uncounted by
-- the release.
local shared = redis.call('HGET', KEYS[3], 'shared_pools')
if shared then
  redis.call('HSET', KEYS[3], 'shared_pools', '{}')
end
-- The source's share, named extras included, given back by the one release path.
local source = release_claim(prefix, KEYS[3], vm) or false

local target = t[1]
redis.call('RENAME', KEYS[4], KEYS[3])
-- The target claim id is gone: a reconcile whose PostgreSQL view still has it must not restore it.
-- The VM's claim is new on the target: young, so that same reconcile keeps it as in flight.
remember_release(prefix, moving)
local now = redis.call('TIME')
redis.call('HSET', KEYS[3], 'at', tonumber(now[1]) + tonumber(now[2]) / 1000000)
if shared then
  redis.call('HSET', KEYS[3], 'shared_pools', shared)
end
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
