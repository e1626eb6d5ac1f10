-- Fold agent heartbeats into their hosts' snapshot hashes.
-- The state fields (capacity, ratios, reserved, labels, status, pause flag) are written as given;
-- allocations only into a hash that has none yet (a new host, or after a Redis flush): from then on
-- claims and releases keep them. A host whose state did not change is announced on the change feed
-- only every bump_interval seconds, which keeps the feed small on large fleets.
-- KEYS: hosts set, changed zset, seq counter, then per host: its hash
-- ARGV: bump_interval, state field count S, allocation field count A, then per host:
--       host_id, heartbeat time, S state values, A allocation values
-- ARGV also names the fields once, before the hosts: S state field names, A allocation field names.
-- Returns per host 1 when its state changed, else 0.
local bump = tonumber(ARGV[1])
local S, A = tonumber(ARGV[2]), tonumber(ARGV[3])
local state_fields, alloc_fields = {}, {}
for i = 1, S do
  state_fields[i] = ARGV[3 + i]
end
for i = 1, A do
  alloc_fields[i] = ARGV[3 + S + i]
end
local read = {'synced', 'hb_published'}
for i = 1, S do
  read[#read + 1] = state_fields[i]
end

local results = {}
local arg = 4 + S + A
for h = 1, #KEYS - 3 do
  local key, host, hb = KEYS[3 + h], ARGV[arg], ARGV[arg + 1]
  local old = redis.call('HMGET', key, unpack(read))
  local write = {'hb', hb}
  local changed = false
  for i = 1, S do
    local value = ARGV[arg + 1 + i]
    if old[2 + i] ~= value then
      changed = true
    end
    write[#write + 1] = state_fields[i]
    write[#write + 1] = value
  end
  if old[1] ~= '1' then
    for i = 1, A do
      write[#write + 1] = alloc_fields[i]
      write[#write + 1] = ARGV[arg + 1 + S + i]
    end
    write[#write + 1] = 'synced'
    write[#write + 1] = '1'
    changed = true
  end
  if changed or (tonumber(hb) - tonumber(old[2] or '0')) >= bump then
    write[#write + 1] = 'hb_published'
    write[#write + 1] = hb
    redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), host)
  end
  redis.call('HSET', key, unpack(write))
  redis.call('SADD', KEYS[1], host)
  results[h] = changed and 1 or 0
  arg = arg + 2 + S + A
end
return results
