"""The gateway's duty for drains (POST /v1/hosts/{id}/drain): every second, each active drain takes
its next step (:meth:`vmsched_common.db.drains.DrainStore.sweep`), and the migrations it started are
announced to the schedulers. A ``vm.migrate`` lost here is sent again by the task sweep
(:mod:`vmsched_gateway.tasks`), as one the API failed to publish."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from vmsched_common.db.drains import DrainStore
from vmsched_common.db.moves import announce_migration
from vmsched_common.logs import get_logger
from vmsched_common.publishing import Publisher

log = get_logger("vmsched_gateway")


@dataclass
class DrainSweep:
    store: DrainStore
    publisher: Publisher

    async def once(self) -> int:
        """One step of every active drain; returns how many migrations it started."""
        started = await self.store.sweep()
        for vm in started:
            try:
                await announce_migration(self.publisher, vm)
            except Exception as error:  # the task sweep sends it again once VMSCHED_RESEND_STALE_AFTER passed
                log.warning("vm.migrate of a drain not published", vm_id=str(vm.id), error=repr(error))
        if started:
            log.info(
                "drain: migrations started", count=len(started), hosts=sorted({str(v.hypervisor_id) for v in started})
            )
        return len(started)

    async def forever(self, interval: float = 1.0) -> None:
        while True:
            try:
                await self.once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a server hiccup must not end the duty; the next round retries
                log.warning("drain sweep failed", error=repr(error))
            await asyncio.sleep(interval)
