"""The seed's two placement log messages, as strings; the service logs them.

Scheduling VM 'web-server-1' using least_loaded strategy
Selected agent 'hypervisor-01' for VM 'web-server-1' - CPU: 12/16, Memory: 24GB/32GB, Disk: 100GB/500GB
"""

from __future__ import annotations

from vmsched_contract.strategy import Strategy
from vmsched_placement.model import Demand, HostState


def scheduling_line(vm_name: str, strategy: Strategy | str) -> str:
    return f"Scheduling VM '{vm_name}' using {Strategy(strategy).value} strategy"


def whole_gb(memory_mb: int) -> str:
    """MiB as GB the seed's way: ``24GB``; fractions kept to two places (``1.5GB``)."""
    return f"{memory_mb / 1024:.2f}".rstrip("0").rstrip(".") + "GB"


def selected_line(vm_name: str, host: HostState, demand: Demand | None) -> str:
    """The "Selected agent" line; used amounts include ``demand`` (the VM being placed).

    Pass ``demand=None`` when ``host`` already has the VM booked (after ``Fleet.allocate``).
    """
    used = host.allocated if demand is None else host.allocated.plus(demand)
    total = host.effective_capacity
    return (
        f"Selected agent '{host.id}' for VM '{vm_name}' - CPU: {used.cpu}/{total.cpu}, "
        f"Memory: {whole_gb(used.memory_mb)}/{whole_gb(total.memory_mb)}, "
        f"Disk: {used.disk_gb}GB/{total.disk_gb}GB"
    )


def decision_log_lines(
    vm_name: str, host: HostState, demand: Demand | None, strategy: Strategy | str | None = None
) -> tuple[str, ...]:
    """The seed's log lines for a placement: the "Scheduling VM" line when ``strategy`` is given,
    then (always last) the "Selected agent" line. See ``selected_line`` for ``demand``.
    """
    selected = selected_line(vm_name, host, demand)
    if strategy is None:
        return (selected,)
    return (scheduling_line(vm_name, strategy), selected)
