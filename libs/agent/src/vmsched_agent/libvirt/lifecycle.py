"""A VM's life on one libvirt host: create, delete, stop, start, as blocking steps on a
:class:`~vmsched_agent.libvirt.ports.LibvirtHost` (run on the connection's worker threads).

Each step ends only once libvirt says it is done (a created VM runs, a deleted one is gone), and a
create that fails leaves nothing behind (the scheduler retries the VM on another host): the volume
and the definition it made are removed again before the error goes up.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from vmsched_agent.libvirt.ports import (
    BYTES_PER_GIB,
    DomainState,
    HostError,
    LibvirtHost,
    NoSuchDomain,
    PciAddress,
    PoolInfo,
)
from vmsched_agent.libvirt.template import (
    Backing,
    Disk,
    DomainSpec,
    DomainTemplate,
    hostdev_addresses,
    metadata_disk,
    volume_name,
    volume_xml,
)
from vmsched_contract.messages import AgentCommand

# How often a step that waits on libvirt (a start, a shutdown) asks again.
POLL_INTERVAL = 0.1


class NoRoom(Exception):
    """The host lacks what the VM needs (room in the pool, a free GPU)."""


class NotDone(Exception):
    """libvirt took the request but the domain did not get where it should within the time allowed."""


@dataclass(frozen=True, slots=True)
class HostSetup:
    """What every VM on this host is made with (from the agent's settings and the host itself)."""

    host_id: str
    pool: str
    network: str
    volume_format: str
    template: DomainTemplate
    domain_type: str
    backing: Backing | None = None
    gpus: tuple[PciAddress, ...] = ()
    shared_storage: bool = False
    start_timeout: float = 30.0
    shutdown_timeout: float = 60.0

    def disk_of(self, vm_id: UUID) -> Disk:
        return Disk(self.pool, volume_name(vm_id, self.volume_format))


class Lifecycle:
    """create, delete, stop and start, each a blocking call. One per agent: it holds the lock that
    keeps two creates from handing out the same GPU."""

    def __init__(self, setup: HostSetup) -> None:
        self.setup = setup
        self._gpu_lock = threading.Lock()
        # Held from the room check until the volume exists: two creates at once must not both take
        # the last room in the pool.
        self._room_lock = threading.Lock()

    # -- create ----------------------------------------------------------------------------------
    def create(self, host: LibvirtHost, command: AgentCommand) -> None:
        """Make the VM's volume, define its domain from the template, start it, and return once
        libvirt says it runs. Raises (leaving nothing behind) when any of that fails."""
        setup = self.setup
        vm_id = command.vm_id
        name = str(vm_id)
        disk = setup.disk_of(vm_id)
        self.make_volume(host, vm_id, command.resources.disk_gb, setup.backing)
        try:
            with self._gpu_lock:  # held until the domain is defined, so the next create sees its GPUs taken
                gpus = self._free_gpus(host, command.resources.gpu)
                spec = DomainSpec(
                    vm_id=vm_id,
                    title=command.name,
                    vcpus=command.resources.cpu,
                    memory_mib=command.resources.memory_mb,
                    domain_type=setup.domain_type,
                    disk=disk,
                    volume_format=setup.volume_format,
                    network=setup.network,
                    host_id=setup.host_id,
                    gpus=gpus,
                )
                host.define(setup.template.render(spec))
            try:
                host.start(name)
                self._wait(host, name, lambda state: state.runs, setup.start_timeout, "running")
            except BaseException:
                _quietly(lambda: _destroy_if_active(host, name))
                _quietly(lambda: host.undefine(name))
                raise
        except BaseException:
            _quietly(lambda: host.delete_volume(disk.pool, disk.volume))
            raise

    def make_volume(self, host: LibvirtHost, vm_id: UUID, disk_gb: int, backing: Backing | None) -> None:
        """The VM's volume, once the pool is seen to have room for it (raises :class:`NoRoom`)."""
        disk = self.setup.disk_of(vm_id)
        with self._room_lock:
            check_room(host.pool(self.setup.pool), disk_gb)
            # One named by this VM's id that no domain holds (else the agent would know the VM) is
            # what a create or a migration that died half-way left behind.
            remove_volume(host, disk)
            host.create_volume(disk.pool, volume_xml(disk.volume, disk_gb, self.setup.volume_format, backing))

    def _free_gpus(self, host: LibvirtHost, wanted: int) -> tuple[PciAddress, ...]:
        if wanted == 0:
            return ()
        taken = {address for domain in host.domains() for address in _hostdevs(host, domain.name)}
        free = [gpu for gpu in self.setup.gpus if gpu not in taken]
        if len(free) < wanted:
            raise NoRoom(
                f"no room on {self.setup.host_id}: gpu: needs {wanted}, {len(free)} free ({len(self.setup.gpus)} total)"
            )
        return tuple(free[:wanted])

    # -- delete ----------------------------------------------------------------------------------
    def delete(self, host: LibvirtHost, vm_id: UUID) -> None:
        """Destroy the domain, undefine it, remove its volume; return once libvirt knows it no more."""
        name = str(vm_id)
        disk = self.setup.disk_of(vm_id)
        try:
            metadata = host.domain_metadata(name)
            disk = (metadata_disk(metadata) if metadata else None) or disk
            _destroy_if_active(host, name)
            host.undefine(name)
        except NoSuchDomain:
            pass  # gone already (a delete that died after undefining): its volume may be left
        remove_volume(host, disk)
        try:
            state = host.state(name)
        except NoSuchDomain:
            return
        raise NotDone(f"domain {name} is still defined ({state.value}) after undefine")

    # -- power -----------------------------------------------------------------------------------
    def stop(self, host: LibvirtHost, vm_id: UUID) -> None:
        """Ask the guest to shut down (ACPI); power it off if it has not within ``shutdown_timeout``."""
        name = str(vm_id)
        if not host.state(name).active:
            return
        timeout = self.setup.shutdown_timeout
        if timeout > 0:
            host.shutdown(name)
            with contextlib.suppress(NotDone):
                self._wait(host, name, lambda state: not state.active, timeout, "shut off")
        if host.state(name).active:
            host.destroy(name)
        self._wait(host, name, lambda state: not state.active, self.setup.start_timeout, "shut off")

    def start(self, host: LibvirtHost, vm_id: UUID) -> None:
        """Power the domain on; return once libvirt says it runs."""
        name = str(vm_id)
        if not host.state(name).active:
            host.start(name)
        self._wait(host, name, lambda state: state.runs, self.setup.start_timeout, "running")

    def _wait(
        self, host: LibvirtHost, name: str, reached: Callable[[DomainState], bool], timeout: float, what: str
    ) -> None:
        deadline = time.monotonic() + timeout
        while not reached(state := host.state(name)):
            if time.monotonic() >= deadline:
                raise NotDone(f"domain {name} is {state.value}, not {what}, after {timeout:g} s")
            time.sleep(POLL_INTERVAL)


def check_room(pool: PoolInfo, disk_gb: int) -> None:
    """Raise :class:`NoRoom` unless the pool has ``disk_gb`` GiB left: neither given to other volumes
    (thin ones count in full: they may fill up) nor physically used."""
    room = min(pool.capacity_bytes - pool.allocated_bytes, pool.available_bytes)
    if disk_gb * BYTES_PER_GIB > room:
        raise NoRoom(
            f"no room in pool {pool.name}: disk: needs {disk_gb} GiB, {max(room, 0) // BYTES_PER_GIB} GiB free "
            f"({pool.capacity_bytes // BYTES_PER_GIB} GiB total, {pool.allocated_bytes // BYTES_PER_GIB} GiB given "
            "to volumes)"
        )


def remove_volume(host: LibvirtHost, disk: Disk) -> None:
    if host.volume(disk.pool, disk.volume) is not None:
        host.delete_volume(disk.pool, disk.volume)


def _hostdevs(host: LibvirtHost, name: str) -> list[PciAddress]:
    try:
        return hostdev_addresses(host.domain_xml(name))
    except NoSuchDomain:
        return []  # deleted since it was listed: it holds nothing


def _destroy_if_active(host: LibvirtHost, name: str) -> None:
    if host.state(name).active:
        host.destroy(name)


def _quietly(step: Callable[[], None]) -> None:
    """A clean-up step after a failure: the failure is what gets reported, not this."""
    with contextlib.suppress(HostError):
        step()
