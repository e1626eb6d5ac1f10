-- Give VMs' claimed resources back to their hosts, and their places back to their server groups.
-- Idempotent: a VM without a claim is skipped.
-- KEYS: changed zset, seq counter, then per VM: its claim hash
-- ARGV: key prefix, then per VM: vm_id
-- Returns per VM the host its claim was on, or false.
{{counts}}

local RESOURCE_FIELDS = {{resource fields}}
local R = #RESOURCE_FIELDS
local changed = {}

{{release claim}}

local results = {}
for v = 1, #KEYS - 2 do
  results[v] = release_claim(ARGV[1], KEYS[v + 2], ARGV[v + 1]) or false
end
for host in pairs(changed) do
  redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[2]), host)
end
return results
