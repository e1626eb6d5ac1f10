"""What one host runs, and how each command changes it: carried out at most once per VM (a command
delivered again finds its work done and reports it so), the hypervisor called only when there is
something to do, and its errors reported as ``failed``, never raised (docs/agent-sdk.md)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from uuid import UUID

from vmsched_agent.hypervisor import Hypervisor
from vmsched_contract.messages import AgentCommand, Capability, CommandAction, ReportedStatus, VmStatusReport
from vmsched_runtime.logs import get_logger

log = get_logger(__name__)


class HostVms:
    """The VMs of one host as its agent knows them: those it runs (``running``, ``stopped`` among
    them) and the migrations in flight: VMs it prepared to receive (``incoming``, on the target) and
    VMs it handed over and still has leftovers of until told to clean up or roll back (``outgoing``,
    on the source). Commands for one VM are carried out one at a time."""

    def __init__(
        self,
        agent_id: str,
        hypervisor: Hypervisor,
        capabilities: Iterable[str],
        running: Iterable[UUID] = (),
        stopped: Iterable[UUID] = (),
    ) -> None:
        self._agent_id = agent_id
        self._hypervisor = hypervisor
        self._capabilities = frozenset(capabilities)
        self.running: set[UUID] = set(running)
        self.stopped: set[UUID] = set(stopped) & self.running
        self.incoming: set[UUID] = set()
        self.outgoing: set[UUID] = set()
        self._locks = _KeyedLocks()

    async def carry_out(self, command: AgentCommand) -> VmStatusReport:
        """Do what ``command`` asks, at most once per VM, and say how it ended."""
        async with self._locks.hold(command.vm_id):
            return await self._carry_out(command)

    async def _carry_out(self, command: AgentCommand) -> VmStatusReport:
        action = command.action
        if action is CommandAction.CREATE:
            return await self._create(command)
        if action is CommandAction.DELETE:
            return await self._delete(command)
        needed = Capability.POWER if action in (CommandAction.STOP, CommandAction.START) else Capability.MIGRATE
        if needed.value not in self._capabilities:
            return self._report(
                command, ReportedStatus.FAILED, f"this agent cannot {action.value} (no {needed} capability)"
            )
        handler = {
            CommandAction.STOP: self._stop,
            CommandAction.START: self._start,
            CommandAction.PREPARE_MIGRATION: self._prepare,
            CommandAction.MIGRATE: self._migrate,
            CommandAction.FINISH_MIGRATION: self._finish,
            CommandAction.CLEANUP_MIGRATION: self._cleanup,
            CommandAction.ABORT_MIGRATION: self._abort,
            CommandAction.ROLLBACK_MIGRATION: self._rollback,
        }[action]
        return await handler(command)

    async def _create(self, command: AgentCommand) -> VmStatusReport:
        if command.vm_id in self.running:
            return self._report(command, ReportedStatus.RUNNING, "already running on this host")
        try:
            await self._hypervisor.create_vm(command)
        except Exception as error:
            log.warning("create failed", error=error_text(error))
            return self._report(command, ReportedStatus.FAILED, error_text(error))
        self.running.add(command.vm_id)
        return self._report(command, ReportedStatus.RUNNING)

    async def _delete(self, command: AgentCommand) -> VmStatusReport:
        if command.vm_id not in self.running:
            return self._report(command, ReportedStatus.DELETED, "not on this host")
        try:
            await self._hypervisor.delete_vm(command)
        except Exception as error:
            # The VM is still here (and still in the heartbeats); a re-sent delete tries again.
            log.warning("delete failed", error=error_text(error))
            return self._report(command, ReportedStatus.FAILED, f"delete failed: {error_text(error)}")
        self.running.discard(command.vm_id)
        self.stopped.discard(command.vm_id)
        return self._report(command, ReportedStatus.DELETED)

    # -- power ---------------------------------------------------------------------------------
    async def _stop(self, command: AgentCommand) -> VmStatusReport:
        vm_id = command.vm_id
        if vm_id not in self.running:
            return self._report(command, ReportedStatus.FAILED, "not on this host")
        if vm_id in self.stopped:
            return self._report(command, ReportedStatus.STOPPED, "already stopped")
        if (failed := await self._call(command, "stop_vm")) is not None:
            return failed
        self.stopped.add(vm_id)
        return self._report(command, ReportedStatus.STOPPED)

    async def _start(self, command: AgentCommand) -> VmStatusReport:
        vm_id = command.vm_id
        if vm_id not in self.running:
            return self._report(command, ReportedStatus.FAILED, "not on this host")
        if vm_id not in self.stopped:
            return self._report(command, ReportedStatus.RUNNING, "already running")
        if (failed := await self._call(command, "start_vm")) is not None:
            return failed
        self.stopped.discard(vm_id)
        return self._report(command, ReportedStatus.RUNNING)

    # -- migration -----------------------------------------------------------------------------
    async def _prepare(self, command: AgentCommand) -> VmStatusReport:  # on the target
        vm_id = command.vm_id
        if vm_id in self.incoming or vm_id in self.running:
            return self._report(command, ReportedStatus.PREPARED, "already prepared")
        if (failed := await self._call(command, "prepare_migration")) is not None:
            return failed
        self.incoming.add(vm_id)
        return self._report(command, ReportedStatus.PREPARED)

    async def _migrate(self, command: AgentCommand) -> VmStatusReport:  # on the source
        vm_id = command.vm_id
        if vm_id in self.outgoing:
            return self._report(command, ReportedStatus.HANDED_OVER, "already handed over")
        if vm_id not in self.running:
            return self._report(command, ReportedStatus.FAILED, "not on this host")
        if (failed := await self._call(command, "migrate_vm")) is not None:
            return failed
        # Handed over: no longer one this host runs (nor lists in its heartbeats), until rolled back.
        self.running.discard(vm_id)
        self.outgoing.add(vm_id)
        return self._report(command, ReportedStatus.HANDED_OVER)

    async def _finish(self, command: AgentCommand) -> VmStatusReport:  # on the target
        vm_id = command.vm_id
        if vm_id in self.running:
            return self._report(command, ReportedStatus.RUNNING, "already running on this host")
        if vm_id not in self.incoming:
            return self._report(command, ReportedStatus.FAILED, "not prepared on this host")
        if (failed := await self._call(command, "finish_migration")) is not None:
            self.incoming.discard(vm_id)  # finish_migration leaves nothing behind when it raises
            return failed
        self.incoming.discard(vm_id)
        self.running.add(vm_id)
        return self._report(command, ReportedStatus.RUNNING)

    async def _cleanup(self, command: AgentCommand) -> VmStatusReport:  # on the source
        if command.vm_id not in self.outgoing:
            return self._report(command, ReportedStatus.CLEANED_UP, "nothing left on this host")
        if (failed := await self._call(command, "cleanup_migration")) is not None:
            return failed
        self.outgoing.discard(command.vm_id)
        return self._report(command, ReportedStatus.CLEANED_UP)

    async def _abort(self, command: AgentCommand) -> VmStatusReport:  # on the target
        vm_id = command.vm_id
        if vm_id not in self.incoming and vm_id not in self.running:
            return self._report(command, ReportedStatus.ABORTED, "nothing here")
        if (failed := await self._call(command, "abort_migration")) is not None:
            return failed
        self.incoming.discard(vm_id)
        self.running.discard(vm_id)
        self.stopped.discard(vm_id)
        return self._report(command, ReportedStatus.ABORTED)

    async def _rollback(self, command: AgentCommand) -> VmStatusReport:  # on the source
        vm_id = command.vm_id
        if vm_id in self.running:
            return self._report(command, ReportedStatus.RUNNING, "never handed over")
        if vm_id not in self.outgoing:
            return self._report(command, ReportedStatus.FAILED, "not on this host")
        if (failed := await self._call(command, "rollback_migration")) is not None:
            return failed
        self.outgoing.discard(vm_id)
        self.running.add(vm_id)
        return self._report(command, ReportedStatus.RUNNING)

    async def _call(self, command: AgentCommand, method: str) -> VmStatusReport | None:
        """Call the hypervisor's ``method`` (of :class:`MigratesVms` or :class:`ControlsPower`); a
        ``failed`` report with the error's text if it raised (or is missing: a capability declared
        without it), else None."""
        try:
            step: Callable[[AgentCommand], Awaitable[None]] = getattr(self._hypervisor, method)
            await step(command)
        except Exception as error:
            log.warning(f"{command.action.value} failed", error=error_text(error))
            return self._report(command, ReportedStatus.FAILED, error_text(error))
        return None

    def _report(self, command: AgentCommand, status: ReportedStatus, message: str = "") -> VmStatusReport:
        return VmStatusReport(
            vm_id=command.vm_id,
            agent_id=self._agent_id,
            status=status,
            message=message,
            attempt=command.attempt,
            action=command.action,
            migration=None if command.migration is None else command.migration.number,
        )


class _KeyedLocks:
    """One lock per key, kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[UUID, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: UUID) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


def error_text(error: BaseException) -> str:
    return str(error) or type(error).__name__
