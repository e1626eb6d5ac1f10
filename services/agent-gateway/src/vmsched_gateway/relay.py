"""``vm.assigned`` -> a create command on each placed VM's host queue."""

from __future__ import annotations

import asyncio

from vmsched_amqp.publishing import Publisher
from vmsched_contract.messages import CommandAction, VmAssigned
from vmsched_domain.agent_commands import agent_command
from vmsched_gateway.agent_queues import AgentQueues
from vmsched_gateway.command_ratios import CommandRatios
from vmsched_gateway.preemptors import Preemptors
from vmsched_runtime.logs import get_logger

log = get_logger("vmsched_gateway")


class AssignmentRelay:
    def __init__(
        self,
        publisher: Publisher,
        queues: AgentQueues,
        ratios: CommandRatios,
        preemptors: Preemptors | None = None,
    ) -> None:
        self.publisher = publisher
        self.queues = queues
        self.ratios = ratios
        self.preemptors = preemptors

    async def on_assigned(self, event: VmAssigned) -> None:
        assignments = event.assignments
        if self.preemptors is not None:
            # Only a VM that preempted (or may have: an announcement that does not say) can have
            # victims to wait for; the others cost no read.
            held = await self.preemptors.awaiting_victims([a.vm_id for a in assignments if a.preempted is not False])
            if held:
                # Sent when their agents report the victims deleted (see preemptors).
                log.info("creates held until the VMs they preempted are deleted", vms=len(held))
                assignments = [a for a in assignments if a.vm_id not in held]
        if not assignments:
            return
        hosts = sorted({a.hypervisor_id for a in assignments})
        for host_id in hosts:
            await self.queues.ensure(host_id)
        ratios = await self.ratios.of(hosts)
        await asyncio.gather(
            *(
                self.publisher.command(
                    a.hypervisor_id,
                    agent_command(
                        CommandAction.CREATE,
                        a.vm_id,
                        a.name,
                        a.resources,
                        attempt=a.attempt,
                        overcommit=ratios.get(a.hypervisor_id),
                    ),
                )
                for a in assignments
            )
        )
        log.info("create commands sent", vms=len(assignments))
