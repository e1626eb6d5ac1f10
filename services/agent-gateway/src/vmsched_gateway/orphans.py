"""VMs an agent runs that vmsched does not hold on that host: reported, and deleted only as the
operator's VMSCHED_ORPHAN_VMS says.

"moved": vmsched holds the VM on another host now (or is placing it again): the host was cut off,
its VM was failed and placed elsewhere, and the host came back still running it. "gone": vmsched
holds it nowhere (deleted, failed, unschedulable). A heartbeat lists its VMs every few seconds, so
each (host, VM) is acted on at most once per ``repeat_after``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from vmsched_amqp import events
from vmsched_amqp.publishing import Publisher
from vmsched_contract.messages import CommandAction, OrphanKind, VmOrphaned
from vmsched_contract.status import VmStatus
from vmsched_domain.lifecycle import HOLDS_CAPACITY
from vmsched_domain.records import VmRecord
from vmsched_gateway.metrics import ORPHAN_VMS
from vmsched_runtime.logs import get_logger
from vmsched_runtime.settings import OrphanPolicy

log = get_logger(__name__)


def classify(vm: VmRecord) -> OrphanKind:
    if vm.status in HOLDS_CAPACITY or vm.status is VmStatus.PENDING:
        return OrphanKind.MOVED
    return OrphanKind.GONE


def deletes(policy: OrphanPolicy, kind: OrphanKind) -> bool:
    return policy is OrphanPolicy.DELETE or (policy is OrphanPolicy.DELETE_MOVED and kind is OrphanKind.MOVED)


class Orphans:
    def __init__(
        self,
        publisher: Publisher,
        policy: OrphanPolicy,
        *,
        repeat_after: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.publisher = publisher
        self.policy = policy
        self.repeat_after = repeat_after
        self.clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._pruned_at = clock()

    async def found(self, host_id: str, vm: VmRecord, *, fenced: bool = False) -> None:
        """Report (and, as the policy says, delete) a VM ``host_id``'s agent runs that vmsched does not
        hold there. A fenced host keeps none: every such VM is deleted there, whatever the policy (it
        was declared down, and its VMs were failed and perhaps restarted elsewhere)."""
        now = self.clock()
        key = (host_id, str(vm.id))
        if now - self._last.get(key, float("-inf")) < self.repeat_after:
            return
        if now - self._pruned_at >= self.repeat_after:
            # Once per repeat_after, not at every call: thousands of orphans at once (a backlog's)
            # made each call copy the whole dict.
            self._last = {k: at for k, at in self._last.items() if now - at < self.repeat_after}
            self._pruned_at = now
        self._last[key] = now
        kind = classify(vm)
        delete = fenced or deletes(self.policy, kind)
        ORPHAN_VMS.labels(kind.value, "deleted" if delete else "reported").inc()
        held_on = vm.hypervisor_id if vm.status in HOLDS_CAPACITY else None
        log.warning(
            "agent runs a VM vmsched does not hold there",
            host=host_id,
            vm_id=str(vm.id),
            kind=kind.value,
            status=vm.status.value,
            held_on=held_on,
            action="delete" if delete else "report",
        )
        if delete:
            await self.publisher.command(host_id, vm.command(CommandAction.DELETE))
        await self.publisher.publish(
            events.VM_ORPHANED,
            VmOrphaned(
                vm_id=vm.id,
                host_id=host_id,
                kind=kind,
                status=vm.status.value,
                held_on=held_on,
                deleted=delete,
                project=vm.project,
            ),
        )
