"""A fleet of fake hypervisors in one process, on one broker connection, for tests and benchmarks.

Each fake host is a real :class:`~vmsched_agent.Agent` (same queue, same idempotency, same reports)
around a :class:`FakeHypervisor` that keeps its VMs in memory.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self
from uuid import UUID

from faststream.rabbit import RabbitBroker

from vmsched_agent.agent import Agent
from vmsched_agent.connection import AgentConnection, AgentQueueMissing
from vmsched_agent.hosts import HostSpec
from vmsched_amqp.broker import make_broker
from vmsched_contract.messages import (
    ZERO,
    AgentCommand,
    CommandAction,
    Overcommit,
    Resources,
    Usage,
    VmStatusReport,
)
from vmsched_domain.fit import shortfalls
from vmsched_runtime.logs import get_logger
from vmsched_runtime.settings import Settings, default_settings

log = get_logger(__name__)


class HostFull(Exception):
    """The VM does not fit in what the host has left."""


class SimulatedFailure(Exception):
    """A create that failed on purpose (``fail_rate``), or a migration's step (``fail_steps``), to
    exercise retries and rollbacks."""


# The hypervisor's methods a simulated host can be told to fail (``FakeHypervisor.fail_steps``).
FAILABLE_STEPS = (
    "prepare_migration",
    "migrate_vm",
    "finish_migration",
    "cleanup_migration",
    "abort_migration",
    "rollback_migration",
    "stop_vm",
    "start_vm",
)


def shortfall(requested: Resources, used: Resources, capacity: Resources, overcommit: Overcommit) -> list[str]:
    """Every resource ``requested`` does not fit in, with the numbers (empty: it fits): the fit rule
    (``vmsched_domain.fit``) a hypervisor with nothing reserved applies."""
    return [missing.reason for missing in shortfalls(requested, capacity, ZERO, overcommit, used)]


def ratios_for(command: AgentCommand, own: Overcommit) -> Overcommit:
    """The allocation ratios a command is checked by: those vmsched placed it by (an operator's
    overcommit counts, as it does for the scheduler), else the host's own."""
    return command.overcommit if command.overcommit is not None else own


# What a simulated hypervisor uses itself, busy or idle: cores and MiB (never more than the host has).
HYPERVISOR_CPU = 0.5
HYPERVISOR_MEMORY_MB = 1024
# The share of what they were given that a simulated host's VMs use, drawn once per host.
BUSY_RANGE = (0.2, 0.9)


class CreateGate:
    """Lets the first ``allowed`` creates through and holds every later one until :meth:`open`: a
    test stops a run midway, so that whatever it does next provably happens with VMs on their way."""

    def __init__(self, allowed: int) -> None:
        self.allowed = allowed
        self._opened = asyncio.Event()

    async def passage(self) -> None:
        if self.allowed > 0:
            self.allowed -= 1
            return
        await self._opened.wait()

    def give_back(self) -> None:
        """A create that passed and then failed: its passage counts for the next one."""
        self.allowed += 1

    def open(self) -> None:
        self._opened.set()


class FakeHypervisor:
    """Creates VMs in memory, instantly or after ``create_delay`` seconds. Refuses a VM that does not
    fit in what is left (with ``check_capacity``), and any create with probability ``fail_rate``.

    Measures usage (``measure_usage``): the hypervisor's own share plus ``busy`` x what its VMs were
    given (``busy`` drawn per host from :data:`BUSY_RANGE` unless given), so hosts with the same
    allocation differ in load as real ones do.

    Migrates VMs (:class:`~vmsched_agent.MigratesVms`): the target holds the VM's resources from
    ``prepare_migration`` (refused, as a create is, when they do not fit), the source until
    ``cleanup_migration``; each step takes ``migration_delay`` seconds. Stops and starts VMs
    (:class:`~vmsched_agent.ControlsPower`), which keep their resources. Every step named in
    ``fail_steps`` (:data:`FAILABLE_STEPS`) raises :class:`SimulatedFailure`, while it is named there.
    """

    def __init__(
        self,
        host: HostSpec,
        *,
        create_delay: float = 0.0,
        fail_rate: float = 0.0,
        check_capacity: bool = True,
        rng: random.Random | None = None,
        measure_usage: bool = True,
        busy: float | None = None,
        migration_delay: float = 0.0,
        fail_steps: Iterable[str] = (),
    ) -> None:
        unknown = set(fail_steps) - set(FAILABLE_STEPS)
        if unknown:
            raise ValueError(f"unknown steps {sorted(unknown)}; valid: {', '.join(FAILABLE_STEPS)}")
        if not 0.0 <= fail_rate <= 1.0:
            raise ValueError(f"fail_rate must be between 0 and 1, got {fail_rate}")
        if busy is not None and not 0.0 <= busy <= 1.0:
            raise ValueError(f"busy must be between 0 and 1, got {busy}")
        self.host = host
        self.create_delay = create_delay
        self.fail_rate = fail_rate
        self.check_capacity = check_capacity
        self.vms: dict[UUID, Resources] = {}  # read it; change it through _hold and _drop
        self._used = ZERO
        self._rng = rng or random.Random(host.id)
        self.measure_usage = measure_usage
        self.migration_delay = migration_delay
        self.fail_steps: set[str] = set(fail_steps)
        self.stopped: set[UUID] = set()
        # Its own generator: drawing it must not change the seeded failures of ``rng``.
        self.busy = busy if busy is not None else random.Random(f"busy:{host.id}").uniform(*BUSY_RANGE)
        self.gate: CreateGate | None = None  # set by SimulatedFleet.hold_creates

    @property
    def used(self) -> Resources:
        """What its VMs hold: kept as VMs come and go, so a create costs the same on a full host."""
        return self._used

    def usage(self) -> Usage | None:
        """What the host uses now (:class:`vmsched_agent.hypervisor.MeasuresUsage`); None when it
        does not ``measure_usage``."""
        if not self.measure_usage:
            return None
        capacity = self.host.capacity
        return Usage(
            cpu_used=round(min(float(capacity.cpu), HYPERVISOR_CPU + self.busy * self._used.cpu), 3),
            memory_used_mb=min(capacity.memory_mb, HYPERVISOR_MEMORY_MB + round(self.busy * self._used.memory_mb)),
        )

    def _hold(self, vm_id: UUID, resources: Resources) -> None:
        self.vms[vm_id] = resources
        self._used = self._used.plus(resources)

    def _shortfall(self, command: AgentCommand) -> list[str]:
        return shortfall(command.resources, self.used, self.host.capacity, ratios_for(command, self.host.overcommit))

    def _drop(self, vm_id: UUID) -> None:
        resources = self.vms.pop(vm_id, None)
        if resources is not None:
            self._used = self._used.minus(resources)

    async def create_vm(self, command: AgentCommand) -> None:
        gate = self.gate
        if gate is not None:
            await gate.passage()
        try:
            if self.fail_rate and self._rng.random() < self.fail_rate:
                raise SimulatedFailure(f"simulated failure (fail rate {self.fail_rate:g})")
            if self.check_capacity:
                missing = self._shortfall(command)
                if missing:
                    raise HostFull(f"no room on {self.host.id}: " + "; ".join(missing))
        except Exception:
            if gate is not None:
                gate.give_back()
            raise
        self._hold(command.vm_id, command.resources)  # held from now, so concurrent creates see it
        if self.create_delay > 0:
            try:
                await asyncio.sleep(self.create_delay)  # a simulated boot takes time
            except BaseException:
                self._drop(command.vm_id)
                raise

    async def delete_vm(self, command: AgentCommand) -> None:
        self._drop(command.vm_id)
        self.stopped.discard(command.vm_id)

    # -- migration (MigratesVms) ----------------------------------------------------------------
    async def prepare_migration(self, command: AgentCommand) -> None:
        await self._step("prepare_migration")
        if self.check_capacity:
            missing = self._shortfall(command)
            if missing:
                raise HostFull(f"no room on {self.host.id}: " + "; ".join(missing))
        self._hold(command.vm_id, command.resources)

    async def migrate_vm(self, command: AgentCommand) -> None:
        await self._step("migrate_vm")  # its resources stay held here until cleanup_migration

    async def finish_migration(self, command: AgentCommand) -> None:
        try:
            await self._step("finish_migration")
        except BaseException:
            self._drop(command.vm_id)  # leaves nothing behind
            raise

    async def cleanup_migration(self, command: AgentCommand) -> None:
        await self._step("cleanup_migration")
        self._drop(command.vm_id)

    async def abort_migration(self, command: AgentCommand) -> None:
        await self._step("abort_migration")
        self._drop(command.vm_id)

    async def rollback_migration(self, command: AgentCommand) -> None:
        await self._step("rollback_migration")

    # -- power (ControlsPower) ------------------------------------------------------------------
    async def stop_vm(self, command: AgentCommand) -> None:
        await self._step("stop_vm")
        self.stopped.add(command.vm_id)

    async def start_vm(self, command: AgentCommand) -> None:
        await self._step("start_vm")
        self.stopped.discard(command.vm_id)

    async def _step(self, name: str) -> None:
        if name in self.fail_steps:
            raise SimulatedFailure(f"simulated failure of {name} on {self.host.id}")
        if self.migration_delay > 0 and name not in ("stop_vm", "start_vm"):
            await asyncio.sleep(self.migration_delay)


@dataclass(frozen=True, slots=True)
class Receipt:
    """A command taken off a host's queue, and when (``time.time()``)."""

    vm_id: UUID
    host_id: str
    action: CommandAction
    at: float


class SimulatedFleet:
    """``hosts`` as fake hypervisors, each reporting a measured usage in its heartbeats unless
    ``measure_usage`` is off (:class:`FakeHypervisor`).

    With ``credentials`` (host id -> the ``amqp_url`` ``vmsched-gateway enroll-agent`` printed for
    it) each host connects as its own broker user, as real agents do, on a connection of its own.
    Without, they share one connection as ``amqp_url``'s user (or ``broker``'s): fine for thousands
    of hosts, and for a gateway that takes any user's word (VMSCHED_AGENT_AUTH=off).

    ``record_commands`` keeps every command and report, for tests (:meth:`received`,
    :meth:`wait_for_report`); a long benchmark turns it off and reads :attr:`commands_received`.
    ``record_receipts`` keeps when each command was taken off its queue, for :meth:`take_receipts`.
    """

    def __init__(
        self,
        hosts: Sequence[HostSpec],
        *,
        amqp_url: str | None = None,
        broker: RabbitBroker | None = None,
        credentials: Mapping[str, str] | None = None,
        heartbeat_interval: float | None = None,
        create_delay: float = 0.0,
        fail_rate: float = 0.0,
        check_capacity: bool = True,
        seed: int = 0,
        queue_wait_timeout: float = 120.0,
        max_concurrent_commands: int = 4,
        lanes: int | None = None,
        record_commands: bool = True,
        record_receipts: bool = False,
        measure_usage: bool = True,
        migration_delay: float = 0.0,
        fail_steps: Iterable[str] = (),
    ) -> None:
        if sum(option is not None for option in (amqp_url, broker, credentials)) > 1:
            raise ValueError("give at most one of amqp_url, broker and credentials")
        if len({host.id for host in hosts}) != len(hosts):
            raise ValueError("host ids must be unique")
        missing = [host.id for host in hosts if credentials is not None and host.id not in credentials]
        if missing:
            raise ValueError(f"no credentials for host {missing[0]} ({len(missing)} hosts without)")
        # The connection the hosts share; None when each has its own (credentials).
        self.connection: AgentConnection | None = None
        if credentials is None:
            owns_broker = broker is None
            if broker is None:
                settings = default_settings() if amqp_url is None else Settings(amqp_url=amqp_url)
                broker = make_broker(settings)
            self.connection = AgentConnection(
                broker,
                lanes=lanes or default_lanes(len(hosts)),
                prefetch=max_concurrent_commands,
                owns_broker=owns_broker,
            )
        self.record_commands = record_commands
        self._receipts: list[Receipt] = []
        self.startup_seconds: float | None = None
        self.hypervisors: dict[str, FakeHypervisor] = {}
        self.agents: dict[str, Agent] = {}
        for host in hosts:
            hypervisor = FakeHypervisor(
                host,
                create_delay=create_delay,
                fail_rate=fail_rate,
                check_capacity=check_capacity,
                rng=random.Random(f"{seed}:{host.id}"),
                measure_usage=measure_usage,
                migration_delay=migration_delay,
                fail_steps=fail_steps,
            )
            self.hypervisors[host.id] = hypervisor
            self.agents[host.id] = Agent(
                host.id,
                host.capacity,
                hypervisor,
                connection=self.connection,
                amqp_url=None if credentials is None else credentials[host.id],
                max_concurrent_commands=max_concurrent_commands,
                labels=host.labels,
                taints=host.taints,
                overcommit=host.overcommit,
                capabilities=host.capabilities,
                networks=host.networks,
                storage_pools=host.storage_pools,
                heartbeat_interval=heartbeat_interval,
                queue_wait_timeout=queue_wait_timeout,
                observer=self._observe if record_commands else None,
                on_receive=self._receive if record_receipts else None,
            )
        self._received: dict[str, list[AgentCommand]] = defaultdict(list)
        self._reports: dict[tuple[UUID, CommandAction], list[tuple[str, VmStatusReport]]] = defaultdict(list)
        self._waiters: dict[tuple[UUID, CommandAction], list[asyncio.Future[tuple[str, VmStatusReport]]]] = defaultdict(
            list
        )

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect, heartbeat every host, and return once every host consumes its queue
        (the gateway declares them). Records the time it took in :attr:`startup_seconds`."""
        began = time.perf_counter()
        if self.connection is not None:
            await self.connection.open()
        results = await asyncio.gather(*(agent.start() for agent in self.agents.values()), return_exceptions=True)
        failures = [result for result in results if isinstance(result, BaseException)]
        if failures:
            await self.stop()
            missing = [failure for failure in failures if isinstance(failure, AgentQueueMissing)]
            if len(missing) == len(failures):
                raise AgentQueueMissing(f"{len(missing)} of {len(self.agents)} hosts: {missing[0]}")
            raise failures[0]
        self.startup_seconds = time.perf_counter() - began
        log.info("fleet started", hosts=len(self.agents), seconds=round(self.startup_seconds, 2))

    async def stop(self) -> None:
        """Stop every host (in-flight commands finish), then close the connection."""
        await asyncio.gather(*(agent.stop() for agent in self.agents.values()), return_exceptions=True)
        if self.connection is not None:
            await self.connection.close()

    @property
    def connected(self) -> bool:
        """Whether any of the fleet's broker connections is open."""
        if self.connection is not None:
            return self.connection.is_open
        return any(agent.connection.is_open for agent in self.agents.values())

    async def cut_off(self, host_id: str) -> None:
        """The host loses its network, as in a partition: no heartbeats go out and no commands are
        taken (they wait in its queue), while its VMs keep running."""
        await self.agents[host_id].stop(announce_draining=False)

    async def reconnect(self, host_id: str) -> None:
        """The host's network is back: it heartbeats (listing the VMs it still runs) and takes commands."""
        await self.agents[host_id].start()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- what happened -------------------------------------------------------------------------
    @property
    def commands_received(self) -> Mapping[str, Counter[CommandAction]]:
        """Per host, how many commands of each action it was given (re-deliveries included)."""
        return {host_id: agent.stats.commands_received for host_id, agent in self.agents.items()}

    def total_commands(self) -> Counter[CommandAction]:
        total: Counter[CommandAction] = Counter()
        for counts in self.commands_received.values():
            total.update(counts)
        return total

    def hold_creates(self, allowed: int) -> CreateGate:
        """From now on, every host carries out ``allowed`` more creates (all hosts together) and
        holds the later ones (their VMs stay ``scheduled``) until the gate returned is opened."""
        gate = CreateGate(allowed)
        for hypervisor in self.hypervisors.values():
            hypervisor.gate = gate
        return gate

    def received(self, host_id: str) -> list[AgentCommand]:
        """Every command ``host_id`` carried out, in order (``record_commands``): recorded before its
        report is sent, so whatever the report causes comes after the record."""
        self._require_records()
        return list(self._received.get(host_id, ()))

    def host_of(self, vm_id: UUID) -> str | None:
        """The host that runs ``vm_id`` now, if any."""
        return next((host_id for host_id, agent in self.agents.items() if agent.runs(vm_id)), None)

    async def wait_for_report(
        self, vm_id: UUID, action: CommandAction = CommandAction.CREATE
    ) -> tuple[str, VmStatusReport]:
        """The first host that reported on ``action`` for ``vm_id``, and its report; waits for one
        (bound it with ``asyncio.timeout``). Needs ``record_commands``."""
        self._require_records()
        key = (vm_id, action)
        if self._reports[key]:
            return self._reports[key][0]
        waiter: asyncio.Future[tuple[str, VmStatusReport]] = asyncio.get_running_loop().create_future()
        self._waiters[key].append(waiter)
        try:
            return await waiter
        finally:
            if waiter in self._waiters.get(key, []):
                self._waiters[key].remove(waiter)

    def take_receipts(self) -> list[Receipt]:
        """Receipts since the last call, oldest first (``record_receipts``)."""
        receipts, self._receipts = self._receipts, []
        return receipts

    def _receive(self, agent: Agent, command: AgentCommand, at: float) -> None:
        self._receipts.append(Receipt(command.vm_id, agent.agent_id, command.action, at))

    def _observe(self, agent: Agent, command: AgentCommand, report: VmStatusReport) -> None:
        self._received[agent.agent_id].append(command)
        key = (command.vm_id, command.action)
        self._reports[key].append((agent.agent_id, report))
        for waiter in self._waiters.pop(key, []):
            if not waiter.done():
                waiter.set_result((agent.agent_id, report))

    def _require_records(self) -> None:
        if not self.record_commands:
            raise RuntimeError("this fleet does not record commands (record_commands=False)")


def default_lanes(hosts: int) -> int:
    """Channel pairs for ``hosts`` agents: consumers are set up this many at a time."""
    return max(1, min(16, hosts // 250))
