"""What a cell tells the cell router about itself (``GET /v1/summary``): its capacity summarised per
label set, never per host (docs/scaling.md, "Cells"). The API computes it
(``vmsched_api.cell_summary``); the router reads it to choose a cell for each new VM."""

from __future__ import annotations

from pydantic import BaseModel, Field

Amounts = dict[str, int]


class LabelSetSummary(BaseModel):
    """The schedulable hosts of a cell that carry exactly these labels."""

    labels: dict[str, str]
    hosts: int
    free: Amounts = Field(description="summed over these hosts: what each may still take, per resource")
    largest: Amounts = Field(
        description="per resource, the most any one of these hosts may still take (taken separately per "
        "resource: the largest cpu and the largest memory may be on different hosts)"
    )


class CellSummary(BaseModel):
    """A cell's capacity, summarised for the cell router (``GET /v1/summary``)."""

    hosts: int = Field(description="every host the cell knows, whatever its status")
    schedulable_hosts: int = Field(description="hosts online with scheduling not paused")
    allocatable: Amounts = Field(description="what the schedulable hosts may hand out in all, per resource")
    free: Amounts = Field(description="what they may still hand out, per resource")
    waiting: int = Field(description="VMs waiting for room (status waiting)")
    label_sets: list[LabelSetSummary] = Field(description="the schedulable hosts grouped by their labels")

    def load(self) -> float:
        """How full the cell is, 0..1: the mean of its cpu and memory allocated shares (1 when it has
        no room at all), the number least-loaded choice compares."""
        shares = []
        for resource in ("cpu", "memory_mb"):
            total = self.allocatable.get(resource, 0)
            shares.append(1.0 if total <= 0 else 1.0 - min(self.free.get(resource, 0), total) / total)
        return sum(shares) / len(shares)
