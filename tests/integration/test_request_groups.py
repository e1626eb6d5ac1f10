"""Requests for VMs accepted in groups, on the real servers: requests in flight together share one
transaction (with their audit rows), one ``vm.create`` and one published mark; each keeps its own
answer (a refusal fails that request alone); Idempotency-Keys hold across a group; a crash between
the commit and the publish is recovered by the outbox sweep."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import pytest
from faststream.rabbit import RabbitBroker
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.amqp_tools import Tap
from tests.integration.waiting import eventually
from vmsched_amqp import topology
from vmsched_amqp.broker import declare_topology, make_broker
from vmsched_amqp.publishing import Publisher
from vmsched_api.group_store import UnknownServerGroup
from vmsched_api.identity.audit import AuditStub
from vmsched_api.project_store import QUOTA_FIELDS, ProjectStore
from vmsched_api.quota import QuotaExceeded
from vmsched_api.vm_acceptance import Accepted, CreateRequest, IdempotencyConflict, Outcome, VmAcceptance
from vmsched_api.vm_intake import VmIntake
from vmsched_contract.api import VmDefaults, VmRequest
from vmsched_contract.messages import VmToPlace
from vmsched_pg.outbox import published_marks, republish_unpublished
from vmsched_runtime.settings import Settings

DEFAULTS = VmDefaults(cpu=1, memory_mb=512)


def single(name: str, project: str = "default", key: str | None = None, **body: object) -> CreateRequest:
    request = VmRequest.model_validate({"name": name, "cpu": 1, "memory_mb": 512, "disk_gb": 1, **body})
    return CreateRequest(
        bodies=[request],
        project=project,
        defaults=DEFAULTS,
        idempotency_key=key,
        audit=AuditStub(token_id=None, project=project, action="POST /v1/vms", path="/v1/vms"),
    )


@pytest.fixture
async def broker(settings: Settings) -> AsyncIterator[RabbitBroker]:
    connected = make_broker(settings)
    await connected.connect()
    await declare_topology(connected)
    try:
        yield connected
    finally:
        await connected.stop()


@pytest.fixture
async def vm_creates(settings: Settings) -> AsyncIterator[Tap]:
    async with Tap(str(settings.amqp_url), topology.EXCHANGE.name, topology.VM_CREATE) as tap:
        yield tap


def vm_ids_in(tap: Tap, wanted: set[str]) -> list[list[str]]:
    """Per vm.create message on the tap: the ids it carries of ``wanted`` (messages without any left out)."""
    found = []
    for message in tap.messages:
        ids = [vm["vm_id"] for vm in json.loads(message.body)["vms"] if vm["vm_id"] in wanted]
        if ids:
            found.append(ids)
    return found


@dataclass
class Gated:
    """The real publisher, whose ``vm.create`` waits for the test to open the gate."""

    publisher: Publisher
    gate: asyncio.Event

    async def vm_create(self, vms: Sequence[VmToPlace]) -> None:
        await self.gate.wait()
        await self.publisher.vm_create(vms)


async def transactions_of(engine: AsyncEngine, table: str, ids: Sequence[object], column: str = "id") -> set[str]:
    """The transactions that last wrote these rows (their xmin)."""
    async with engine.connect() as connection:
        rows = await connection.execute(
            text(f"SELECT DISTINCT xmin::text FROM {table} WHERE {column} = ANY(:ids)"), {"ids": list(ids)}
        )
        return {row[0] for row in rows}


async def audit_rows(engine: AsyncEngine, project: str) -> list[tuple[int, str]]:
    async with engine.connect() as connection:
        rows = await connection.execute(
            text("SELECT status, target FROM audit WHERE project = :project ORDER BY id"), {"project": project}
        )
        return [(row.status, row.target) for row in rows]


async def new_project(engine: AsyncEngine, **quota: int) -> str:
    name = f"p-{uuid.uuid4().hex[:8]}"
    limits: dict[str, int | None] = {field: None for field in QUOTA_FIELDS}
    await ProjectStore(engine).create(name, {**limits, **quota})
    return name


def accepted(outcome: Outcome) -> Accepted:
    assert isinstance(outcome, Accepted), outcome
    return outcome


async def test_requests_in_flight_together_share_one_transaction_one_vm_create_and_one_mark(
    private_engine: AsyncEngine, broker: RabbitBroker, vm_creates: Tap
) -> None:
    gate = asyncio.Event()
    publisher: object = Gated(Publisher(broker), gate)
    marks = published_marks(private_engine)
    intake = VmIntake(VmAcceptance(private_engine), publisher, marks)  # type: ignore[arg-type]
    project = await new_project(private_engine)

    answers = await asyncio.gather(*(intake.create(single(f"g{n}", project)) for n in range(20)))

    vm_ids = [answer.vms[0].id for answer in answers]
    assert len(set(vm_ids)) == 20
    # The VMs and their audit rows: one transaction (the published mark has not run: the gate is shut).
    async with private_engine.connect() as connection:
        audit_ids = [
            row[0] for row in await connection.execute(text("SELECT id FROM audit WHERE project = :p"), {"p": project})
        ]
    inserted = await transactions_of(private_engine, "vms", vm_ids)
    assert len(inserted) == 1
    assert await transactions_of(private_engine, "audit", audit_ids) == inserted
    assert sorted(await audit_rows(private_engine, project)) == sorted((202, f"/v1/vms/{vm}") for vm in vm_ids)

    gate.set()
    await intake.drain()
    await marks.drain()
    wanted = {str(vm) for vm in vm_ids}
    await vm_creates.wait(lambda message: bool(vm_ids_in(vm_creates, wanted)), timeout=10)
    assert [sorted(ids) for ids in vm_ids_in(vm_creates, wanted)] == [sorted(wanted)]  # one message, all 20
    marked = await transactions_of(private_engine, "vms", vm_ids)
    assert len(marked) == 1  # one published mark for the group...
    assert marked != inserted  # ...written after the confirm, apart from the insert
    async with private_engine.connect() as connection:
        unmarked = await connection.scalar(
            text("SELECT count(*) FROM vms WHERE id = ANY(:ids) AND published_at IS NULL"), {"ids": vm_ids}
        )
    assert unmarked == 0


async def test_a_refusal_fails_its_request_alone_and_is_audited_in_the_groups_transaction(
    private_engine: AsyncEngine,
) -> None:
    acceptance = VmAcceptance(private_engine)
    project = await new_project(private_engine)
    (first_a,) = await acceptance.accept([single("keyed-a", project, key="key-a")])
    (first_b,) = await acceptance.accept([single("keyed-b", project, key="key-b")])

    outcomes = await acceptance.accept(
        [
            single("ok-1", project),
            single("grouped", project, server_group=str(uuid.uuid4())),
            single("keyed-a", project, key="key-a"),  # the same body again: the earlier VM
            single("other-body", project, key="key-b"),  # another body under a used key
            single("ok-2", project),
        ]
    )

    ok_1, no_group, replay, conflict, ok_2 = outcomes
    assert isinstance(no_group, UnknownServerGroup)
    assert isinstance(conflict, IdempotencyConflict)
    assert accepted(replay).replayed
    assert accepted(replay).vms[0].id == accepted(first_a).vms[0].id
    assert not accepted(ok_1).replayed
    assert not accepted(ok_2).replayed
    async with private_engine.connect() as connection:
        names = sorted(
            row[0] for row in await connection.execute(text("SELECT name FROM vms WHERE project = :p"), {"p": project})
        )
    assert names == ["keyed-a", "keyed-b", "ok-1", "ok-2"]  # the refused requests inserted nothing
    trail = await audit_rows(private_engine, project)
    assert [status for status, _ in trail] == [202, 202, 202, 422, 202, 409, 202]
    assert trail[-1] == (202, f"/v1/vms/{accepted(ok_2).vms[0].id}")
    assert accepted(first_b).vms[0].name == "keyed-b"


async def test_a_projects_quota_admits_the_groups_requests_in_their_order(private_engine: AsyncEngine) -> None:
    acceptance = VmAcceptance(private_engine)
    limited = await new_project(private_engine, instances=2)
    free = await new_project(private_engine)

    outcomes = await acceptance.accept(
        [single("l1", limited), single("f1", free), single("l2", limited), single("l3", limited), single("f2", free)]
    )

    l1, f1, l2, l3, f2 = outcomes
    assert [vm.name for o in (l1, f1, l2, f2) for vm in accepted(o).vms] == ["l1", "f1", "l2", "f2"]
    assert isinstance(l3, QuotaExceeded)
    assert l3.answer() == {"reason": "quota_exceeded", "resource": "instances", "limit": 2, "used": 2, "requested": 1}
    assert [status for status, _ in await audit_rows(private_engine, limited)] == [202, 202, 403]
    # The same quota, requests now one by one: nothing more fits.
    (again,) = await acceptance.accept([single("l4", limited)])
    assert isinstance(again, QuotaExceeded)


async def test_an_idempotency_key_holds_across_the_requests_of_one_group(private_engine: AsyncEngine) -> None:
    acceptance = VmAcceptance(private_engine)
    project = await new_project(private_engine)

    first, retry, other = await acceptance.accept(
        [single("twice", project, key="k"), single("twice", project, key="k"), single("changed", project, key="k")]
    )

    assert not accepted(first).replayed
    assert accepted(retry).replayed
    assert accepted(retry).vms[0].id == accepted(first).vms[0].id
    assert isinstance(other, IdempotencyConflict)
    async with private_engine.connect() as connection:
        count = await connection.scalar(text("SELECT count(*) FROM vms WHERE project = :p"), {"p": project})
    assert count == 1


class Crashing:
    """A publisher whose process dies after the commit, before the broker confirmed: it never answers."""

    async def vm_create(self, vms: Sequence[VmToPlace]) -> None:
        await asyncio.Event().wait()


async def test_a_crash_between_the_commit_and_the_publish_is_recovered_by_the_outbox_sweep(
    private_engine: AsyncEngine, broker: RabbitBroker, vm_creates: Tap
) -> None:
    publisher: object = Crashing()
    intake = VmIntake(VmAcceptance(private_engine), publisher, published_marks(private_engine))  # type: ignore[arg-type]
    answers = await asyncio.gather(*(intake.create(single(f"c{n}", key=None)) for n in range(5)))
    vm_ids = {str(answer.vms[0].id) for answer in answers}
    # The "crash": the publish is cut off; the rows stay committed and unmarked.
    for task in list(intake._publishing):
        task.cancel()
    await asyncio.gather(*intake._publishing, return_exceptions=True)

    # Another replica's sweeper, once the rows are older than VMSCHED_REPUBLISH_AFTER (here 0).
    async def sweep() -> set[str]:
        await republish_unpublished(Publisher(broker), private_engine, older_than=0, stale_after=120)
        return {vm for ids in vm_ids_in(vm_creates, vm_ids) for vm in ids}

    await eventually(sweep, lambda seen: seen == vm_ids, timeout=20, what="the sweeper to publish the 5 VMs")
    async with private_engine.connect() as connection:
        unmarked = await connection.scalar(
            text("SELECT count(*) FROM vms WHERE id = ANY(CAST(:ids AS uuid[])) AND published_at IS NULL"),
            {"ids": sorted(vm_ids)},
        )
    assert unmarked == 0


def batch(names: Sequence[str], project: str = "default") -> CreateRequest:
    bodies = [VmRequest(name=name, cpu=1, memory_mb=512, disk_gb=1) for name in names]
    stub = AuditStub(token_id=None, project=project, action="POST /v1/vms/batch", path="/v1/vms/batch")
    return CreateRequest(bodies=bodies, project=project, defaults=DEFAULTS, audit=stub, single=False)


async def test_a_groups_single_vms_share_a_vm_create_and_each_batch_keeps_its_own(
    private_engine: AsyncEngine, broker: RabbitBroker, vm_creates: Tap
) -> None:
    """One scheduler decides one message: a group of batches sent as one would leave the other
    replicas idle, so each batch travels as it would alone."""
    intake = VmIntake(VmAcceptance(private_engine), Publisher(broker), published_marks(private_engine))
    answers = await asyncio.gather(
        *(intake.create(single(f"s{n}")) for n in range(3)),
        intake.create(batch(["a1", "a2"])),
        intake.create(batch(["b1", "b2", "b3"])),
    )
    await intake.drain()
    names = {str(vm.id): vm.name for answer in answers for vm in answer.vms}
    wanted = set(names)
    await eventually(
        lambda: asyncio.sleep(0, vm_ids_in(vm_creates, wanted)),
        lambda found: sum(len(ids) for ids in found) == len(wanted),
        timeout=10,
        what="the group's vm.create messages",
    )
    messages = sorted(sorted(names[vm] for vm in ids) for ids in vm_ids_in(vm_creates, wanted))
    assert messages == [["a1", "a2"], ["b1", "b2", "b3"], ["s0", "s1", "s2"]]
