"""vmsched's Redis adapter: the capacity snapshot every scheduler reads and claims on (one hash per
host, claims keyed by VM, a change feed), its Lua scripts, and the Redis client."""
