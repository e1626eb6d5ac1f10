"""Named extra resources in PostgreSQL and Redis: a ``{name: count}`` map per VM (``vms.extra``), per
host (``hosts.extra``, what its agent reports) and what a host's VMs hold of each
(``hosts.alloc_extra``), stored as JSON. How such a map is written, and the SQL that adds two of
them up, are here, once, for every writer."""

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


def sql_extra_plus(base: str, change: str, sign: str = "+") -> str:
    """A SQL expression: the jsonb map ``base`` with ``change`` added to it (``sign`` '+') or taken
    from it ('-'), name by name; a name left at 0 is dropped. Both are SQL expressions of type jsonb."""
    if sign not in ("+", "-"):
        raise ValueError(f"sign is '+' or '-', not {sign!r}")
    return (
        "(SELECT coalesce(jsonb_object_agg(sums.key, sums.total), CAST('{}' AS jsonb)) FROM ("
        "SELECT terms.key, sum(terms.amount) AS total FROM ("
        f"SELECT key, CAST(value AS bigint) AS amount FROM jsonb_each_text({base}) "
        f"UNION ALL SELECT key, {sign}CAST(value AS bigint) FROM jsonb_each_text({change})"
        ") AS terms GROUP BY terms.key HAVING sum(terms.amount) <> 0) AS sums)"
    )
