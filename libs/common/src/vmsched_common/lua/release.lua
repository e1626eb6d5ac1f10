-- Give VMs' claimed resources back to their hosts, and their places back to their server groups.
-- Idempotent: a VM without a claim is skipped.
-- KEYS: changed zset, seq counter, then per VM: its claim hash
-- ARGV: key prefix, then per VM: vm_id
-- Returns per VM the host its claim was on, or false.
{{counts}}

local RESOURCE_FIELDS = {{resource fields}}
local R = #RESOURCE_FIELDS
local READ = {'host'}
for i = 1, R do
  READ[#READ + 1] = RESOURCE_FIELDS[i]
end
READ[#READ + 1] = 'group'
READ[#READ + 1] = 'domain'
READ[#READ + 1] = 'extra'

local changed = {}
local results = {}
for v = 1, #KEYS - 2 do
  local vm = ARGV[v + 1]
  local c = redis.call('HMGET', KEYS[v + 2], unpack(READ))
  local host = c[1]
  if host then
    local hk = ARGV[1] .. ':host:' .. host
    -- A host re-created after a flush carries allocations read from PostgreSQL, where this VM may
    -- already be released; only a synced hash that lists the VM holds the claim's share.
    if redis.call('HGET', hk, 'synced') == '1' and redis.call('SISMEMBER', hk .. ':vms', vm) == 1 then
      for i = 1, R do
        -- 0 - x, not -x: Lua's -0 is sent as "-0", which HINCRBY rejects (and a script error
        -- does not undo the increments before it).
        local amount = tonumber(c[i + 1] or '0')
        if amount ~= 0 then
          redis.call('HINCRBY', hk, 'a_' .. RESOURCE_FIELDS[i], 0 - amount)
        end
      end
      local extra = c[R + 4]
      if extra then
        local used = add_counts(decode_counts(redis.call('HGET', hk, 'a_extra')), decode_counts(extra), -1)
        redis.call('HSET', hk, 'a_extra', encode_counts(used))
      end
      redis.call('HINCRBY', hk, 'vm_count', -1)
    end
    redis.call('SREM', hk .. ':vms', vm)
    local group, domain = c[R + 2], c[R + 3]
    -- As for hosts: only a group whose set lists the VM counts it (after a flush, reconcile_group
    -- rebuilds the counts from PostgreSQL).
    if group and domain then
      local gk = ARGV[1] .. ':group:' .. group
      if redis.call('SREM', gk .. ':vms', vm) == 1 and redis.call('HINCRBY', gk, domain, -1) <= 0 then
        redis.call('HDEL', gk, domain)
      end
    end
    redis.call('DEL', KEYS[v + 2])
    changed[host] = true
  end
  results[v] = host or false
end
for host in pairs(changed) do
  redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[2]), host)
end
return results
