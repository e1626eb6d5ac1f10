-- Make one host's Redis allocations agree with PostgreSQL, the truth.
-- Committed VMs (from PostgreSQL) get their claim restored (a migrating VM's share on its target is
-- committed under its target claim id); claims of VMs PostgreSQL does not count
-- are kept while younger than the grace period (a scheduler may be between claim and commit) and
-- dropped after it. Allocations become PostgreSQL's plus the kept in-flight claims, named extra
-- resources ('a_extra', a JSON map) as the others. A dropped claim gives its storage pools back
-- (the host's 'a_pools', the shared pools' 'a:<name>').
-- PostgreSQL's view was read at view_at (Redis's clock) and may be stale by now: a claim released
-- since (remembered in `released` by lua/release_claim.lua) is neither restored nor counted, or a
-- deleted VM's room would come back as allocated until the next reconcile.
-- KEYS: host hash, host's claimed-vm set, changed zset, seq counter
-- ARGV: key prefix, host_id, now, grace, view_at, the host's allocations (one per resource), its named extras
--       allocated (JSON), vm_count, then per committed VM: vm_id, one amount per resource, its named
--       extras (JSON)
-- Returns {restored, dropped, in_flight, stale}
{{counts}}

local RESOURCE_FIELDS = {{resource fields}}
local R = #RESOURCE_FIELDS
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, 0, 0, 0}
end
local prefix, host, now, grace, view_at = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local first_vm = 8 + R
local released_key = prefix .. ':released'
local any_released = redis.call('ZCOUNT', released_key, view_at, '+inf') > 0
local stale = {}
for r = 1, R + 1 do
  stale[r] = 0
end
local stale_extra = {}
local committed = {}
local restored = 0
for i = first_vm, #ARGV, R + 2 do
  local vm = ARGV[i]
  local gone = any_released and redis.call('ZSCORE', released_key, vm)
  if gone and tonumber(gone) >= view_at then
    for r = 1, R do
      stale[r] = stale[r] + tonumber(ARGV[i + r])
    end
    stale[R + 1] = stale[R + 1] + 1
    add_counts(stale_extra, decode_counts(ARGV[i + R + 1]), 1)
  else
    committed[vm] = true
    local ck = prefix .. ':claim:' .. vm
    -- No claim, or one naming another host (a migration's move of claims cut short): PostgreSQL's
    -- word is restored (the group fields are written back by reconcile_group).
    if redis.call('HGET', ck, 'host') ~= host then
      redis.call('DEL', ck)
      local record = {'host', host, 'at', ARGV[3]}
      for r = 1, R do
        record[#record + 1] = RESOURCE_FIELDS[r]
        record[#record + 1] = ARGV[i + r]
      end
      local extra = ARGV[i + R + 1]
      if extra ~= '' and extra ~= '{}' then
        record[#record + 1] = 'extra'
        record[#record + 1] = extra
      end
      redis.call('HSET', ck, unpack(record))
      restored = restored + 1
    end
    redis.call('SADD', KEYS[2], vm)
  end
end
local in_flight = {}
for r = 1, R + 1 do
  in_flight[r] = 0
end
local in_flight_extra = {}
local dropped = 0
local read = {'host', 'at'}
for r = 1, R do
  read[#read + 1] = RESOURCE_FIELDS[r]
end
read[#read + 1] = 'extra'
for _, vm in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if not committed[vm] then
    local ck = prefix .. ':claim:' .. vm
    local c = redis.call('HMGET', ck, unpack(read))
    if c[1] == host and now - tonumber(c[2]) < grace then
      for r = 1, R do
        in_flight[r] = in_flight[r] + tonumber(c[2 + r])
      end
      in_flight[R + 1] = in_flight[R + 1] + 1
      add_counts(in_flight_extra, decode_counts(c[3 + R]), 1)
    else
      if c[1] == host then
        -- Its storage pools are counted apart from the allocations set below: given back here.
        local pools = redis.call('HMGET', ck, 'pools', 'shared_pools')
        if pools[1] and pools[1] ~= '{}' then
          local used = add_counts(decode_counts(redis.call('HGET', KEYS[1], 'a_pools')), decode_counts(pools[1]), -1)
          redis.call('HSET', KEYS[1], 'a_pools', encode_counts(used))
        end
        for name, gb in pairs(decode_counts(pools[2])) do
          redis.call('HINCRBY', prefix .. ':storage_pools', 'a:' .. name, 0 - gb)
        end
        redis.call('DEL', ck)
      end
      redis.call('SREM', KEYS[2], vm)
      dropped = dropped + 1
    end
  end
end
local names, values = {}, {}
for r = 1, R do
  names[r] = 'a_' .. RESOURCE_FIELDS[r]
  values[r] = tonumber(ARGV[5 + r]) - stale[r] + in_flight[r]
end
names[R + 1] = 'vm_count'
values[R + 1] = tonumber(ARGV[7 + R]) - stale[R + 1] + in_flight[R + 1]
local extra = add_counts(add_counts(decode_counts(ARGV[6 + R]), stale_extra, -1), in_flight_extra, 1)
-- Written, and put in the change feed, only when it differs: every scheduler reads again each host
-- the feed names, and this runs over every host every VMSCHED_RECONCILE_INTERVAL.
local current = redis.call('HMGET', KEYS[1], 'synced', 'a_extra', unpack(names))
local differs = current[1] ~= '1' or not same_counts(decode_counts(current[2]), extra)
for i = 1, R + 1 do
  if tonumber(current[i + 2]) ~= values[i] then
    differs = true
  end
end
if differs then
  local write = {'synced', '1', 'a_extra', encode_counts(extra)}
  for i = 1, R + 1 do
    write[#write + 1] = names[i]
    write[#write + 1] = values[i]
  end
  redis.call('HSET', KEYS[1], unpack(write))
  redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[4]), host)
end
return {restored, dropped, in_flight[R + 1], stale[R + 1]}
