"""The Lua scripts of ``lua/`` as Redis runs them: the fit rule, the server group rule, the helpers of
named extra resources and the resource field lists pasted in where a script names them."""

from __future__ import annotations

from collections.abc import Iterable
from importlib.resources import files

from vmsched_domain.fit import RESOURCES, lua_shortfall_function
from vmsched_domain.groups import LUA_GROUP_RULE
from vmsched_domain.storage import lua_pool_refusal_function

# Lua helpers for those maps, pasted where a script says ``{{counts}}``.
LUA_COUNTS = """-- Named extra resources' {name: count} maps, stored as JSON (vmsched_domain.extra).
local function decode_counts(raw)
  if not raw or raw == '' or raw == '{}' then
    return {}
  end
  return cjson.decode(raw)
end

-- JSON of the names not at 0 ('{}' for none).
local function encode_counts(counts)
  local kept, any = {}, false
  for name, n in pairs(counts) do
    if n ~= 0 then
      kept[name] = n
      any = true
    end
  end
  if not any then
    return '{}'
  end
  return cjson.encode(kept)
end

-- into + sign x counts, name by name, in place; returns into.
local function add_counts(into, counts, sign)
  for name, n in pairs(counts) do
    into[name] = (into[name] or 0) + sign * n
  end
  return into
end

local function same_counts(a, b)
  for name, n in pairs(a) do
    if (b[name] or 0) ~= n then
      return false
    end
  end
  for name, n in pairs(b) do
    if (a[name] or 0) ~= n then
      return false
    end
  end
  return true
end"""


def lua_table(values: Iterable[str | None]) -> str:
    """A Lua table literal of strings (``false`` for None)."""
    return "{" + ", ".join("false" if v is None else f"'{v}'" for v in values) + "}"


def render_script(name: str) -> str:
    """A script of ``lua/`` with the fit rule and the resource field lists pasted in."""
    scripts = files("vmsched_redis").joinpath("lua")
    text = scripts.joinpath(f"{name}.lua").read_text()
    return (
        text.replace("{{release claim}}", scripts.joinpath("release_claim.lua").read_text())
        .replace("{{pool claim}}", scripts.joinpath("pool_claim.lua").read_text())
        .replace("{{pool rule}}", lua_pool_refusal_function())
        .replace("{{fit rule}}", lua_shortfall_function())
        .replace("{{group rule}}", LUA_GROUP_RULE)
        .replace("{{counts}}", LUA_COUNTS)
        .replace("{{resource fields}}", lua_table(rule.field for rule in RESOURCES))
        .replace("{{ratio fields}}", lua_table(rule.ratio_field for rule in RESOURCES))
    )
