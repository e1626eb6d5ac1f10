-- Give one VM's claim back to its host and its place back to its server group (rendered into
-- release.lua and claim.lua from lua/release_claim.lua). Returns the host the claim was on, or nil.
-- Needs RESOURCE_FIELDS, R and the counts functions (add_counts, ...); marks the host in `changed`.
-- Every release is remembered in `released` (claim id -> when, by Redis's clock): a reconcile reading
-- PostgreSQL before it must not restore the claim (lua/reconcile_host.lua).
local RELEASE_READ = {'host'}
for i = 1, #RESOURCE_FIELDS do
  RELEASE_READ[#RELEASE_READ + 1] = RESOURCE_FIELDS[i]
end
RELEASE_READ[#RELEASE_READ + 1] = 'group'
RELEASE_READ[#RELEASE_READ + 1] = 'domain'
RELEASE_READ[#RELEASE_READ + 1] = 'extra'
RELEASE_READ[#RELEASE_READ + 1] = 'pools'
RELEASE_READ[#RELEASE_READ + 1] = 'shared_pools'

local function remember_release(prefix, claim_id)
  local t = redis.call('TIME')
  redis.call('ZADD', prefix .. ':released', tonumber(t[1]) + tonumber(t[2]) / 1000000, claim_id)
end

local function release_claim(prefix, claim_key, vm)
  local c = redis.call('HMGET', claim_key, unpack(RELEASE_READ))
  local host = c[1]
  if not host then
    return nil
  end
  local hk = prefix .. ':host:' .. host
  -- A host re-created after a flush carries allocations read from PostgreSQL, where this VM may
  -- already be released; only a synced hash that lists the VM holds the claim's share.
  if redis.call('HGET', hk, 'synced') == '1' and redis.call('SISMEMBER', hk .. ':vms', vm) == 1 then
    for i = 1, R do
      -- 0 - x, not -x: Lua's -0 is sent as "-0", which HINCRBY rejects (and a script error
      -- does not undo the increments before it).
      local amount = tonumber(c[i + 1] or '0')
      if amount ~= 0 then
        redis.call('HINCRBY', hk, 'a_' .. RESOURCE_FIELDS[i], 0 - amount)
      end
    end
    local extra = c[R + 4]
    if extra then
      local used = add_counts(decode_counts(redis.call('HGET', hk, 'a_extra')), decode_counts(extra), -1)
      redis.call('HSET', hk, 'a_extra', encode_counts(used))
    end
    local pools = c[R + 5]
    if pools and pools ~= '{}' then
      local used = add_counts(decode_counts(redis.call('HGET', hk, 'a_pools')), decode_counts(pools), -1)
      redis.call('HSET', hk, 'a_pools', encode_counts(used))
    end
    redis.call('HINCRBY', hk, 'vm_count', -1)
  end
  -- A shared pool's volumes are given back whatever the host's hash: the pool is counted apart.
  local shared = c[R + 6]
  if shared and shared ~= '{}' then
    for name, gb in pairs(decode_counts(shared)) do
      if redis.call('HINCRBY', prefix .. ':storage_pools', 'a:' .. name, 0 - gb) < 0 then
        redis.call('HSET', prefix .. ':storage_pools', 'a:' .. name, 0)
      end
    end
  end
  redis.call('SREM', hk .. ':vms', vm)
  local group, domain = c[R + 2], c[R + 3]
  -- As for hosts: only a group whose set lists the VM counts it (after a flush, reconcile_group
  -- rebuilds the counts from PostgreSQL).
  if group and domain then
    local gk = prefix .. ':group:' .. group
    if redis.call('SREM', gk .. ':vms', vm) == 1 and redis.call('HINCRBY', gk, domain, -1) <= 0 then
      redis.call('HDEL', gk, domain)
    end
  end
  redis.call('DEL', claim_key)
  remember_release(prefix, vm)
  changed[host] = true
  return host
end
