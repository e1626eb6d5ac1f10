"""The libvirt hypervisor the :class:`~vmsched_agent.Agent` drives: the SDK's protocols
(:class:`~vmsched_agent.Hypervisor`, :class:`~vmsched_agent.MeasuresUsage`,
:class:`~vmsched_agent.MigratesVms`, :class:`~vmsched_agent.ControlsPower`), each method one blocking
step of :mod:`~vmsched_agent.libvirt.lifecycle` or :mod:`~vmsched_agent.libvirt.live_migration` run on
the connection's worker threads.

An error (libvirt's, or a step's own: no room, not running in time) propagates, and the agent
reports the command ``failed`` with its text: libvirt's message, never a crash.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from vmsched_agent.libvirt.connection import LibvirtConnection
from vmsched_agent.libvirt.lifecycle import Lifecycle
from vmsched_agent.libvirt.live_migration import LiveMigration
from vmsched_agent.libvirt.ports import HostError, LibvirtHost
from vmsched_agent.libvirt.usage import UsageMeter
from vmsched_contract.messages import AgentCommand, Usage
from vmsched_runtime.logs import get_logger

log = get_logger(__name__)

Step = Callable[[LibvirtHost, AgentCommand], None]


class LibvirtHypervisor:
    def __init__(
        self,
        connection: LibvirtConnection,
        lifecycle: Lifecycle,
        migration: LiveMigration,
        meter: UsageMeter,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connection = connection
        self.lifecycle = lifecycle
        self.migration = migration
        self.meter = meter
        self.clock = clock
        self._usage: Usage | None = None

    # -- Hypervisor ------------------------------------------------------------------------------
    async def create_vm(self, command: AgentCommand) -> None:
        await self._run(self.lifecycle.create, command)

    async def delete_vm(self, command: AgentCommand) -> None:
        await self.connection.call(partial(self.lifecycle.delete, vm_id=command.vm_id))

    # -- ControlsPower ---------------------------------------------------------------------------
    async def stop_vm(self, command: AgentCommand) -> None:
        await self.connection.call(partial(self.lifecycle.stop, vm_id=command.vm_id))

    async def start_vm(self, command: AgentCommand) -> None:
        await self.connection.call(partial(self.lifecycle.start, vm_id=command.vm_id))

    # -- MigratesVms -----------------------------------------------------------------------------
    async def prepare_migration(self, command: AgentCommand) -> None:
        await self._run(self.migration.prepare, command)

    async def migrate_vm(self, command: AgentCommand) -> None:
        await self._run(self.migration.migrate, command)

    async def finish_migration(self, command: AgentCommand) -> None:
        await self._run(self.migration.finish, command)

    async def cleanup_migration(self, command: AgentCommand) -> None:
        await self._run(self.migration.cleanup, command)

    async def abort_migration(self, command: AgentCommand) -> None:
        await self._run(self.migration.abort, command)

    async def rollback_migration(self, command: AgentCommand) -> None:
        await self._run(self.migration.rollback, command)

    # -- MeasuresUsage ---------------------------------------------------------------------------
    def usage(self) -> Usage | None:
        """The last measurement (:meth:`sample` takes them); None before the second sample, and
        while libvirt is unreachable."""
        return self._usage

    async def sample(self) -> Usage | None:
        """Read the running domains' statistics and measure the usage since the last sample."""
        try:
            samples = await self.connection.call(lambda host: host.samples())
        except HostError as error:
            log.debug("usage not sampled", error=str(error))
            self.meter.forget()
            self._usage = None
            return None
        self._usage = self.meter.measure(self.clock(), samples)
        return self._usage

    async def _run(self, step: Step, command: AgentCommand) -> None:
        await self.connection.call(lambda host: step(host, command))
