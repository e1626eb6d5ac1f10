"""A live migration's six steps (vmsched_agent.MigratesVms) on libvirt, as blocking calls.

libvirt's own protocol (prepare, perform, finish, confirm) runs whole inside one call,
``virDomainMigrateToURI3`` in peer-to-peer mode: the source's libvirtd opens the target's URI itself
and either ends with the VM running on the target or gives up with the VM still running here. So
vmsched's steps map onto it this way:

- ``prepare_migration`` (target): checks the VM can come (no GPU passed through, room in the pool)
  and, unless the storage is shared, makes the empty volume the disk is copied into.
- ``migrate_vm`` (source): the whole live migration, to the target's URI (the command's
  ``migration.target_uri``, from the target's heartbeats). The source keeps the domain's definition,
  shut off: it is what ``rollback_migration`` runs again.
- ``finish_migration`` (target): returns once libvirt says the domain runs here.
- ``cleanup_migration`` (source): undefines the shut-off domain and removes its volume.
- ``abort_migration`` (target): destroys and undefines what came, removes the volume prepared.
- ``rollback_migration`` (source): the VM runs here again: nothing to do if the migration never
  happened; else it is migrated back live from the target when the target still runs it, or booted
  again from its definition here.

With shared storage (``VMSCHED_LIBVIRT_SHARED_STORAGE``) no disk is copied and no step of a
migration removes a volume: both hosts see the same one.
"""

from __future__ import annotations

from vmsched_agent.libvirt.lifecycle import Lifecycle, NotDone, remove_volume
from vmsched_agent.libvirt.ports import HostError, LibvirtHost, MigrationFlags, NoSuchDomain, OpensHosts
from vmsched_agent.libvirt.template import metadata_disk
from vmsched_contract.messages import AgentCommand


class CannotMigrate(Exception):
    """The VM cannot migrate live (passed-through devices, nowhere to go)."""


class LiveMigration:
    """The six steps, for one host (``own_uri``: its migration URI, for a migration back)."""

    def __init__(self, lifecycle: Lifecycle, opener: OpensHosts, own_uri: str | None) -> None:
        self.lifecycle = lifecycle
        self.opener = opener
        self.own_uri = own_uri

    @property
    def _flags(self) -> MigrationFlags:
        return MigrationFlags(copy_storage=not self.lifecycle.setup.shared_storage)

    # -- on the target ---------------------------------------------------------------------------
    def prepare(self, host: LibvirtHost, command: AgentCommand) -> None:
        setup = self.lifecycle.setup
        name = str(command.vm_id)
        if command.resources.gpu:
            raise CannotMigrate(f"VM {name} has GPUs passed through: libvirt cannot migrate it live")
        try:
            state = host.state(name)
        except NoSuchDomain:
            pass
        else:
            raise CannotMigrate(f"a domain named {name} is already defined on {setup.host_id} ({state.value})")
        if setup.shared_storage:
            return
        # Empty, without the base image: the copy fills it with the whole disk, base layers included.
        self.lifecycle.make_volume(host, command.vm_id, command.resources.disk_gb, backing=None)

    def finish(self, host: LibvirtHost, command: AgentCommand) -> None:
        name = str(command.vm_id)
        try:
            state = host.state(name)
        except NoSuchDomain:
            state = None
        if state is not None and state.runs:
            return
        self.abort(host, command)  # leaves nothing behind: the source is told to keep the VM
        shown = "not defined" if state is None else state.value
        raise NotDone(f"domain {name} is {shown} on {self.lifecycle.setup.host_id}, not running")

    def abort(self, host: LibvirtHost, command: AgentCommand) -> None:
        name = str(command.vm_id)
        try:
            if host.state(name).active:
                host.destroy(name)
            host.undefine(name)
        except NoSuchDomain:
            pass  # nothing came, or it is gone already
        if not self.lifecycle.setup.shared_storage:
            remove_volume(host, self.lifecycle.setup.disk_of(command.vm_id))

    # -- on the source ---------------------------------------------------------------------------
    def migrate(self, host: LibvirtHost, command: AgentCommand) -> None:
        name = str(command.vm_id)
        target_uri = _target_uri(command)
        state = host.state(name)
        if not state.runs:
            raise CannotMigrate(f"domain {name} is {state.value}: only a running VM migrates live")
        host.migrate(name, target_uri, self._flags)

    def cleanup(self, host: LibvirtHost, command: AgentCommand) -> None:
        name = str(command.vm_id)
        disk = self.lifecycle.setup.disk_of(command.vm_id)
        try:
            state = host.state(name)
            if state.active:
                raise NotDone(f"domain {name} still runs here ({state.value}): not cleaning it up")
            metadata = host.domain_metadata(name)
            disk = (metadata_disk(metadata) if metadata else None) or disk
            host.undefine(name)
        except NoSuchDomain:
            pass  # cleaned up already
        if not self.lifecycle.setup.shared_storage:
            remove_volume(host, disk)

    def rollback(self, host: LibvirtHost, command: AgentCommand) -> None:
        name = str(command.vm_id)
        try:
            if host.state(name).runs:
                return  # libvirt gave the migration up: the VM never left
        except NoSuchDomain:
            raise NotDone(f"domain {name} is not defined here any more: nothing to run again") from None
        target_uri = command.migration.target_uri if command.migration else None
        if target_uri and self.own_uri:
            self._migrate_back(name, target_uri, self.own_uri)
        self.lifecycle.start(host, command.vm_id)

    def _migrate_back(self, name: str, target_uri: str, own_uri: str) -> None:
        """Bring the VM back live if the target still runs it (its memory since the hand-over kept);
        otherwise the caller boots it again here."""
        target = self.opener(target_uri)
        try:
            try:
                if not target.state(name).runs:
                    return
                target.migrate(name, own_uri, self._flags)
            except NoSuchDomain:
                return  # the target's abort came first
            except HostError:
                if _runs(target, name):
                    raise  # it still runs there: booting a second copy here would be worse
        finally:
            target.close()


def _target_uri(command: AgentCommand) -> str:
    uri = command.migration.target_uri if command.migration else None
    if not uri:
        target = command.migration.target if command.migration else "the target"
        raise CannotMigrate(
            f"{target} announces no migration URI (its agent is not the libvirt agent, or runs without "
            "VMSCHED_LIBVIRT_MIGRATION_URI)"
        )
    return uri


def _runs(host: LibvirtHost, name: str) -> bool:
    try:
        return host.state(name).runs
    except HostError:
        return False
