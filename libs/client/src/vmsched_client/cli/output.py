"""How the CLI shows things: a table for people (default), JSON for scripts (``-o json``); progress on stderr."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from vmsched_contract.api import Host, Project, Reservation, ServerGroup, Token, Vm
from vmsched_contract.rebalance import MoveState, PlannedMove, RebalancePlan
from vmsched_contract.storage import SharedPoolView
from vmsched_contract.whatif import HostCapacity, SimulatedVm


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"
    ID = "id"  # the ids alone, a line each: ID=$(vmsched vms create ... -o id)


def stdout() -> Console:
    # Made at each use: the console writes wherever sys.stdout is now (a test runner swaps it).
    return Console(highlight=False, soft_wrap=False)


def stderr() -> Console:
    # Soft wrap: a message is one line however long (a log or a script reads it whole), not folded at
    # 80 columns when stderr is no terminal.
    return Console(stderr=True, highlight=False, soft_wrap=True)


def progress() -> Progress:
    """A progress bar for --wait: on stderr, so that -o json keeps stdout for the answer alone."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=stderr(),
        transient=True,
    )


def to_json(value: BaseModel | Sequence[BaseModel] | dict[str, Any]) -> str:
    if isinstance(value, BaseModel):
        return value.model_dump_json(indent=2)
    if isinstance(value, dict):
        return json.dumps(value, indent=2, default=str)
    return json.dumps([item.model_dump(mode="json") for item in value], indent=2)


Column = tuple[str, Callable[[Any], object]]


def _used(used: int, of: int) -> str:
    return f"{used}/{of}"


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


VM_COLUMNS: list[Column] = [
    ("ID", lambda vm: vm.id),
    ("NAME", lambda vm: vm.name),
    ("STATUS", lambda vm: vm.status.value),
    ("HOST", lambda vm: vm.hypervisor_id or "-"),
    ("CPU", lambda vm: vm.cpu),
    ("MEMORY MiB", lambda vm: vm.memory_mb),
    ("DISK GB", lambda vm: vm.disk_gb),
    ("PROJECT", lambda vm: vm.project),
    ("REASON", lambda vm: vm.status_reason or ""),
]
HOST_COLUMNS: list[Column] = [
    ("ID", lambda host: host.id),
    ("STATUS", lambda host: host.status.value),
    ("CORDONED", lambda host: "yes" if host.scheduling_paused else "no"),
    ("CPU", lambda host: _used(host.allocated.cpu, host.capacity.cpu)),
    ("MEMORY MiB", lambda host: _used(host.allocated.memory_mb, host.capacity.memory_mb)),
    ("DISK GB", lambda host: _used(host.allocated.disk_gb, host.capacity.disk_gb)),
    ("GPU", lambda host: _used(host.allocated.gpu, host.capacity.gpu)),
    ("VMS", lambda host: host.vm_count),
    ("LABELS", lambda host: _labels(host.labels)),
    ("NETWORKS", lambda host: ",".join(host.networks)),
    ("DEDICATED TO", lambda host: host.dedicated_to or ""),
]
GROUP_COLUMNS: list[Column] = [
    ("ID", lambda group: group.id),
    ("NAME", lambda group: group.name),
    ("POLICY", lambda group: group.policy.value),
    ("TOPOLOGY", lambda group: group.topology_key),
    ("MEMBERS", lambda group: len(group.members)),
    ("PROJECT", lambda group: group.project),
]


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


PROJECT_COLUMNS: list[Column] = [
    ("NAME", lambda project: project.name),
    ("VMS", lambda project: f"{project.usage.instances}/{_limit(project.quota.instances)}"),
    ("CPU", lambda project: f"{project.usage.cpu}/{_limit(project.quota.cpu)}"),
    ("MEMORY MiB", lambda project: f"{project.usage.memory_mb}/{_limit(project.quota.memory_mb)}"),
    ("DISK GB", lambda project: f"{project.usage.disk_gb}/{_limit(project.quota.disk_gb)}"),
    ("GPU", lambda project: f"{project.usage.gpu}/{_limit(project.quota.gpu)}"),
]
TOKEN_COLUMNS: list[Column] = [
    ("ID", lambda token: token.id),
    ("NAME", lambda token: token.name),
    ("PROJECT", lambda token: token.project),
    ("SCOPES", lambda token: " ".join(scope.value for scope in token.scopes)),
    ("EXPIRES", lambda token: token.expires_at or "never"),
    ("REVOKED", lambda token: token.revoked_at or "-"),
]
RESERVATION_COLUMNS: list[Column] = [
    ("ID", lambda reservation: reservation.id),
    ("PROJECT", lambda reservation: reservation.project),
    ("STATUS", lambda reservation: reservation.status.value),
    ("SLOTS", lambda reservation: reservation.count),
    ("HELD", lambda reservation: reservation.held),
    ("USED", lambda reservation: reservation.used),
    ("CPU", lambda reservation: reservation.cpu),
    ("MEMORY MiB", lambda reservation: reservation.memory_mb),
    ("DISK GB", lambda reservation: reservation.disk_gb),
    ("ENDS", lambda reservation: reservation.ends_at or "never"),
    ("HOSTS", lambda reservation: ",".join(reservation.hosts) or "-"),
    ("REASON", lambda reservation: reservation.status_reason or ""),
]

SIMULATED_COLUMNS: list[Column] = [
    ("#", lambda vm: vm.index),
    ("NAME", lambda vm: vm.name),
    ("HOST", lambda vm: vm.host or "-"),
    ("SCORE", lambda vm: "-" if vm.score is None else f"{vm.score:.3f}"),
    ("ELIGIBLE", lambda vm: f"{vm.eligible}/{vm.considered}"),
    ("REASON", lambda vm: vm.reason or "-"),
]
CAPACITY_COLUMNS: list[Column] = [
    ("HOST", lambda host: host.host),
    ("ZONE", lambda host: host.zone or "-"),
    ("FITS", lambda host: host.fits),
    ("REFUSED BY", lambda host: host.refused_by or "-"),
]
POOL_COLUMNS: list[Column] = [
    ("NAME", lambda pool: pool.name),
    ("ALLOCATED GB", lambda pool: f"{pool.allocated_gb}/{pool.capacity_gb}"),
    ("VMS", lambda pool: pool.vms),
    ("HOSTS", lambda pool: pool.hosts),
    ("TAGS", lambda pool: ",".join(pool.tags) or "-"),
]
MOVE_COLUMNS: list[Column] = [
    ("VM", lambda move: move.vm_id),
    ("FROM", lambda move: move.source),
    ("TO", lambda move: move.to),
    ("GAIN", lambda move: f"{move.gain:.4f}"),
    ("STATE", lambda move: move.state.value),
    ("REASON", lambda move: move.reason or ""),
]


def _moves(plan: RebalancePlan, state: MoveState) -> int:
    return plan.progress.get(state, 0)


PLAN_COLUMNS: list[Column] = [
    ("ID", lambda plan: plan.id),
    ("GOAL", lambda plan: plan.goal.value),
    ("STATE", lambda plan: plan.state.value),
    ("CREATED", lambda plan: plan.created_at.astimezone().strftime("%Y-%m-%d %H:%M:%S")),
    # Made or skipped, of all: what is left is queued or in flight.
    ("DONE", lambda plan: f"{_moves(plan, MoveState.MOVED) + _moves(plan, MoveState.SKIPPED)}/{len(plan.moves)}"),
    ("MOVED", lambda plan: _moves(plan, MoveState.MOVED)),
    ("IN FLIGHT", lambda plan: _moves(plan, MoveState.IN_FLIGHT)),
    ("QUEUED", lambda plan: _moves(plan, MoveState.QUEUED)),
    ("SKIPPED", lambda plan: _moves(plan, MoveState.SKIPPED)),
    ("SCORE", lambda plan: f"{plan.score_before:.4f} -> {plan.score_after:.4f}"),
]

COLUMNS: dict[type[BaseModel], list[Column]] = {
    Vm: VM_COLUMNS,
    Host: HOST_COLUMNS,
    ServerGroup: GROUP_COLUMNS,
    Project: PROJECT_COLUMNS,
    Token: TOKEN_COLUMNS,
    Reservation: RESERVATION_COLUMNS,
    SimulatedVm: SIMULATED_COLUMNS,
    HostCapacity: CAPACITY_COLUMNS,
    PlannedMove: MOVE_COLUMNS,
    RebalancePlan: PLAN_COLUMNS,
    SharedPoolView: POOL_COLUMNS,
}


def table(columns: list[Column], rows: Iterable[Any]) -> Table:
    shown = Table(box=None, pad_edge=False, header_style="bold")
    for index, (name, _) in enumerate(columns):
        # Only the last column (a reason, labels, free text) folds when the terminal is narrow: ids
        # and numbers stay whole, one line per row.
        last = index == len(columns) - 1
        shown.add_column(name, overflow="fold" if last else "ellipsis", no_wrap=not last)
    for row in rows:
        shown.add_row(*(str(cell(row)) for _, cell in columns))
    return shown


def details(model: BaseModel) -> Table:
    """One thing, a field a line."""
    shown = Table(box=None, pad_edge=False, show_header=False)
    shown.add_column(style="bold")
    shown.add_column(overflow="fold")
    for name, value in model.model_dump(mode="json").items():
        shown.add_row(name, value if isinstance(value, str) else json.dumps(value))
    return shown


def _key(item: BaseModel) -> str:
    """What commands take to name the thing: its id (a project's name)."""
    return str(getattr(item, "id", None) or getattr(item, "name", ""))


def show_list(output: Format, model: type[BaseModel], items: Sequence[BaseModel]) -> None:
    if output is Format.JSON:
        print(to_json(items))
    elif output is Format.ID:
        for item in items:
            print(_key(item))
    else:
        stdout().print(table(COLUMNS[model], items))


def show_one(output: Format, item: BaseModel) -> None:
    if output is Format.JSON:
        print(to_json(item))
    elif output is Format.ID:
        print(_key(item))
    else:
        stdout().print(details(item))
