"""The gateway's duty for rebalancing plans being applied (POST /v1/rebalance/plans/{id}/apply): every
second, each takes its next step (:meth:`vmsched_common.db.rebalance.RebalanceStore.sweep`) and the
migrations it started are announced to the schedulers, as a drain's are (``vmsched_gateway.drains``).
A ``vm.migrate`` lost here is sent again by the task sweep."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from vmsched_common.db.moves import announce_migration
from vmsched_common.db.rebalance import RebalanceStore
from vmsched_common.logs import get_logger
from vmsched_common.publishing import Publisher

log = get_logger("vmsched_gateway")


@dataclass
class RebalanceSweep:
    store: RebalanceStore
    publisher: Publisher

    async def once(self) -> int:
        """One step of every plan being applied; returns how many migrations it started."""
        started = await self.store.sweep()
        for vm in started:
            try:
                await announce_migration(self.publisher, vm)
            except Exception as error:  # the task sweep sends it again once VMSCHED_RESEND_STALE_AFTER passed
                log.warning("vm.migrate of a rebalance not published", vm_id=str(vm.id), error=repr(error))
        if started:
            log.info("rebalance: migrations started", count=len(started))
        return len(started)

    async def forever(self, interval: float = 1.0) -> None:
        while True:
            try:
                await self.once()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a server hiccup must not end the duty; the next round retries
                log.warning("rebalance sweep failed", error=repr(error))
            await asyncio.sleep(interval)
