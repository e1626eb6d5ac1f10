"""Named extra resources as stored: a ``{name: count}`` map per VM (``vms.extra``), per host
(``hosts.extra``, what its agent reports) and what a host's VMs hold of each (``hosts.alloc_extra``),
as JSON in PostgreSQL and in the Redis snapshot. How such a map is written is here, once, for every
writer; the SQL that adds two of them up is :func:`vmsched_pg.extra_sql.sql_extra_plus`."""

from __future__ import annotations

import json
from collections.abc import Mapping


def extra_json(counts: Mapping[str, int]) -> str:
    """The JSON a ``{name: count}`` column (and the snapshot) stores: names sorted, compact, no zeros."""
    if not counts:
        return "{}"
    return json.dumps({name: int(counts[name]) for name in sorted(counts) if counts[name]}, separators=(",", ":"))


def extra_of(raw: str | None) -> dict[str, int]:
    """A map :func:`extra_json` wrote (an absent or empty one: no extras)."""
    if not raw or raw == "{}":
        return {}
    return {name: int(count) for name, count in json.loads(raw).items()}
