-- Remove a deleted host from the snapshot and name it on the change feed once more: a scheduler's
-- next refresh reads it, finds no hash and drops it from its copy.
-- KEYS: host hash, host's claimed-vm set, hosts set, changed zset, seq counter
-- ARGV: host_id
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], redis.call('INCR', KEYS[5]), ARGV[1])
return 1
