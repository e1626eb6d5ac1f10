-- Fold an agent heartbeat into the host's snapshot hash.
-- Capacity, labels, status and heartbeat time come from the agent; the pause flag from PostgreSQL.
-- Allocations are written only into a hash that has none yet (new host, or after a Redis flush):
-- from then on claims and releases keep them.
-- KEYS: host hash, hosts set, changed zset, seq counter
-- ARGV: host_id, cpu, memory_mb, disk_gb, gpu, cpu_ratio, memory_ratio, labels_json, status, hb,
--       bump_interval, a_cpu, a_memory_mb, a_disk_gb, a_gpu, vm_count, paused
local old = redis.call('HMGET', KEYS[1], 'cpu', 'memory_mb', 'disk_gb', 'gpu', 'cpu_ratio',
  'memory_ratio', 'labels', 'status', 'paused', 'synced', 'hb_published')
local fresh = {ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[17]}
local changed = false
for i = 1, 9 do
  if old[i] ~= fresh[i] then
    changed = true
  end
end
redis.call('HSET', KEYS[1], 'cpu', ARGV[2], 'memory_mb', ARGV[3], 'disk_gb', ARGV[4], 'gpu', ARGV[5],
  'cpu_ratio', ARGV[6], 'memory_ratio', ARGV[7], 'labels', ARGV[8], 'status', ARGV[9], 'hb', ARGV[10],
  'paused', ARGV[17])
if old[10] ~= '1' then
  redis.call('HSET', KEYS[1], 'a_cpu', ARGV[12], 'a_memory_mb', ARGV[13], 'a_disk_gb', ARGV[14],
    'a_gpu', ARGV[15], 'vm_count', ARGV[16], 'synced', '1')
  changed = true
end
redis.call('SADD', KEYS[2], ARGV[1])
-- Readers poll for changed hosts; a heartbeat that changes nothing but its time is published only
-- every bump_interval seconds, which keeps the change feed small on large fleets.
if changed or (tonumber(ARGV[10]) - tonumber(old[11] or '0')) >= tonumber(ARGV[11]) then
  redis.call('HSET', KEYS[1], 'hb_published', ARGV[10])
  redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[4]), ARGV[1])
end
return changed and 1 or 0
