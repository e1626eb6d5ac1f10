-- Give a VM's claimed resources back to its host. Idempotent: no claim, nothing to do.
-- KEYS: claim hash, changed zset, seq counter
-- ARGV: key prefix, vm_id
-- Returns the host the claim was on, or false.
local c = redis.call('HMGET', KEYS[1], 'host', 'cpu', 'memory_mb', 'disk_gb', 'gpu')
local host = c[1]
if not host then
  return false
end
local hk = ARGV[1] .. ':host:' .. host
-- A host re-created after a flush carries allocations read from PostgreSQL, where this VM may
-- already be released; only a synced hash holds the claim's share.
if redis.call('HGET', hk, 'synced') == '1' and redis.call('SISMEMBER', hk .. ':vms', ARGV[2]) == 1 then
  -- 0 - x, not -x: Lua's -0 is sent as "-0", which HINCRBY rejects (and a script error does not
  -- undo the increments before it).
  redis.call('HINCRBY', hk, 'a_cpu', 0 - tonumber(c[2]))
  redis.call('HINCRBY', hk, 'a_memory_mb', 0 - tonumber(c[3]))
  redis.call('HINCRBY', hk, 'a_disk_gb', 0 - tonumber(c[4]))
  redis.call('HINCRBY', hk, 'a_gpu', 0 - tonumber(c[5]))
  redis.call('HINCRBY', hk, 'vm_count', -1)
end
redis.call('SREM', hk .. ':vms', ARGV[2])
redis.call('DEL', KEYS[1])
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), host)
return host
