"""``dedicated``: a host dedicated to a project (``PATCH /v1/hosts/{id}`` ``dedicated_to``) takes only
that project's VMs, whatever their tolerations (CloudStack's dedicated hosts, Nova's
AggregateMultiTenancyIsolation); a VM asking ``dedicated`` goes only to its project's dedicated hosts.

Columnar: each host's ``dedicated_to`` is interned (a fleet has a few dedicated projects at most), so
a fleet without dedicated hosts and a VM that does not ask for one cost nothing.
"""

from __future__ import annotations

from vmsched_placement.fleet import BoolArray, Fleet, FleetColumns
from vmsched_placement.model import RequestVector


def takes(dedicated_to: str | None, project: str, dedicated: bool) -> bool:
    """Whether a host dedicated to ``dedicated_to`` (None: to none) takes a VM of ``project`` that asks
    (``dedicated``) or not for a dedicated host."""
    if dedicated_to is None:
        return not dedicated
    return dedicated_to == project


class DedicatedFilter:
    NAME = "dedicated"

    def mask(self, columns: FleetColumns, request: RequestVector) -> BoolArray | None:
        project, dedicated = request.project, request.dedicated
        return columns.keys.dedication.mask(
            lambda dedicated_to: takes(dedicated_to, project, dedicated), (project, dedicated)
        )

    def reason(self, fleet: Fleet, index: int, request: RequestVector) -> str:
        dedicated_to = fleet.host_at(index).dedicated_to
        if dedicated_to is None:
            return (
                f"dedicated: the VM asks for a host dedicated to project {request.project}; this one is not dedicated"
            )
        return f"dedicated: host dedicated to project {dedicated_to}, the VM is of project {request.project}"
