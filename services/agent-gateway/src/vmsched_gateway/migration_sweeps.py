"""The gateway's duty for the work that moves VMs in steps: drains (POST /v1/hosts/{id}/drain) and
rebalancing plans being applied (POST /v1/rebalance/plans/{id}/apply). Every second each active one
takes its next step (its store's ``sweep``: :class:`vmsched_pg.drains.DrainStore`,
:class:`vmsched_pg.rebalance_plans.RebalanceStore`), and the migrations it started are announced to
the schedulers. A ``vm.migrate`` lost here is sent again by the task sweep
(:mod:`vmsched_gateway.tasks`), as one the API failed to publish."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol

from vmsched_amqp import events
from vmsched_amqp.publishing import Publisher
from vmsched_domain import live_migration
from vmsched_domain.records import VmRecord
from vmsched_runtime.logs import get_logger

log = get_logger("vmsched_gateway")


class SteppedMoves(Protocol):
    async def sweep(self) -> list[VmRecord]:
        """One step of each active one; the VMs whose migration it started (committed)."""
        ...


@dataclass
class MigrationSweep:
    name: str  # what it carries out, for the logs: "drain", "rebalance"
    store: SteppedMoves
    publisher: Publisher

    async def once(self) -> int:
        """One step of every active one; returns how many migrations it started."""
        started = await self.store.sweep()
        for vm in started:
            try:
                await self.publisher.publish(events.VM_MIGRATE, live_migration.request_of(vm, time.time()))
            except Exception as error:  # the task sweep sends it again once VMSCHED_RESEND_STALE_AFTER passed
                log.warning(f"vm.migrate of a {self.name} not published", vm_id=str(vm.id), error=repr(error))
        if started:
            log.info(
                f"{self.name}: migrations started",
                count=len(started),
                hosts=sorted({str(v.hypervisor_id) for v in started}),
            )
        return len(started)

    async def forever(self, interval: float = 1.0) -> None:
        while True:
            try:
                await self.once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a server hiccup must not end the duty; the next round retries
                log.warning(f"{self.name} sweep failed", error=repr(error))
            await asyncio.sleep(interval)
