"""The six steps of a live migration between two libvirt hosts.

libvirt's test driver cannot migrate (``virDomainMigrateToURI3``: "direct migration is not
supported"), so :class:`MigratingHost` stands in for that one call, over two real test-driver hosts
(node.xml each): it defines and starts the domain's XML on the target and shuts it off here, keeping
its definition, as a peer-to-peer live migration with ``VIR_MIGRATE_PERSIST_DEST`` leaves them.
Everything else (volumes, definitions, states) is the test driver's.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from tests.agent.libvirt.conftest import command, settings_for
from tests.agent.libvirt.fakes import MigratingHost
from vmsched_agent.libvirt.connection import LibvirtConnection
from vmsched_agent.libvirt.host import VirtHost
from vmsched_agent.libvirt.hypervisor import LibvirtHypervisor
from vmsched_agent.libvirt.lifecycle import NoRoom, NotDone
from vmsched_agent.libvirt.live_migration import CannotMigrate
from vmsched_agent.libvirt.ports import (
    DomainState,
    LibvirtHost,
    MigrationFlags,
    NoSuchDomain,
)
from vmsched_agent.libvirt.runner import build_hypervisor, discover
from vmsched_agent.libvirt.template import DomainTemplate
from vmsched_contract.messages import AgentCommand, CommandAction, MigrationOrder, Resources


@dataclass
class Hosts:
    """Two hosts, ``a`` and ``b``, each with its hypervisor as its agent would have it."""

    by_uri: dict[str, MigratingHost] = field(default_factory=dict)
    hypervisors: dict[str, LibvirtHypervisor] = field(default_factory=dict)
    uris: dict[str, str] = field(default_factory=dict)

    def host(self, name: str) -> MigratingHost:
        return self.by_uri[self.uris[name]]

    def order(self, vm_id: uuid.UUID, source: str = "a", target: str = "b", *, uri: bool = True) -> MigrationOrder:
        return MigrationOrder(number=1, source=source, target=target, target_uri=self.uris[target] if uri else None)


@pytest.fixture
async def hosts(node_uri: Callable[[str], str]) -> AsyncIterator[Hosts]:
    made = Hosts()
    connections = []
    for name in ("a", "b"):
        uri = node_uri(name)
        made.uris[name] = uri
        made.by_uri[uri] = MigratingHost(VirtHost.open(uri), made.by_uri)
    for name in ("a", "b"):
        settings = settings_for(made.uris[name], name, migration_uri=made.uris[name])
        connection = LibvirtConnection(made.uris[name], made.by_uri.__getitem__)
        await connection.open()
        connections.append(connection)
        found = await connection.call(functools.partial(discover, settings=settings))
        made.hypervisors[name] = build_hypervisor(
            connection, settings, found, DomainTemplate.load(), made.by_uri.__getitem__
        )
    yield made
    for connection in connections:
        await connection.close()
    for host in made.by_uri.values():
        VirtHost.close(host)


def _state(host: LibvirtHost, name: str) -> DomainState | None:
    try:
        return host.state(name)
    except NoSuchDomain:
        return None


async def _created(hosts: Hosts, resources: Resources | None = None) -> AgentCommand:
    create = command(CommandAction.CREATE, resources=resources or Resources(cpu=1, memory_mb=256, disk_gb=10))
    await hosts.hypervisors["a"].create_vm(create)
    return create


def _step(action: CommandAction, create: AgentCommand, order: MigrationOrder) -> AgentCommand:
    return create.model_copy(update={"action": action, "migration": order})


async def test_a_migration_moves_the_domain_and_its_disk_and_cleanup_removes_what_is_left(hosts: Hosts) -> None:
    create = await _created(hosts)
    name, volume = str(create.vm_id), f"{create.vm_id}.qcow2"
    order = hosts.order(create.vm_id)
    a, b = hosts.host("a"), hosts.host("b")

    await hosts.hypervisors["b"].prepare_migration(_step(CommandAction.PREPARE_MIGRATION, create, order))
    prepared = b.volume("vmsched", volume)
    await hosts.hypervisors["a"].migrate_vm(_step(CommandAction.MIGRATE, create, order))
    handed_over = (_state(a, name), _state(b, name))
    await hosts.hypervisors["b"].finish_migration(_step(CommandAction.FINISH_MIGRATION, create, order))
    await hosts.hypervisors["a"].cleanup_migration(_step(CommandAction.CLEANUP_MIGRATION, create, order))

    assert prepared is not None
    assert prepared.capacity_bytes == 10 << 30
    assert a.migrations == [(name, hosts.uris["b"], MigrationFlags(copy_storage=True))]
    assert handed_over == (DomainState.SHUT_OFF, DomainState.RUNNING)
    assert _state(b, name) is DomainState.RUNNING
    assert _state(a, name) is None
    assert a.volume("vmsched", volume) is None
    assert b.volume("vmsched", volume) is not None


async def test_migrate_fails_with_the_reason_when_the_target_names_no_uri_and_the_vm_runs_on(hosts: Hosts) -> None:
    create = await _created(hosts)
    order = hosts.order(create.vm_id, uri=False)

    with pytest.raises(CannotMigrate, match="b announces no migration URI"):
        await hosts.hypervisors["a"].migrate_vm(_step(CommandAction.MIGRATE, create, order))

    assert _state(hosts.host("a"), str(create.vm_id)) is DomainState.RUNNING
    assert hosts.host("a").migrations == []


async def test_a_rollback_after_the_hand_over_brings_the_vm_back_live_and_abort_clears_the_target(
    hosts: Hosts,
) -> None:
    create = await _created(hosts)
    name = str(create.vm_id)
    order = hosts.order(create.vm_id)
    await hosts.hypervisors["b"].prepare_migration(_step(CommandAction.PREPARE_MIGRATION, create, order))
    await hosts.hypervisors["a"].migrate_vm(_step(CommandAction.MIGRATE, create, order))

    await hosts.hypervisors["a"].rollback_migration(_step(CommandAction.ROLLBACK_MIGRATION, create, order))
    await hosts.hypervisors["b"].abort_migration(_step(CommandAction.ABORT_MIGRATION, create, order))

    assert hosts.host("b").migrations == [(name, hosts.uris["a"], MigrationFlags(copy_storage=True))]  # back, live
    assert _state(hosts.host("a"), name) is DomainState.RUNNING
    assert _state(hosts.host("b"), name) is None
    assert hosts.host("b").volume("vmsched", f"{name}.qcow2") is None


async def test_a_rollback_boots_the_vm_again_when_the_target_runs_it_no_more(hosts: Hosts) -> None:
    create = await _created(hosts)
    name = str(create.vm_id)
    order = hosts.order(create.vm_id)
    await hosts.hypervisors["b"].prepare_migration(_step(CommandAction.PREPARE_MIGRATION, create, order))
    await hosts.hypervisors["a"].migrate_vm(_step(CommandAction.MIGRATE, create, order))
    await hosts.hypervisors["b"].abort_migration(_step(CommandAction.ABORT_MIGRATION, create, order))

    await hosts.hypervisors["a"].rollback_migration(_step(CommandAction.ROLLBACK_MIGRATION, create, order))

    assert _state(hosts.host("a"), name) is DomainState.RUNNING
    assert hosts.host("b").migrations == []


async def test_finish_leaves_nothing_on_the_target_when_the_domain_does_not_run_there(hosts: Hosts) -> None:
    create = await _created(hosts)
    order = hosts.order(create.vm_id)
    await hosts.hypervisors["b"].prepare_migration(_step(CommandAction.PREPARE_MIGRATION, create, order))

    with pytest.raises(NotDone, match="not defined on b, not running"):
        await hosts.hypervisors["b"].finish_migration(_step(CommandAction.FINISH_MIGRATION, create, order))

    assert hosts.host("b").volume("vmsched", f"{create.vm_id}.qcow2") is None
    assert _state(hosts.host("a"), str(create.vm_id)) is DomainState.RUNNING


async def test_prepare_refuses_a_vm_with_a_gpu_and_one_the_pool_has_no_room_for(hosts: Hosts) -> None:
    with_gpu = await _created(hosts, Resources(cpu=1, memory_mb=256, disk_gb=10, gpu=1))
    too_big = command(CommandAction.CREATE, resources=Resources(cpu=1, memory_mb=256, disk_gb=101))

    with pytest.raises(CannotMigrate, match="GPUs passed through"):
        await hosts.hypervisors["b"].prepare_migration(
            _step(CommandAction.PREPARE_MIGRATION, with_gpu, hosts.order(with_gpu.vm_id))
        )
    with pytest.raises(NoRoom, match="needs 101 GiB, 100 GiB free"):
        await hosts.hypervisors["b"].prepare_migration(
            _step(CommandAction.PREPARE_MIGRATION, too_big, hosts.order(too_big.vm_id))
        )
    assert hosts.host("b").domains() == []


async def test_with_shared_storage_no_disk_is_made_copied_or_removed(hosts: Hosts) -> None:
    for hypervisor in hosts.hypervisors.values():
        hypervisor.lifecycle.setup = dataclasses.replace(hypervisor.lifecycle.setup, shared_storage=True)
    create = await _created(hosts)
    volume = f"{create.vm_id}.qcow2"
    order = hosts.order(create.vm_id)

    await hosts.hypervisors["b"].prepare_migration(_step(CommandAction.PREPARE_MIGRATION, create, order))
    made_on_target = hosts.host("b").volume("vmsched", volume)
    await hosts.hypervisors["a"].migrate_vm(_step(CommandAction.MIGRATE, create, order))
    await hosts.hypervisors["b"].finish_migration(_step(CommandAction.FINISH_MIGRATION, create, order))
    await hosts.hypervisors["a"].cleanup_migration(_step(CommandAction.CLEANUP_MIGRATION, create, order))

    assert made_on_target is None
    assert hosts.host("a").migrations[0][2] == MigrationFlags(copy_storage=False)
    assert hosts.host("a").volume("vmsched", volume) is not None  # the one volume both hosts see
