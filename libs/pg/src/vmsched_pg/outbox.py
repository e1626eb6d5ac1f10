"""Publishing what a committed VM row implies, and remembering that it was published.

A row's ``published_at`` stays NULL until the broker confirmed the message its status implies
(``vm.create`` for pending, the delete command for deleting). Whoever commits a row publishes right
after the commit; if that publish fails, or the process dies in between, the sweeper
(:func:`republish_unpublished`) finds the row and publishes again. Consumers are idempotent, so a
message sent twice does no harm; a message never sent would leave the VM pending forever.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Protocol

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_contract.messages import AgentCommand, VmToPlace
from vmsched_contract.status import VmStatus
from vmsched_domain.implied_messages import implied_messages
from vmsched_domain.lifecycle import IMPLIES_MESSAGE, sql_in
from vmsched_domain.records import VmRecord
from vmsched_pg.engine import lone_statement, retry_on_dead_connection
from vmsched_pg.rows import VM_COLUMNS, vm_from_row
from vmsched_runtime.batching import Batcher
from vmsched_runtime.logs import get_logger

log = get_logger(__name__)

UNANSWERED = tuple(status.value for status in VmStatus if status in IMPLIES_MESSAGE)

# Rows are locked in id order, as every writer of several VMs does (see the scheduler's ledger), and
# found by id alone: the status is checked on the locked row (a status condition in the lookup can
# lead the planner to walk every pending VM).
_MARK_PUBLISHED = text(
    f"""
    WITH target AS (
        SELECT id, status FROM vms WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY id FOR UPDATE
    )
    UPDATE vms SET published_at = now()
      FROM target
     WHERE vms.id = target.id AND target.status IN {sql_in(UNANSWERED)}
    """
)
_UNPUBLISHED = text(
    f"""
    SELECT {VM_COLUMNS} FROM vms
     WHERE status IN {sql_in(UNANSWERED)}
       AND ((published_at IS NULL AND updated_at < now() - make_interval(secs => :age))
            OR (CAST(:resend_stale AS boolean) AND published_at < now() - make_interval(secs => :stale)))
     ORDER BY coalesce(published_at, updated_at) LIMIT :limit
    """
)


_GANG_MEMBERS = text(
    f"SELECT {VM_COLUMNS} FROM vms WHERE gang_id = ANY(CAST(:gangs AS uuid[])) AND status = '{VmStatus.PENDING.value}'"
)


class OutboxPublisher(Protocol):
    """What the outbox sends through (``vmsched_amqp.publishing.Publisher`` is one)."""

    async def vm_create(self, vms: Sequence[VmToPlace]) -> None: ...

    async def command(self, host_id: str, command: AgentCommand) -> None: ...


async def publish_implied(publisher: OutboxPublisher, rows: Sequence[VmRecord]) -> None:
    """Send the message each row's status implies (:mod:`vmsched_domain.implied_messages`), all at
    once: the pending ones in as few ``vm.create`` as fit (an all-or-nothing batch's in one of its
    own: a scheduler decides a gang from one message), a delete command for each deleting one."""
    implied = implied_messages(rows, time.time())
    sends = [publisher.command(host_id, command) for host_id, command in implied.deletes]
    sends += [publisher.vm_create(vms) for vms in implied.creates]
    await asyncio.gather(*sends)


PublishedMarks = Batcher[list[str], None]


def published_marks(engine: AsyncEngine) -> PublishedMarks:
    """Records of confirmed publishes, shared by concurrent callers: the API's single POSTs each
    publish one row, and at hundreds a second one UPDATE every few milliseconds replaces one
    transaction per request. Drain it on shutdown."""

    @retry_on_dead_connection
    async def mark(batches: list[list[str]]) -> list[None]:
        async with lone_statement(engine) as connection:
            await connection.execute(_MARK_PUBLISHED, {"ids": [vm_id for ids in batches for vm_id in ids]})
        return [None] * len(batches)

    return Batcher(mark, name="published_marks", max_size=256, max_delay=0.003)


async def publish_rows(
    publisher: OutboxPublisher, engine: AsyncEngine, rows: Sequence[VmRecord], *, marks: PublishedMarks | None = None
) -> None:
    """Publish each row's message with confirms, then record them all as published (through
    ``marks`` when given, else in a transaction of its own).

    All at once: the broker confirms a stream of messages about as fast as one, so a batch of 1,000
    costs one wait instead of 1,000. If one fails, none is marked; the sweeper sends them again."""
    await publish_implied(publisher, rows)
    done = [str(vm.id) for vm in rows]
    if not done:
        return
    if marks is not None:
        await marks.submit(done)
        return
    async with engine.begin() as connection:
        await connection.execute(_MARK_PUBLISHED, {"ids": done})


async def republish_unpublished(
    publisher: OutboxPublisher,
    engine: AsyncEngine,
    *,
    older_than: float,
    stale_after: float,
    resend_stale: bool = True,
    limit: int = 500,
) -> int:
    """One sweep: publish rows whose message was never confirmed (older than ``older_than``), and,
    with ``resend_stale``, those confirmed ``stale_after`` seconds ago and still not acted on.
    Returns how many."""
    params = {"age": older_than, "stale": stale_after, "resend_stale": resend_stale, "limit": limit}
    async with engine.connect() as connection:
        rows = (await connection.execute(_UNPUBLISHED, params)).all()
    vms = [vm_from_row(row) for row in rows]
    gangs = sorted({vm.gang_id for vm in vms if vm.gang_id is not None and vm.status is VmStatus.PENDING})
    if gangs:  # a gang goes out whole, whichever of its VMs the limit let in
        async with engine.connect() as connection:
            members = [vm_from_row(row) for row in await connection.execute(_GANG_MEMBERS, {"gangs": gangs})]
        seen = {vm.id for vm in vms}
        vms += [vm for vm in members if vm.id not in seen]
    if vms:
        log.warning("publishing messages left unpublished or unanswered", count=len(vms))
        await publish_rows(publisher, engine, vms)
    return len(vms)
