-- Reserve a VM's resources on one host, atomically: check and reserve in one step.
-- Keyed by VM id: a VM that already holds a claim gets that claim back, nothing is reserved twice.
-- KEYS: host hash, claim hash, host's claimed-vm set, changed zset, seq counter
-- ARGV: vm_id, host_id, cpu, memory_mb, disk_gb, gpu, now
-- Returns {outcome, detail}: {'claimed', host} | {'held', host} | {'unknown_host', ''} |
--   {'offline', status} | {'paused', ''} | {'insufficient', resource}
local held = redis.call('HGET', KEYS[2], 'host')
if held then
  return {'held', held}
end
local h = redis.call('HMGET', KEYS[1], 'synced', 'status', 'paused',
  'cpu', 'memory_mb', 'disk_gb', 'gpu', 'cpu_ratio', 'memory_ratio',
  'a_cpu', 'a_memory_mb', 'a_disk_gb', 'a_gpu')
if h[1] ~= '1' then
  return {'unknown_host', ''}
end
if h[2] ~= 'online' then
  return {'offline', h[2] or ''}
end
if h[3] == '1' then
  return {'paused', ''}
end
local need = {tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])}
local limit = {
  math.floor(tonumber(h[4]) * tonumber(h[8] or '1') + 1e-9),
  math.floor(tonumber(h[5]) * tonumber(h[9] or '1') + 1e-9),
  tonumber(h[6]),
  tonumber(h[7]),
}
local used = {tonumber(h[10]), tonumber(h[11]), tonumber(h[12]), tonumber(h[13])}
local names = {'cpu', 'memory', 'disk', 'gpu'}
for i = 1, 4 do
  if used[i] + need[i] > limit[i] then
    return {'insufficient', names[i]}
  end
end
redis.call('HINCRBY', KEYS[1], 'a_cpu', need[1])
redis.call('HINCRBY', KEYS[1], 'a_memory_mb', need[2])
redis.call('HINCRBY', KEYS[1], 'a_disk_gb', need[3])
redis.call('HINCRBY', KEYS[1], 'a_gpu', need[4])
redis.call('HINCRBY', KEYS[1], 'vm_count', 1)
redis.call('HSET', KEYS[2], 'host', ARGV[2], 'cpu', ARGV[3], 'memory_mb', ARGV[4],
  'disk_gb', ARGV[5], 'gpu', ARGV[6], 'at', ARGV[7])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], redis.call('INCR', KEYS[5]), ARGV[2])
return {'claimed', ARGV[2]}
