-- Set fields of an existing host hash (pause flag, status) and publish the change.
-- KEYS: host hash, changed zset, seq counter
-- ARGV: host_id, field, value [, field, value ...]
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), ARGV[1])
return 1
