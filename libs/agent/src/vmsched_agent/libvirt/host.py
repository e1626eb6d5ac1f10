"""The one module that imports libvirt-python: :class:`LibvirtHost` (vmsched_agent.libvirt.ports)
over a real ``virConnect``.

libvirt-python has no type stubs; what it returns is turned into the typed values of
:mod:`~vmsched_agent.libvirt.ports` here and nowhere else. Each libvirt error becomes a
:class:`~vmsched_agent.libvirt.ports.HostError` carrying libvirt's message, and says whether the
connection itself was lost (the caller then reconnects). Every method blocks.
"""

from __future__ import annotations

import contextlib
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from typing import Any, TypeVar

import libvirt

from vmsched_agent.libvirt.ports import (
    DomainFacts,
    DomainSample,
    DomainState,
    HostError,
    MigrationFlags,
    NodeInfo,
    NoSuchDomain,
    PoolInfo,
    VolumeInfo,
)
from vmsched_agent.libvirt.template import METADATA_NAMESPACE

T = TypeVar("T")


def _quiet(_context: object, _error: object) -> None:
    """libvirt prints every error on stderr by default; ours are raised and logged instead."""


libvirt.registerErrorHandler(_quiet, None)

# Removed with the domain: a managed save image, snapshot and checkpoint metadata, UEFI variables.
# libvirt refuses to undefine a domain that has any of these unless told to.
_UNDEFINE_FLAGS = (
    libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
    | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
    | libvirt.VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA
    | libvirt.VIR_DOMAIN_UNDEFINE_NVRAM
)
# Some drivers (the test driver) know only the first two; QEMU knows them all.
_UNDEFINE_FLAGS_BASIC = libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
_STATES = {
    libvirt.VIR_DOMAIN_NOSTATE: DomainState.NO_STATE,
    libvirt.VIR_DOMAIN_RUNNING: DomainState.RUNNING,
    libvirt.VIR_DOMAIN_BLOCKED: DomainState.BLOCKED,
    libvirt.VIR_DOMAIN_PAUSED: DomainState.PAUSED,
    libvirt.VIR_DOMAIN_SHUTDOWN: DomainState.SHUTTING_DOWN,
    libvirt.VIR_DOMAIN_SHUTOFF: DomainState.SHUT_OFF,
    libvirt.VIR_DOMAIN_CRASHED: DomainState.CRASHED,
    libvirt.VIR_DOMAIN_PMSUSPENDED: DomainState.SUSPENDED,
}
# Live, driven by the source's libvirtd (it opens the target URI itself), defined on the target
# as it runs, and given up at once if any step fails. The source keeps its (now inactive)
# definition: cleanup_migration removes it, or rollback_migration starts it again.
_MIGRATE_FLAGS = (
    libvirt.VIR_MIGRATE_LIVE
    | libvirt.VIR_MIGRATE_PEER2PEER
    | libvirt.VIR_MIGRATE_PERSIST_DEST
    | libvirt.VIR_MIGRATE_ABORT_ON_ERROR
)


class VirtHost:
    """:class:`~vmsched_agent.libvirt.ports.LibvirtHost` on libvirt-python."""

    def __init__(self, uri: str, connection: Any) -> None:
        self.uri = uri
        self._connection = connection

    @classmethod
    def open(cls, uri: str) -> VirtHost:
        """Open ``uri`` read-write (raises :class:`HostError`)."""
        try:
            return cls(uri, libvirt.open(uri))
        except libvirt.libvirtError as error:
            raise HostError(_message(error), code=error.get_error_code(), connection_lost=True) from None

    def alive(self) -> bool:
        try:
            return bool(self._connection.isAlive())
        except libvirt.libvirtError:
            return False

    def close(self) -> None:
        # Already closed, or the link is gone: nothing more to give back.
        with contextlib.suppress(libvirt.libvirtError):
            self._connection.close()

    # -- inventory -------------------------------------------------------------------------------
    def node_info(self) -> NodeInfo:
        info = self._call(self._connection.getInfo)
        return NodeInfo(cpus=int(info[2]), memory_mib=int(info[1]))

    def capabilities_xml(self) -> str:
        return str(self._call(self._connection.getCapabilities))

    def pci_device_xmls(self) -> list[str]:
        devices = self._call(lambda: self._connection.listAllDevices(libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV))
        return [str(self._call(device.XMLDesc, 0)) for device in devices]

    def pool(self, name: str) -> PoolInfo:
        return self._call(lambda: self._pool_info(self._connection.storagePoolLookupByName(name)))

    def pools(self) -> list[PoolInfo]:
        return self._call(lambda: [self._pool_info(pool) for pool in self._connection.listAllStoragePools(0)])

    def networks(self) -> list[str]:
        return self._call(lambda: sorted(str(network.name()) for network in self._connection.listAllNetworks(0)))

    def domains(self) -> list[DomainFacts]:
        def listed() -> list[DomainFacts]:
            found = []
            for domain in self._connection.listAllDomains(0):
                try:
                    found.append(self._facts(domain))
                except libvirt.libvirtError as error:
                    if error.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                        raise
                    # undefined between the listing and this look (a delete in flight): gone
            return found

        return self._call(listed)

    def samples(self) -> list[DomainSample]:
        flags = libvirt.VIR_DOMAIN_STATS_CPU_TOTAL | libvirt.VIR_DOMAIN_STATS_BALLOON
        records = self._call(
            lambda: self._connection.getAllDomainStats(flags, libvirt.VIR_CONNECT_GET_ALL_DOMAINS_STATS_ACTIVE)
        )
        return [self._call(lambda d=domain, s=stats: _sample(d, s)) for domain, stats in records]

    # -- domains ---------------------------------------------------------------------------------
    def domain_xml(self, name: str) -> str:
        return str(self._call(lambda: self._domain(name).XMLDesc(0)))

    def state(self, name: str) -> DomainState:
        state = self._call(lambda: self._domain(name).state(0))[0]
        return _STATES.get(state, DomainState.NO_STATE)

    def domain_metadata(self, name: str) -> str | None:
        return self._call(lambda: _metadata(self._domain(name)))

    def define(self, xml: str) -> None:
        self._call(self._connection.defineXML, xml)

    def start(self, name: str) -> None:
        self._call(lambda: self._domain(name).create())

    def shutdown(self, name: str) -> None:
        self._call(lambda: self._domain(name).shutdown())

    def destroy(self, name: str) -> None:
        self._call(lambda: self._domain(name).destroy())

    def undefine(self, name: str) -> None:
        def undefine() -> None:
            domain = self._domain(name)
            try:
                domain.undefineFlags(_UNDEFINE_FLAGS)
            except libvirt.libvirtError as error:
                if error.get_error_code() != libvirt.VIR_ERR_INVALID_ARG:  # "unsupported flags"
                    raise
                domain.undefineFlags(_UNDEFINE_FLAGS_BASIC)

        self._call(undefine)

    def migrate(self, name: str, target_uri: str, flags: MigrationFlags) -> None:
        extra = libvirt.VIR_MIGRATE_NON_SHARED_DISK if flags.copy_storage else 0
        self._call(lambda: self._domain(name).migrateToURI3(target_uri, {}, _MIGRATE_FLAGS | extra))

    # -- volumes ---------------------------------------------------------------------------------
    def create_volume(self, pool: str, xml: str) -> None:
        self._call(lambda: self._connection.storagePoolLookupByName(pool).createXML(xml, 0))

    def delete_volume(self, pool: str, name: str) -> None:
        self._call(lambda: self._connection.storagePoolLookupByName(pool).storageVolLookupByName(name).delete(0))

    def volume(self, pool: str, name: str) -> VolumeInfo | None:
        def look() -> VolumeInfo | None:
            try:
                volume = self._connection.storagePoolLookupByName(pool).storageVolLookupByName(name)
            except libvirt.libvirtError as error:
                if error.get_error_code() == libvirt.VIR_ERR_NO_STORAGE_VOL:
                    return None
                raise
            described = ElementTree.fromstring(volume.XMLDesc(0))
            format_element = described.find("./target/format")
            return VolumeInfo(
                name=name,
                path=str(volume.path()),
                format="raw" if format_element is None else format_element.get("type", "raw"),
                capacity_bytes=int(volume.info()[1]),
            )

        return self._call(look)

    # -- helpers ---------------------------------------------------------------------------------
    def _domain(self, name: str) -> Any:
        return self._connection.lookupByName(name)

    def _facts(self, domain: Any) -> DomainFacts:
        info = domain.info()
        return DomainFacts(
            name=str(domain.name()),
            uuid=str(domain.UUIDString()),
            active=bool(domain.isActive()),
            vcpus=int(info[3]),
            memory_kib=int(info[2]),
            metadata=_metadata(domain),
        )

    def _pool_info(self, pool: Any) -> PoolInfo:
        # A directory pool sees files made outside libvirt only after a refresh. One that cannot
        # (inactive, or busy building a volume) gives its last figures, which will do.
        with contextlib.suppress(libvirt.libvirtError):
            pool.refresh(0)
        _, capacity, _, available = pool.info()
        kind = ElementTree.fromstring(pool.XMLDesc(0)).get("type", "")
        allocated = sum(int(volume.info()[1]) for volume in pool.listAllVolumes(0))
        return PoolInfo(
            name=str(pool.name()),
            kind=kind,
            capacity_bytes=int(capacity),
            available_bytes=int(available),
            allocated_bytes=allocated,
        )

    def _call(self, function: Callable[..., T], *arguments: object) -> T:
        try:
            return function(*arguments)
        except libvirt.libvirtError as error:
            code = error.get_error_code()
            message = _message(error)
            if code == libvirt.VIR_ERR_NO_DOMAIN:
                raise NoSuchDomain(message, code=code) from None
            raise HostError(message, code=code, connection_lost=not self.alive()) from None


def _sample(domain: Any, stats: dict[str, int]) -> DomainSample:
    """A domain's counters from its bulk statistics; QEMU gives ``cpu.time`` and ``balloon.rss``,
    drivers without them (the test driver) fall back on ``virDomainGetInfo``."""
    cpu_time = stats.get("cpu.time")
    memory = stats.get("balloon.rss", stats.get("balloon.current"))
    if cpu_time is None or memory is None:
        info = domain.info()
        cpu_time = int(info[4]) if cpu_time is None else cpu_time
        memory = int(info[2]) if memory is None else memory
    return DomainSample(name=str(domain.name()), cpu_time_ns=int(cpu_time), memory_kib=int(memory))


def _metadata(domain: Any) -> str | None:
    try:
        return str(domain.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, METADATA_NAMESPACE, 0))
    except libvirt.libvirtError as error:
        if error.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN_METADATA:
            raise
        return None


def _message(error: Any) -> str:
    return str(error.get_error_message() or error)


def open_host(uri: str) -> VirtHost:
    """:class:`~vmsched_agent.libvirt.ports.OpensHosts` for real libvirt."""
    return VirtHost.open(uri)
