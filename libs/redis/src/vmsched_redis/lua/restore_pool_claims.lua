-- Give claims restored from PostgreSQL (lua/reconcile_host.lua) the storage pools their VMs' volumes
-- are on, so that their release gives that space back (lua/release_claim.lua). A claim that has them
-- already (made by the claim script) or that does not exist is left alone.
-- KEYS: per VM its claim hash; ARGV: per VM the JSON {pool: GB} of its volumes on shared pools, then
-- the same of its volumes on its host's local pools.
-- Returns how many claims were given their pools.
local given = 0
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    given = given + redis.call('HSETNX', KEYS[i], 'shared_pools', ARGV[2 * i - 1])
    redis.call('HSETNX', KEYS[i], 'pools', ARGV[2 * i])
  end
end
return given
