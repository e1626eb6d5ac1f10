"""How many VMs each project runs per pod (the hosts' ``pod`` label): what the ``user_concentrated``
strategy ranks pods by. Read from PostgreSQL, the truth: a VM counts in the pod of its host while it
holds the host (:data:`~vmsched_domain.lifecycle.HOLDS_CAPACITY`)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from vmsched_contract.hierarchy import POD_LABEL
from vmsched_domain.lifecycle import HOLDS_CAPACITY, sql_in

# The project's VMs come from ix_vms_project_created; their hosts by primary key.
_PROJECT_PODS = text(
    f"""
    SELECT v.project, h.labels ->> '{POD_LABEL}' AS pod, count(*) AS vms
      FROM vms v JOIN hosts h ON h.id = v.hypervisor_id
     WHERE v.project = ANY(CAST(:projects AS text[])) AND v.status IN {sql_in(HOLDS_CAPACITY)}
       AND h.labels ? '{POD_LABEL}'
     GROUP BY v.project, pod
    """
)


async def project_pods(connection: AsyncConnection, projects: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per project of ``projects``: its VMs per pod (pods where it runs none are left out)."""
    found: dict[str, dict[str, int]] = {project: {} for project in projects}
    if not projects:
        return found
    for row in await connection.execute(_PROJECT_PODS, {"projects": list(projects)}):
        found[row.project][row.pod] = int(row.vms)
    return found
