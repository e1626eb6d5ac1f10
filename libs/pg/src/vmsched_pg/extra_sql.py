"""Named extra resources' ``{name: count}`` maps (:mod:`vmsched_domain.extra`) added up in SQL, once,
for every statement that changes a host's ``alloc_extra``."""

from __future__ import annotations


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
