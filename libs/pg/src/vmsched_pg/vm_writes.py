"""Writing lifecycle changes (:mod:`vmsched_domain.vm_changes`) to PostgreSQL: the VM's row, and the
host's allocations when the change gives its capacity back (its host's, or its migration target's),
in the caller's transaction.

The caller has locked the rows it changes (``SELECT ... FOR UPDATE``, in id order when there are
several); each update is still guarded by the status it expects, so a change computed from a
stale read never lands.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from vmsched_contract.messages import add_counts
from vmsched_domain.extra import extra_json
from vmsched_domain.fit import RESOURCES
from vmsched_domain.lifecycle import IMPLIES_MESSAGE
from vmsched_domain.vm_changes import Change
from vmsched_pg.extra_sql import sql_extra_plus
from vmsched_pg.rows import VM_COLUMNS

_FIELDS = [rule.field for rule in RESOURCES]

LOCK_VMS = text(f"SELECT {VM_COLUMNS} FROM vms WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY id FOR UPDATE")

# Every change of a call in one statement: the changes travel as one jsonb array of records (one
# parameter, whatever their number), so a batch of deletes costs one round trip, not one per VM.
_APPLY = text(
    """
    UPDATE vms
       SET status = c.status, status_reason = c.status_reason, hypervisor_id = c.hypervisor_id,
           attempt = c.attempt, failures = c.failures, exclusions = c.exclusions, attempts = c.attempts,
           restart_count = c.restart_count, scheduled_at = c.scheduled_at, started_at = c.started_at,
           failed_at = c.failed_at, preempted_by = c.preempted_by, task = c.task, task_since = c.task_since,
           migrations = c.migrations, target_host = c.target_host, migration_target = c.migration_target,
           updated_at = now(),
           published_at = CASE WHEN c.unsent THEN NULL ELSE vms.published_at END
      FROM jsonb_to_recordset(CAST(:changes AS jsonb)) AS c(
               id uuid, expected text, status text, status_reason text, hypervisor_id text, attempt int,
               failures int, exclusions jsonb, attempts jsonb, restart_count int, scheduled_at timestamptz,
               started_at timestamptz, failed_at timestamptz, preempted_by uuid, task text,
               task_since timestamptz, migrations int, target_host text, migration_target text,
               unsent boolean)
     WHERE vms.id = c.id AND vms.status = c.expected
    RETURNING vms.id
    """
)
# The hosts' rows are locked in id order (the LockRows step runs after the sort), as every other
# writer of hosts does, so two releases cannot deadlock.
_RELEASE = text(
    f"""
    WITH released AS (
        SELECT * FROM jsonb_to_recordset(CAST(:released AS jsonb)) AS r(
            host_id text, {", ".join(f"{f} bigint" for f in _FIELDS)}, vms int, extra jsonb)
    ), locked AS (
        SELECT hosts.id FROM hosts JOIN released ON hosts.id = released.host_id ORDER BY hosts.id FOR UPDATE OF hosts
    )
    UPDATE hosts SET {", ".join(f"alloc_{f} = alloc_{f} - r.{f}" for f in _FIELDS)}, vm_count = vm_count - r.vms,
           alloc_extra = CASE WHEN r.extra = CAST('{{}}' AS jsonb) THEN alloc_extra
                              ELSE {sql_extra_plus("alloc_extra", "r.extra", "-")} END
      FROM released AS r JOIN locked ON locked.id = r.host_id
     WHERE hosts.id = r.host_id
    """
)


def _timestamp(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    # Every datetime of a record is aware (read from timestamptz, or made in UTC); a naive one is taken for UTC.
    return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).isoformat()


def _record(change: Change) -> dict[str, Any]:
    after = change.after
    return {
        "id": str(after.id),
        "expected": change.before.status.value,
        "status": after.status.value,
        "status_reason": after.status_reason,
        "hypervisor_id": after.hypervisor_id,
        "attempt": after.attempt,
        "failures": after.failures,
        "exclusions": dict(after.exclusions),
        "attempts": after.attempts,
        "restart_count": after.restart_count,
        "scheduled_at": _timestamp(after.scheduled_at),
        "started_at": _timestamp(after.started_at),
        "failed_at": _timestamp(after.failed_at),
        "preempted_by": None if after.preempted_by is None else str(after.preempted_by),
        "task": None if after.task is None else after.task.value,
        "task_since": _timestamp(after.task_since),
        "migrations": after.migrations,
        "target_host": after.target_host,
        "migration_target": after.migration_target,
        "unsent": after.status in IMPLIES_MESSAGE and after.status is not change.before.status,
    }


def _rounds(changes: Sequence[Change]) -> list[list[Change]]:
    """The changes in rounds of one change per VM, in their order: one statement updates a row at most
    once, and a second change of the same VM expects the status the first one wrote."""
    rounds: list[list[Change]] = []
    seen: dict[UUID, int] = {}
    for change in changes:
        turn = seen.get(change.after.id, 0)
        seen[change.after.id] = turn + 1
        if turn == len(rounds):
            rounds.append([])
        rounds[turn].append(change)
    return rounds


async def apply(connection: AsyncConnection, changes: Sequence[Change]) -> list[Change]:
    """Write the changes, all in one statement (a round per repeated VM); returns those that landed,
    in their order (a row no longer in the expected status is left alone). Hosts are given back what
    the landed changes release, in one more statement."""
    wrote: set[int] = set()  # the landed changes, by identity (a VM may change twice)
    for round_ in _rounds(changes):
        records = json.dumps([_record(change) for change in round_], default=str)
        written = {row.id for row in await connection.execute(_APPLY, {"changes": records})}
        wrote.update(id(change) for change in round_ if change.after.id in written)
    landed = [change for change in changes if id(change) in wrote]
    released: dict[str, list[int]] = defaultdict(lambda: [0] * (len(_FIELDS) + 1))
    released_extra: dict[str, dict[str, int]] = defaultdict(dict)
    for change in landed:
        host = change.released_from
        if host is None:
            continue
        total = released[host]
        for position, field in enumerate(_FIELDS):
            total[position] += getattr(change.before.resources, field)
        total[-1] += 1
        if change.before.resources.extra:
            released_extra[host] = add_counts(released_extra[host], change.before.resources.extra)
    if released:
        rows = [
            {
                "host_id": host,
                **dict(zip(_FIELDS, amounts, strict=False)),
                "vms": amounts[-1],
                "extra": json.loads(extra_json(released_extra.get(host, {}))),
            }
            for host, amounts in sorted(released.items())
        ]
        await connection.execute(_RELEASE, {"released": json.dumps(rows)})
    return landed
