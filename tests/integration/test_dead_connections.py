"""A PostgreSQL restart leaves the pools' connections dead: the pool does not ping them (a ping is
three round trips per transaction), so the API runs a unit of work again once on a fresh connection,
and its callers never see the dead one."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, InterfaceError
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_api.repository import Repository
from vmsched_api.vm_acceptance import Accepted, CreateRequest, VmAcceptance
from vmsched_contract.api import VmDefaults, VmRequest
from vmsched_contract.status import VmStatus
from vmsched_pg.engine import create_engine, failed_on_dead_connection
from vmsched_pg.outbox import published_marks

DEFAULTS = VmDefaults(cpu=4, memory_mb=8192)


def asking(name: str) -> CreateRequest:
    return CreateRequest(
        bodies=[VmRequest(name=name, cpu=1, memory_mb=512, disk_gb=1)], project="default", defaults=DEFAULTS
    )


async def _kill_pooled_connections(engine: AsyncEngine) -> int:
    """Close, from the server's side, every connection of this database but the caller's own."""
    killer = create_engine(engine.url.render_as_string(hide_password=False), pool_size=1)
    try:
        async with killer.begin() as connection:
            killed = await connection.scalar(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
    finally:
        await killer.dispose()
    return int(killed or 0)


async def test_the_api_survives_connections_postgresql_closed(private_engine: AsyncEngine) -> None:
    repository = Repository(private_engine)
    acceptance = VmAcceptance(private_engine)
    (before,) = await acceptance.accept([asking("before")])
    assert isinstance(before, Accepted)
    (vm,) = before.vms
    assert await _kill_pooled_connections(private_engine) >= 1

    (after,) = await acceptance.accept([asking("after")])

    assert isinstance(after, Accepted)
    assert not after.replayed
    (created,) = after.vms
    assert created.status is VmStatus.PENDING
    assert (await repository.get_vm(vm.id)) is not None
    # Once: the failed attempt committed nothing.
    assert [v.name for v in (await repository.list_vms(status=None, hypervisor_id=None, limit=10, cursor=None))[0]] == [
        "before",
        "after",
    ]
    await _kill_pooled_connections(private_engine)
    marks = published_marks(private_engine)
    await marks.submit([str(created.id)])
    await marks.drain()
    async with private_engine.connect() as connection:
        marked = await connection.scalar(
            text("SELECT published_at IS NOT NULL FROM vms WHERE id = :id"), {"id": created.id}
        )
    assert marked


def test_a_failed_commit_is_not_run_again() -> None:
    """A COMMIT that failed with its connection may have landed: only a failed statement is retried."""
    dead = InterfaceError("SELECT 1", None, Exception("connection is closed"), connection_invalidated=True)
    commit = InterfaceError(None, None, Exception("connection is closed"), connection_invalidated=True)
    alive = DBAPIError("SELECT 1", None, Exception("syntax error"))
    assert failed_on_dead_connection(dead)
    assert not failed_on_dead_connection(commit)
    assert not failed_on_dead_connection(alive)
    assert not failed_on_dead_connection(ValueError("not a database error"))
