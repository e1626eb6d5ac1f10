"""What a hypervisor agent implements: the two things only it knows how to do."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from vmsched_contract.messages import AgentCommand, Usage


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


@runtime_checkable
class MeasuresUsage(Protocol):
    """A hypervisor that can also say how busy its host is. Optional: the agent asks for it each time
    it builds a heartbeat (``usage`` of ``agent.heartbeat``), unless a measurement was handed to
    :meth:`~vmsched_agent.Agent.report_usage`. Keep it cheap (it runs on the heartbeat task): return
    the last measurement your own sampling took. None: nothing measured (the host is then ranked by
    allocation by the ``least_utilized`` strategy).
    """

    def usage(self) -> Usage | None: ...
