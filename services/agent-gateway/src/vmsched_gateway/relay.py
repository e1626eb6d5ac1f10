"""``vm.assigned`` -> a create command on each placed VM's host queue."""

from __future__ import annotations

import asyncio

from vmsched_common.logs import get_logger
from vmsched_common.messages import AgentCommand, CommandAction, VmAssigned
from vmsched_common.publishing import Publisher
from vmsched_gateway.agent_queues import AgentQueues

log = get_logger("vmsched_gateway")


class AssignmentRelay:
    def __init__(self, publisher: Publisher, queues: AgentQueues) -> None:
        self.publisher = publisher
        self.queues = queues

    async def on_assigned(self, event: VmAssigned) -> None:
        for host_id in sorted({a.hypervisor_id for a in event.assignments}):
            await self.queues.ensure(host_id)
        await asyncio.gather(
            *(
                self.publisher.command(
                    a.hypervisor_id,
                    AgentCommand(
                        action=CommandAction.CREATE,
                        vm_id=a.vm_id,
                        name=a.name,
                        resources=a.resources,
                        attempt=a.attempt,
                    ),
                )
                for a in event.assignments
            )
        )
        log.info("create commands sent", vms=len(event.assignments))
