"""What a hypervisor agent implements: the two things only it knows how to do (create, delete), and
optionally what else it can (measure its load, migrate VMs, stop and start them)."""

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


@runtime_checkable
class MigratesVms(Protocol):
    """A hypervisor that can move a running VM to another host, live (Nova's live migration; libvirt's
    prepare, perform, finish and confirm). Optional: an agent whose hypervisor implements it declares
    the ``migrate`` capability, and only such hosts are ever a migration's source or target.

    Each command carries ``command.migration`` (its ``number``, ``source`` and ``target`` hosts). The
    steps, in order; raising from any of them reports it ``failed`` and the migration is rolled back:

    - ``prepare_migration`` (on the target): get ready to receive the VM from ``source`` (its
      resources are claimed on this host already). Raising must leave nothing behind.
    - ``migrate_vm`` (on the source): hand the VM over to ``target`` (copy it there and pause it
      here). Raising must leave it running here.
    - ``finish_migration`` (on the target): the VM runs here from now on. Raising must leave nothing
      behind here (the source is then told to resume it).
    - ``cleanup_migration`` (on the source, after success): remove what is left of the VM here.
    - ``abort_migration`` (on the target, after a failure): drop what ``prepare_migration`` made, or
      the VM ``finish_migration`` took.
    - ``rollback_migration`` (on the source, after a failure once it was told to hand over): run the
      VM here again (resume it, if ``migrate_vm`` handed it over). Raising fails the VM.

    The :class:`~vmsched_agent.Agent` calls each at most once at a time per VM and only when it can
    change something (a repeated command is answered from what the agent knows).
    """

    async def prepare_migration(self, command: AgentCommand) -> None: ...

    async def migrate_vm(self, command: AgentCommand) -> None: ...

    async def finish_migration(self, command: AgentCommand) -> None: ...

    async def cleanup_migration(self, command: AgentCommand) -> None: ...

    async def abort_migration(self, command: AgentCommand) -> None: ...

    async def rollback_migration(self, command: AgentCommand) -> None: ...


@runtime_checkable
class ControlsPower(Protocol):
    """A hypervisor that can power VMs off and on (``POST /v1/vms/{id}/stop`` and ``/start``).
    Optional: an agent whose hypervisor implements it declares the ``power`` capability. A stopped VM
    stays on its host (still in ``vm_ids``), which keeps its room. Raising reports ``failed``: the VM
    stays as it was."""

    async def stop_vm(self, command: AgentCommand) -> None: ...

    async def start_vm(self, command: AgentCommand) -> None: ...
