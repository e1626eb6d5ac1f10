-- Fold agent heartbeats into their hosts' snapshot hashes.
-- The state fields (capacity, ratios, reserved, labels, status, pause flag) are written as given;
-- allocations only into a hash that has none yet (a new host, or after a Redis flush): from then on
-- claims and releases keep them. A host whose state did not change is announced on the change feed
-- only every bump_interval seconds, which keeps the feed small on large fleets.
-- Measured usage is written with every heartbeat (or removed when a heartbeat carries none) but is
-- never a change: it moves all the time. Beside each measurement the script keeps the allocation of
-- that resource at this moment, so a reader can tell what was allocated after the measurement.
-- KEYS: hosts set, changed zset, seq counter, then per host: its hash
-- ARGV: bump_interval, state field count S, allocation field count A, usage field count U, then
--       S state field names, A allocation field names, then per measured resource: its field, the
--       field of the allocation when measured, the position (1..A) of its allocation field;
--       then per host: host_id, heartbeat time, S state values, A allocation values, U measurements
--       (all empty strings when the heartbeat carried none).
-- Returns per host 1 when its state changed, else 0.
local bump = tonumber(ARGV[1])
local S, A, U = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local state_fields, alloc_fields = {}, {}
for i = 1, S do
  state_fields[i] = ARGV[4 + i]
end
for i = 1, A do
  alloc_fields[i] = ARGV[4 + S + i]
end
local usage_fields, usage_then_fields, usage_alloc_at = {}, {}, {}
for i = 1, U do
  local at = 4 + S + A + 3 * (i - 1)
  usage_fields[i] = ARGV[at + 1]
  usage_then_fields[i] = ARGV[at + 2]
  usage_alloc_at[i] = tonumber(ARGV[at + 3])
end
local read = {'synced', 'hb_published'}
for i = 1, S do
  read[#read + 1] = state_fields[i]
end
local read_alloc = #read
for i = 1, A do
  read[#read + 1] = alloc_fields[i]
end
local read_usage = #read + 1
read[read_usage] = usage_fields[1]

local results = {}
local arg = 5 + S + A + 3 * U
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
  local synced = old[1] == '1'
  if not synced then
    for i = 1, A do
      write[#write + 1] = alloc_fields[i]
      write[#write + 1] = ARGV[arg + 1 + S + i]
    end
    write[#write + 1] = 'synced'
    write[#write + 1] = '1'
    changed = true
  end
  local measured = arg + 2 + S + A
  if ARGV[measured] ~= '' then
    for i = 1, U do
      local at = usage_alloc_at[i]
      -- the allocation this measurement was taken against: the hash's, or the one written just now
      local allocated = synced and old[read_alloc + at] or ARGV[arg + 1 + S + at]
      write[#write + 1] = usage_fields[i]
      write[#write + 1] = ARGV[measured + i - 1]
      write[#write + 1] = usage_then_fields[i]
      write[#write + 1] = allocated or '0'
    end
  elseif old[read_usage] then
    local gone = {}
    for i = 1, U do
      gone[#gone + 1] = usage_fields[i]
      gone[#gone + 1] = usage_then_fields[i]
    end
    redis.call('HDEL', key, unpack(gone))
  end
  if changed or (tonumber(hb) - tonumber(old[2] or '0')) >= bump then
    write[#write + 1] = 'hb_published'
    write[#write + 1] = hb
    redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), host)
  end
  redis.call('HSET', key, unpack(write))
  redis.call('SADD', KEYS[1], host)
  results[h] = changed and 1 or 0
  arg = arg + 2 + S + A + U
end
return results
