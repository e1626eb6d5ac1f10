"""The placement engine's view of the Redis snapshot: a snapshot host as the engine's ``HostState``.
One mapping, used by the scheduler that decides and by the API that simulates (docs/whatif.md): both
must see the same fleet. (A VM's side, a message's VM as a ``PlacementRequest``, needs only the
contract: :mod:`vmsched_placement.inputs`.)"""

from __future__ import annotations

from vmsched_contract.messages import Capability
from vmsched_placement.inputs import demand_of
from vmsched_placement.model import HostState
from vmsched_placement.taint_rules import Taint
from vmsched_redis.host_hash import SnapshotHost


def to_host_state(record: SnapshotHost) -> HostState:
    return HostState(
        id=record.id,
        # A hash without allocations (a flush, then a heartbeat before reconciliation) cannot be
        # claimed on: not "online" to the engine either, so it is not chosen in vain.
        status=record.status if record.synced else "unsynced",
        labels=dict(record.labels),
        capacity=demand_of(record.capacity),
        allocated=demand_of(record.allocated),
        reserved=demand_of(record.reserved),
        vm_count=record.vm_count,
        scheduling_paused=record.scheduling_paused,
        last_heartbeat=record.last_heartbeat,
        cpu_ratio=record.overcommit.cpu,
        memory_ratio=record.overcommit.memory,
        disk_ratio=record.overcommit.disk,
        usage=record.usage,
        taints=tuple(Taint(t.key, t.value, t.effect.value) for t in record.taints),
        can_migrate=Capability.MIGRATE.value in record.capabilities,
        networks=frozenset(record.networks),
        dedicated_to=record.dedicated_to,
        storage_pools=record.storage_pools,
    )
