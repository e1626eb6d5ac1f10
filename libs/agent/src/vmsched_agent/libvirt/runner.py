"""The libvirt agent put together (its composition root): settings and a libvirt connection in, a
running :class:`~vmsched_agent.Agent` out.

At start-up it reads the host from libvirt (capacity, GPUs, the domain type, the base image) and
reconciles: the domains it made before (named by a VM id, with its metadata) are the VMs it runs
(``vm_ids``; the shut-off ones ``stopped``), and the gateway settles them against PostgreSQL (one it
holds elsewhere or nowhere is reported, and deleted only as ``VMSCHED_ORPHAN_VMS`` says). Every other
domain is the operator's: logged, never touched. While libvirt is unreachable the host heartbeats
``draining`` (no new VMs come) without usage; once the connection is back, ``online`` again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from vmsched_agent.agent import Agent, CommandObserver
from vmsched_agent.libvirt import inventory
from vmsched_agent.libvirt.connection import LibvirtConnection
from vmsched_agent.libvirt.hypervisor import LibvirtHypervisor
from vmsched_agent.libvirt.lifecycle import HostSetup, Lifecycle
from vmsched_agent.libvirt.live_migration import LiveMigration
from vmsched_agent.libvirt.ports import KIB_PER_MIB, LibvirtHost, NodeInfo, OpensHosts, PciAddress, PoolInfo
from vmsched_agent.libvirt.settings import LibvirtAgentSettings
from vmsched_agent.libvirt.template import Backing, DomainTemplate
from vmsched_agent.libvirt.usage import UsageMeter
from vmsched_contract.messages import Capability
from vmsched_runtime.logs import get_logger

log = get_logger(__name__)


class SetupError(Exception):
    """The host cannot serve as configured (no such pool, no base image, no hvm domain type)."""


@dataclass(frozen=True, slots=True)
class Discovery:
    """What libvirt says of the host at start-up."""

    node: NodeInfo
    pool: PoolInfo
    gpus: tuple[PciAddress, ...]
    domain_type: str
    domains: inventory.Domains
    backing: Backing | None
    networks: tuple[str, ...]
    pools: tuple[PoolInfo, ...]


def discover(host: LibvirtHost, settings: LibvirtAgentSettings) -> Discovery:
    """Read the host (blocking; run on the connection's threads). Raises :class:`SetupError`."""
    try:
        domain_type = inventory.domain_type(host.capabilities_xml())
    except inventory.NoDomainType as error:
        raise SetupError(str(error)) from None
    backing = None
    if settings.base_volume is not None:
        base = host.volume(settings.pool, settings.base_volume)
        if base is None:
            raise SetupError(f"base volume {settings.base_volume} not found in pool {settings.pool}")
        if settings.volume_format != "qcow2":
            raise SetupError("a base volume needs VMSCHED_LIBVIRT_VOLUME_FORMAT=qcow2 (a copy-on-write layer)")
        backing = Backing(path=base.path, format=base.format)
    pools = tuple(host.pools())
    pool = next((pool for pool in pools if pool.name == settings.pool), None)
    if pool is None:
        raise SetupError(f"storage pool {settings.pool} not found (the host has: {_names(p.name for p in pools)})")
    networks = tuple(host.networks())
    if settings.network not in networks:
        raise SetupError(f"network {settings.network} not found (the host has: {_names(networks)})")
    return Discovery(
        node=host.node_info(),
        pool=pool,
        gpus=tuple(inventory.gpu_addresses(host.pci_device_xmls())),
        domain_type=domain_type,
        domains=inventory.split(host.domains()),
        backing=backing,
        networks=networks,
        pools=pools,
    )


def build_hypervisor(
    connection: LibvirtConnection,
    settings: LibvirtAgentSettings,
    found: Discovery,
    template: DomainTemplate,
    opener: OpensHosts,
) -> LibvirtHypervisor:
    """The hypervisor of a host ``found`` so, on ``connection`` (``opener``: for a migration's
    rollback, which talks to the target's libvirt)."""
    setup = HostSetup(
        host_id=settings.host_id,
        pool=settings.pool,
        network=settings.network,
        volume_format=settings.volume_format,
        template=template,
        domain_type=found.domain_type,
        backing=found.backing,
        gpus=found.gpus,
        shared_storage=settings.shared_storage,
        start_timeout=settings.start_timeout,
        shutdown_timeout=settings.shutdown_timeout,
    )
    lifecycle = Lifecycle(setup)
    return LibvirtHypervisor(
        connection,
        lifecycle,
        LiveMigration(lifecycle, opener, settings.migration_uri),
        UsageMeter(found.node.cpus),
    )


class LibvirtAgent:
    """``vmsched-agent libvirt``: one host's agent on libvirt. ``opener`` opens libvirt connections
    (default: libvirt-python's; tests hand in one that stands in for what the test driver lacks).
    ``amqp_url``: the broker as this host's enrolled user (default: ``VMSCHED_AMQP_URL``)."""

    def __init__(
        self,
        settings: LibvirtAgentSettings,
        *,
        amqp_url: str | None = None,
        opener: OpensHosts | None = None,
        heartbeat_interval: float | None = None,
        max_concurrent_commands: int = 4,
        queue_wait_timeout: float = 60.0,
        observer: CommandObserver | None = None,
    ) -> None:
        self.settings = settings
        self.template = DomainTemplate.load(settings.template)  # a broken one stops us before libvirt is asked
        self._amqp_url = amqp_url
        self._opener = opener or _libvirt_opener()
        self._heartbeat_interval = heartbeat_interval
        self._max_concurrent_commands = max_concurrent_commands
        self._queue_wait_timeout = queue_wait_timeout
        self._observer = observer
        self.connection = LibvirtConnection(
            settings.uri,
            self._opener,
            # Commands run side by side up to this many; one more thread for sampling and probes.
            workers=max_concurrent_commands + 1,
            check_interval=settings.check_interval,
            reconnect_max_delay=settings.reconnect_max_delay,
            on_change=self._libvirt_changed,
        )
        self._agent: Agent | None = None
        self._hypervisor: LibvirtHypervisor | None = None
        self.discovery: Discovery | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def agent(self) -> Agent:
        if self._agent is None:
            raise RuntimeError("the libvirt agent is not started")
        return self._agent

    @property
    def hypervisor(self) -> LibvirtHypervisor:
        if self._hypervisor is None:
            raise RuntimeError("the libvirt agent is not started")
        return self._hypervisor

    async def start(self) -> None:
        """Connect to libvirt, read and reconcile the host, then start the agent (heartbeats and
        commands). Raises :class:`~vmsched_agent.libvirt.ports.HostError` (libvirt unreachable at
        start-up), :class:`SetupError`, or what :meth:`Agent.start` raises."""
        settings = self.settings
        await self.connection.open()
        try:
            found = self.discovery = await self.connection.call(lambda host: discover(host, settings))
            self._report(found)
            self._hypervisor = build_hypervisor(self.connection, settings, found, self.template, self._opener)
            capabilities = [Capability.POWER]
            if settings.migration_uri is not None:  # others could not reach this host's libvirt
                capabilities.append(Capability.MIGRATE)
            self._agent = Agent(
                settings.host_id,
                inventory.capacity(found.node, found.pool, len(found.gpus)),
                self._hypervisor,
                amqp_url=self._amqp_url,
                labels=settings.labels,
                vm_ids=found.domains.vm_ids,
                stopped=found.domains.stopped,
                capabilities=capabilities,
                migration_uri=settings.migration_uri,
                networks=found.networks,  # as read at start-up: a network defined later needs a restart
                heartbeat_interval=self._heartbeat_interval,
                max_concurrent_commands=self._max_concurrent_commands,
                queue_wait_timeout=self._queue_wait_timeout,
                observer=self._observer,
            )
            await self._hypervisor.sample()  # the first of two: the heartbeats carry usage from the next
            self._tasks = [
                asyncio.create_task(self.connection.watch(), name="libvirt-watch"),
                asyncio.create_task(self._sample_forever(), name="libvirt-usage"),
            ]
            await self._agent.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop the agent (commands in flight finish), then the sampling and the connection."""
        if self._agent is not None:
            await self._agent.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.connection.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def _sample_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.usage_interval)
            if self._hypervisor is not None:
                await self._hypervisor.sample()

    def _libvirt_changed(self, connected: bool, why: str) -> None:
        # Reported in the heartbeats: a host that cannot reach its hypervisor takes no new VMs.
        if self._agent is not None:
            self._agent.set_draining(not connected)
        if not connected and self._hypervisor is not None:
            self._hypervisor.meter.forget()

    def _report(self, found: Discovery) -> None:
        domains = found.domains
        log.info(
            "libvirt host read",
            uri=self.settings.uri,
            cpus=found.node.cpus,
            memory_mib=found.node.memory_mib,
            pool=found.pool.name,
            gpus=[str(gpu) for gpu in found.gpus],
            domain_type=found.domain_type,
            vms=len(domains.vm_ids),
            stopped=len(domains.stopped),
            networks=list(found.networks),
            pools=[pool.name for pool in found.pools],
        )
        if domains.foreign:
            log.warning(
                "domains vmsched did not make: left alone (their room is not vmsched's: reserve it with "
                "PATCH /v1/hosts/{id} reserved)",
                domains=[domain.name for domain in domains.foreign],
                vcpus=sum(domain.vcpus for domain in domains.foreign),
                memory_mib=sum(domain.memory_kib for domain in domains.foreign) // KIB_PER_MIB,
            )


def _libvirt_opener() -> OpensHosts:
    # Imported here, not at the top: the rest of the agent imports (and is tested) without libvirt.
    from vmsched_agent.libvirt.host import open_host

    return open_host


def _names(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "none"
