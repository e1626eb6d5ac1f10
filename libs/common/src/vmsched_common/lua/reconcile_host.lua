-- Make one host's Redis allocations agree with PostgreSQL, the truth.
-- Committed VMs (from PostgreSQL) get their claim restored; claims of VMs PostgreSQL does not count
-- are kept while younger than the grace period (a scheduler may be between claim and commit) and
-- dropped after it. Allocations become PostgreSQL's plus the kept in-flight claims.
-- KEYS: host hash, host's claimed-vm set, changed zset, seq counter
-- ARGV: key prefix, host_id, now, grace, a_cpu, a_memory_mb, a_disk_gb, a_gpu, vm_count,
--       then per committed VM: vm_id, cpu, memory_mb, disk_gb, gpu
-- Returns {restored, dropped, in_flight}
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, 0, 0}
end
local prefix, host, now, grace = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local committed = {}
local restored = 0
for i = 10, #ARGV, 5 do
  local vm = ARGV[i]
  committed[vm] = true
  local ck = prefix .. ':claim:' .. vm
  if redis.call('EXISTS', ck) == 0 then
    redis.call('HSET', ck, 'host', host, 'cpu', ARGV[i + 1], 'memory_mb', ARGV[i + 2],
      'disk_gb', ARGV[i + 3], 'gpu', ARGV[i + 4], 'at', ARGV[3])
    restored = restored + 1
  end
  redis.call('SADD', KEYS[2], vm)
end
local extra = {0, 0, 0, 0, 0}
local dropped = 0
for _, vm in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if not committed[vm] then
    local ck = prefix .. ':claim:' .. vm
    local c = redis.call('HMGET', ck, 'host', 'cpu', 'memory_mb', 'disk_gb', 'gpu', 'at')
    if c[1] == host and now - tonumber(c[6]) < grace then
      extra[1] = extra[1] + tonumber(c[2])
      extra[2] = extra[2] + tonumber(c[3])
      extra[3] = extra[3] + tonumber(c[4])
      extra[4] = extra[4] + tonumber(c[5])
      extra[5] = extra[5] + 1
    else
      if c[1] == host then
        redis.call('DEL', ck)
      end
      redis.call('SREM', KEYS[2], vm)
      dropped = dropped + 1
    end
  end
end
redis.call('HSET', KEYS[1],
  'a_cpu', tonumber(ARGV[5]) + extra[1], 'a_memory_mb', tonumber(ARGV[6]) + extra[2],
  'a_disk_gb', tonumber(ARGV[7]) + extra[3], 'a_gpu', tonumber(ARGV[8]) + extra[4],
  'vm_count', tonumber(ARGV[9]) + extra[5], 'synced', '1')
redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[4]), host)
return {restored, dropped, extra[5]}
