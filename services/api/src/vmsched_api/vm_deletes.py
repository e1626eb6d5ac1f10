"""Requests to delete VMs, grouped: one transaction for the requests in flight together.

One at a time, each ``DELETE`` cost a transaction of its own (lock, update, commit: three round
trips and a WAL flush), and under churn the API's deletes waited on PostgreSQL's commits while its
CPU idled. Here, as the creates do (:mod:`vmsched_api.vm_intake`), the requests that arrive while a
group is being written go together in the next: the group's rows are locked in id order, each
request's change is computed by the lifecycle (:func:`~vmsched_domain.vm_changes.delete_requested`)
on the VM as the requests before it in the group left it, and all are written in one statement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncEngine

from vmsched_amqp.failures import is_transient
from vmsched_domain.records import VmRecord
from vmsched_domain.vm_changes import Change, delete_requested
from vmsched_pg import vm_writes
from vmsched_pg.engine import retry_on_dead_connection
from vmsched_pg.rows import vm_from_row
from vmsched_runtime.batching import Batcher, each_alone_on_failure


@dataclass(frozen=True, slots=True)
class DeleteAsk:
    vm_id: UUID
    project: str | None  # the asker's project; None: any project's VM (an admin)


@dataclass(frozen=True, slots=True)
class Asked:
    """The VM as the request left it, and the change it made (None: it changed nothing)."""

    vm: VmRecord
    change: Change | None


def decide(found: Mapping[UUID, VmRecord], asks: Sequence[DeleteAsk]) -> tuple[list[Asked | None], list[Change]]:
    """Each request's answer (None: no such VM of its project), and the changes to write in order.
    A request sees the VM as the requests before it left it, as it would one after the other."""
    current = dict(found)
    answers: list[Asked | None] = []
    changes: list[Change] = []
    for ask in asks:
        vm = current.get(ask.vm_id)
        if vm is None or (ask.project is not None and vm.project != ask.project):
            answers.append(None)
            continue
        change = delete_requested(vm)
        if change is None:
            answers.append(Asked(vm, None))
            continue
        current[vm.id] = change.after
        changes.append(change)
        answers.append(Asked(change.after, change))
    return answers, changes


class VmDeletes:
    def __init__(self, engine: AsyncEngine, *, max_group: int = 256, max_in_flight: int = 3) -> None:
        self.engine = engine
        # No timer: a request that finds no group in flight starts one at once. A few groups at a time,
        # so that one waiting on a row locked elsewhere does not hold every delete behind it (groups
        # lock their rows in id order: they cannot deadlock each other). A request PostgreSQL refuses
        # fails alone, not with its group.
        self._groups: Batcher[DeleteAsk, Asked | None] = Batcher(
            partial(each_alone_on_failure, self._delete_group, everyones=is_transient),
            name="vm_deletes",
            max_size=max_group,
            max_delay=0.0,
            max_in_flight=max_in_flight,
        )

    async def request(self, vm_id: UUID, project: str | None) -> Asked | None:
        """The lifecycle's ``delete_requested``: a VM on a host goes ``deleting`` (its agent must
        act), one on none ``deleted`` at once. None if there is no such VM of ``project``."""
        return await self._groups.submit(DeleteAsk(vm_id, project))

    async def drain(self) -> None:
        await self._groups.drain()

    @retry_on_dead_connection
    async def _delete_group(self, asks: list[DeleteAsk]) -> list[Asked | None]:
        async with self.engine.begin() as connection:
            locked = await connection.execute(vm_writes.LOCK_VMS, {"ids": sorted({ask.vm_id for ask in asks})})
            found = {vm.id: vm for vm in map(vm_from_row, locked)}
            answers, changes = decide(found, asks)
            landed = {id(change) for change in await vm_writes.apply(connection, changes)}
        # The rows are locked, so every change lands; one that did not is answered as changing nothing.
        return [
            answer
            if answer is None or answer.change is None or id(answer.change) in landed
            else Asked(answer.change.before, None)
            for answer in answers
        ]
