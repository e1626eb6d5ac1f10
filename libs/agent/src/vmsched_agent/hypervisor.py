"""What a hypervisor agent implements: the two things only it knows how to do."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from vmsched_common.messages import AgentCommand


@runtime_checkable
class Hypervisor(Protocol):
    """Creates and deletes VMs on one host.

    The :class:`~vmsched_agent.Agent` calls these at most once at a time per VM and only when the
    call can change something: a create for a VM the agent already runs, or a delete for a VM it does
    not know, is answered without calling the hypervisor.

    Raising reports the command as ``failed`` with ``str(error)`` as the message. A ``create_vm`` that
    raises must leave nothing behind: the scheduler retries the VM on another host.
    """

    async def create_vm(self, command: AgentCommand) -> None: ...

    async def delete_vm(self, command: AgentCommand) -> None: ...
