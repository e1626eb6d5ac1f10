"""What libvirt's test driver lacks, stood in for over real test-driver hosts."""

from __future__ import annotations

from vmsched_agent.libvirt.host import VirtHost
from vmsched_agent.libvirt.ports import HostError, MigrationFlags


class MigratingHost(VirtHost):
    """A real test-driver host whose ``migrate`` moves the domain to another one of ``hosts`` (libvirt's
    test driver says "direct migration is not supported"): it defines and starts the domain's XML on
    the target and shuts it off here, keeping its definition, as a peer-to-peer live migration with
    ``VIR_MIGRATE_PERSIST_DEST`` leaves them. ``migrations`` records each (domain, target URI, flags)."""

    def __init__(self, real: VirtHost, hosts: dict[str, MigratingHost]) -> None:
        super().__init__(real.uri, real._connection)
        self.hosts = hosts
        self.migrations: list[tuple[str, str, MigrationFlags]] = []

    def migrate(self, name: str, target_uri: str, flags: MigrationFlags) -> None:
        target = self.hosts.get(target_uri)
        if target is None:
            raise HostError(f"unable to connect to server at '{target_uri}'")
        self.migrations.append((name, target_uri, flags))
        xml = self.domain_xml(name)
        if flags.copy_storage:  # QEMU copies the disk into a volume the target made beforehand
            volume = f"{name}.qcow2"
            if target.volume("vmsched", volume) is None:
                raise HostError(f"Storage volume not found: no storage vol with matching name '{volume}'")
        target.define(xml)
        target.start(name)
        self.destroy(name)  # shut off here, still defined

    def close(self) -> None:
        """The test's hosts live as long as the test: an agent (or a rollback) closing its
        connection must not end one."""
