-- Storage pools of a claim (rendered into claim.lua from lua/pool_claim.lua): the pools a claim's
-- volumes take are checked with the pool rule and reserved in the same step as the host's capacity.
-- A local pool's allocation is the host's 'a_pools' map; a shared pool's is 'a:<name>' in the
-- storage_pools hash, counted once whichever host takes the VM. Needs the counts helpers.
local function decode_list(raw)
  if not raw or raw == '' or raw == '[]' then
    return {}
  end
  return cjson.decode(raw)
end

local function pools_key_of(host_key, host)
  return string.sub(host_key, 1, #host_key - #(':host:' .. host)) .. ':storage_pools'
end

-- The pools of `asked` the host reaches: name -> {capacity, allocated, tags (a set), shared}; what
-- earlier claims of an all-or-nothing call put on them is in `booked` (a local pool's key is
-- host .. '/' .. name, a shared pool's its name).
local function reached_pools(k, booked)
  local raw = redis.call('HMGET', k.host_key, 'pools', 'a_pools')
  local listed, used = {}, decode_counts(raw[2])
  for _, p in ipairs(decode_list(raw[1])) do
    listed[p.name] = p
  end
  local reached = {}
  for _, a in ipairs(k.pools) do
    local p = listed[a.name]
    if p then
      local tags = {}
      if p.kind == 'shared' then
        local s = redis.call('HMGET', k.pools_key, 'c:' .. a.name, 't:' .. a.name, 'a:' .. a.name)
        for _, tag in ipairs(decode_list(s[2])) do
          tags[tag] = true
        end
        reached[a.name] = {
          capacity = tonumber(s[1] or '0'), allocated = tonumber(s[3] or '0') + (booked[a.name] or 0),
          tags = tags, shared = true
        }
      else
        for _, tag in ipairs(p.tags) do
          tags[tag] = true
        end
        reached[a.name] = {
          capacity = tonumber(p.capacity_gb), allocated = (used[a.name] or 0) + (booked[k.host .. '/' .. a.name] or 0),
          tags = tags, shared = false
        }
      end
    end
  end
  return reached
end

-- Why the claim's volumes cannot take their pools, or nil.
local function pools_refusal(k, booked)
  if not k.pools then
    return nil
  end
  return pool_refusal(k.pools, reached_pools(k, booked or {}))
end

-- Count the claim's volumes in `booked` (all or nothing: what later claims of the call see).
local function book_pools(k, booked)
  if not k.pools then
    return
  end
  local reached = reached_pools(k, {})
  for _, a in ipairs(k.pools) do
    local key = reached[a.name].shared and a.name or (k.host .. '/' .. a.name)
    booked[key] = (booked[key] or 0) + a.gb
  end
end

local function reserve_pools(k)
  if not k.pools then
    return
  end
  local reached = reached_pools(k, {})
  local used, mine, theirs = nil, {}, {}
  for _, a in ipairs(k.pools) do
    if reached[a.name].shared then
      redis.call('HINCRBY', k.pools_key, 'a:' .. a.name, a.gb)
      theirs[a.name] = a.gb
    else
      used = used or decode_counts(redis.call('HGET', k.host_key, 'a_pools'))
      used[a.name] = (used[a.name] or 0) + a.gb
      mine[a.name] = a.gb
    end
  end
  if used then
    redis.call('HSET', k.host_key, 'a_pools', encode_counts(used))
  end
  redis.call('HSET', k.claim_key, 'pools', encode_counts(mine), 'shared_pools', encode_counts(theirs))
end
