"""The cell table: each cell's API client and its last summary, refreshed every few seconds.

A cell whose summary could not be read at the last refresh has none (``summary`` None): it is
skipped for new VMs until it answers again, and /readyz names it. VMs already in it are still
routed to it (its API may answer even when its summary does not).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import httpx

from vmsched_contract.cells import CellSummary
from vmsched_router import metrics
from vmsched_runtime.logs import get_logger
from vmsched_runtime.settings import CellEndpoint

log = get_logger("vmsched_router")


@dataclass
class Cell:
    endpoint: CellEndpoint
    client: httpx.AsyncClient
    summary: CellSummary | None = None
    problem: str | None = "not read yet"
    read_at: float | None = None  # monotonic seconds of the last summary read

    @property
    def name(self) -> str:
        return self.endpoint.name


@dataclass
class CellTable:
    cells: dict[str, Cell] = field(default_factory=dict)

    @classmethod
    def of(cls, endpoints: Sequence[CellEndpoint], timeout: float) -> CellTable:
        return cls(
            {
                endpoint.name: Cell(
                    endpoint,
                    httpx.AsyncClient(base_url=endpoint.base_url, timeout=timeout, follow_redirects=False),
                )
                for endpoint in endpoints
            }
        )

    def summaries(self) -> Mapping[str, CellSummary | None]:
        return {name: cell.summary for name, cell in self.cells.items()}

    def up(self) -> list[Cell]:
        return [cell for cell in self.cells.values() if cell.summary is not None]

    async def refresh_one(self, cell: Cell) -> None:
        token = cell.endpoint.token.get_secret_value()
        try:
            answer = await cell.client.get("/v1/summary", headers={"Authorization": f"Bearer {token}"})
            answer.raise_for_status()
            summary = CellSummary.model_validate_json(answer.content)
        except Exception as error:  # the cell is skipped until it answers again
            if cell.problem is None:
                log.warning("cell unreachable: skipped for new VMs", cell=cell.name, error=repr(error))
            cell.summary = None
            cell.problem = f"unreachable: {type(error).__name__}"
            metrics.CELL_UP.labels(cell.name).set(0)
            return
        if cell.problem is not None:
            log.info("cell summary read", cell=cell.name, hosts=summary.hosts, load=round(summary.load(), 3))
        cell.summary = summary
        cell.problem = None
        cell.read_at = time.monotonic()
        metrics.CELL_UP.labels(cell.name).set(1)
        metrics.CELL_LOAD.labels(cell.name).set(summary.load())
        metrics.CELL_WAITING.labels(cell.name).set(summary.waiting)

    async def refresh(self) -> None:
        await asyncio.gather(*(self.refresh_one(cell) for cell in self.cells.values()))

    async def refresh_forever(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await self.refresh()

    async def close(self) -> None:
        await asyncio.gather(*(cell.client.aclose() for cell in self.cells.values()), return_exceptions=True)
