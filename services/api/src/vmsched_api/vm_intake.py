"""Requests for VMs, grouped: one transaction, one ``vm.create`` and one published mark per group.

Most clients ask for one VM a request. Taken one at a time, each request cost a commit of its VM,
a confirmed publish, a commit of its published mark and one of its audit row; at 32 clients the
API's requests waited on each other's round trips while its CPU idled. Here the requests in
flight form a group (a group commit): the first request finding nothing in flight starts at once,
with no timer; those arriving meanwhile wait for it to end and go together, so groups grow with the
load by themselves. A group is accepted in one transaction (:mod:`vmsched_api.vm_acceptance`,
which writes the audit rows with the VMs), and each request is answered as soon as it commits.

The group's VMs are then published in the background (its single VMs in one ``vm.create``, each
batch's in messages of its own) and marked published in one statement once the broker confirmed
them. Answering before the confirm loses
nothing: the rows are committed, and the outbox sweeper publishes any row left unmarked (a broker
outage, a crash between the commit and the confirm) after ``VMSCHED_REPUBLISH_AFTER``. At most
``max_publishing`` groups wait for their confirm at a time; past that, new groups wait for room
(back-pressure on the clients, never unbounded memory).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from vmsched_amqp.publishing import Publisher
from vmsched_api.request_phases import Phase, observe, timed
from vmsched_api.vm_acceptance import Accepted, CreateRequest, Outcome, VmAcceptance
from vmsched_domain.records import VmRecord
from vmsched_pg.outbox import PublishedMarks, publish_implied
from vmsched_runtime.batching import Batcher
from vmsched_runtime.logs import get_logger

log = get_logger("vmsched_api")


@dataclass(frozen=True, slots=True)
class _Queued:
    request: CreateRequest
    at: float  # time.perf_counter() when it joined the queue


class VmIntake:
    def __init__(
        self,
        acceptance: VmAcceptance,
        publisher: Publisher,
        marks: PublishedMarks,
        *,
        max_group: int = 256,
        max_publishing: int = 64,
    ) -> None:
        self.acceptance = acceptance
        self.publisher = publisher
        self.marks = marks
        # No timer: a request that finds no group in flight starts one at once.
        self._groups: Batcher[_Queued, Outcome] = Batcher(
            self._accept_group, name="vm_requests", max_size=max_group, max_delay=0.0
        )
        self._publishing: set[asyncio.Task[None]] = set()
        self._room = asyncio.Semaphore(max_publishing)

    async def create(self, request: CreateRequest) -> Accepted:
        """The request's VMs, committed; raises the refusal that refused it alone
        (:data:`~vmsched_api.vm_acceptance.Refusal`), or what failed its whole group."""
        outcome = await self._groups.submit(_Queued(request, time.perf_counter()))
        if isinstance(outcome, Accepted):
            return outcome
        raise outcome

    async def _accept_group(self, queued: list[_Queued]) -> Sequence[Outcome]:
        started = time.perf_counter()
        for item in queued:
            observe(Phase.QUEUED, started - item.at)
        await self._room.acquire()  # released once the group's publish ended
        try:
            with timed(Phase.COMMIT, requests=len(queued)):
                outcomes = await self.acceptance.accept([item.request for item in queued])
        except BaseException:
            self._room.release()
            raise
        fresh = [o.vms for o in outcomes if isinstance(o, Accepted) and not o.replayed]
        task = asyncio.create_task(self._publish(fresh))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)
        return outcomes

    async def _publish(self, requests: list[list[VmRecord]]) -> None:
        """The single VMs of the group in one ``vm.create``; a batch's VMs in messages of their own,
        as they would travel alone: one scheduler decides a message, and a group of batches in one
        message would leave the other replicas idle."""
        vms = [vm for request in requests for vm in request]
        try:
            if not vms:
                return
            singles = [vm for request in requests if len(request) == 1 for vm in request]
            batches = [request for request in requests if len(request) > 1]
            with timed(Phase.PUBLISH, vms=len(vms)):
                await asyncio.gather(*(publish_implied(self.publisher, vms) for vms in (singles, *batches) if vms))
            with timed(Phase.MARK, vms=len(vms)):
                await self.marks.submit([str(vm.id) for vm in vms])
        except Exception as error:  # the rows stay unmarked: the sweeper publishes them
            log.warning("publish after commit failed; the sweeper will retry", error=repr(error), count=len(vms))
        finally:
            self._room.release()

    async def drain(self) -> None:
        """Accept what is queued and wait for every publish to end (graceful shutdown)."""
        await self._groups.drain()
        while self._publishing:
            await asyncio.gather(*self._publishing, return_exceptions=True)
