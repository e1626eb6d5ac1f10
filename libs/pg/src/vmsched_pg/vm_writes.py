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

_APPLY = text(
    """
    UPDATE vms
       SET status = :status, status_reason = :status_reason, hypervisor_id = :hypervisor_id, attempt = :attempt,
           failures = :failures, exclusions = CAST(:exclusions AS jsonb), attempts = CAST(:attempts AS jsonb),
           restart_count = :restart_count, scheduled_at = :scheduled_at, started_at = :started_at,
           failed_at = :failed_at, preempted_by = :preempted_by, task = :task, task_since = :task_since,
           migrations = :migrations, target_host = :target_host, migration_target = :migration_target,
           updated_at = now(),
           published_at = CASE WHEN CAST(:unsent AS boolean) THEN NULL ELSE published_at END
     WHERE id = :id AND status = :expected
    RETURNING id
    """
)
_RELEASE = text(
    f"""
    UPDATE hosts SET {", ".join(f"alloc_{f} = alloc_{f} - :{f}" for f in _FIELDS)}, vm_count = vm_count - :vms,
           alloc_extra = CASE WHEN CAST(:extra AS jsonb) = CAST('{{}}' AS jsonb) THEN alloc_extra
                              ELSE {sql_extra_plus("alloc_extra", "CAST(:extra AS jsonb)", "-")} END
     WHERE id = :host_id
    """
)


async def apply(connection: AsyncConnection, changes: Sequence[Change]) -> list[Change]:
    """Write each change; returns those that landed (a row no longer in the expected status is
    left alone). Hosts are given back what the landed changes release, in host id order."""
    landed: list[Change] = []
    released: dict[str, list[int]] = defaultdict(lambda: [0] * (len(_FIELDS) + 1))
    released_extra: dict[str, dict[str, int]] = defaultdict(dict)
    for change in changes:
        after = change.after
        row = (
            await connection.execute(
                _APPLY,
                {
                    "id": after.id,
                    "expected": change.before.status.value,
                    "status": after.status.value,
                    "status_reason": after.status_reason,
                    "hypervisor_id": after.hypervisor_id,
                    "attempt": after.attempt,
                    "failures": after.failures,
                    "exclusions": json.dumps(dict(after.exclusions)),
                    "attempts": json.dumps(after.attempts, default=str),
                    "restart_count": after.restart_count,
                    "scheduled_at": after.scheduled_at,
                    "started_at": after.started_at,
                    "failed_at": after.failed_at,
                    "preempted_by": after.preempted_by,
                    "task": None if after.task is None else after.task.value,
                    "task_since": after.task_since,
                    "migrations": after.migrations,
                    "target_host": after.target_host,
                    "migration_target": after.migration_target,
                    "unsent": after.status in IMPLIES_MESSAGE and after.status is not change.before.status,
                },
            )
        ).first()
        if row is None:
            continue
        landed.append(change)
        host = change.released_from
        if host is not None:
            total = released[host]
            for position, field in enumerate(_FIELDS):
                total[position] += getattr(change.before.resources, field)
            total[-1] += 1
            if change.before.resources.extra:
                released_extra[host] = add_counts(released_extra[host], change.before.resources.extra)
    for host in sorted(released):
        amounts = released[host]
        await connection.execute(
            _RELEASE,
            {
                "host_id": host,
                **dict(zip(_FIELDS, amounts, strict=False)),
                "vms": amounts[-1],
                "extra": extra_json(released_extra.get(host, {})),
            },
        )
    return landed
