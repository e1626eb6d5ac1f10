"""``vmsched simulate`` and ``vmsched capacity``: where VMs would land on the fleet as it is now,
and how many more fit; nothing is placed."""

from __future__ import annotations

from typing import Annotated

import typer

from vmsched_client.cli.command import command, fail, state
from vmsched_client.cli.exit_codes import ExitCode
from vmsched_client.cli.options import (
    CpuOption,
    DiskOption,
    GpuOption,
    HostLabelOption,
    MemoryOption,
    NetworkOption,
    vm_shape,
)
from vmsched_client.cli.output import Format, show_list, stdout, to_json
from vmsched_contract.api import VmRequest
from vmsched_contract.strategy import Strategy
from vmsched_contract.whatif import HostCapacity, SimulatedVm, SimulationRequest

commands = typer.Typer()  # merged into the root app: `vmsched simulate`, `vmsched capacity`


@command(commands, "simulate")
def simulate(
    name: Annotated[str, typer.Argument(help="the imagined VMs' name (with --count: the names' prefix)")],
    cpu: CpuOption = None,
    memory_mb: MemoryOption = None,
    disk_gb: DiskOption = 0,
    gpu: GpuOption = 0,
    label: HostLabelOption = [],  # noqa: B006
    network: NetworkOption = [],  # noqa: B006
    count: Annotated[int, typer.Option(min=1, max=1000, help="this many (NAME-1..NAME-N), placed in order")] = 1,
    without: Annotated[list[str], typer.Option("--without", help="leave this host out, as if gone")] = [],  # noqa: B006
    strategy_name: Annotated[Strategy | None, typer.Option("--strategy", help="instead of the default")] = None,
) -> None:
    """Where VMs would land on the fleet as it is now, and why not (POST /v1/placement/simulate);
    nothing is placed. Exit 7 when one would not fit."""
    asked = vm_shape(cpu, memory_mb, disk_gb, gpu, label, network)
    names = [name] if count == 1 else [f"{name}-{n}" for n in range(1, count + 1)]
    request = SimulationRequest(
        vms=[VmRequest(name=each, **asked) for each in names], without_hosts=without, strategy=strategy_name
    )
    answer = state().client().simulate(request)
    if state().output is Format.JSON:
        print(to_json(answer))
    else:
        show_list(state().output, SimulatedVm, answer.placements)
    if answer.unplaced:
        raise fail(f"{answer.unplaced} of {len(names)} would not fit", ExitCode.NOT_PLACED)


@command(commands, "capacity")
def capacity(
    cpu: CpuOption = None,
    memory_mb: MemoryOption = None,
    disk_gb: DiskOption = 0,
    gpu: GpuOption = 0,
    network: NetworkOption = [],  # noqa: B006
) -> None:
    """How many more VMs of this shape the fleet takes now: per host, then per zone and in total."""
    answer = state().client().capacity(cpu=cpu, memory_mb=memory_mb, disk_gb=disk_gb, gpu=gpu, networks=network)
    if state().output is not Format.TABLE:
        print(to_json(answer))
        return
    show_list(state().output, HostCapacity, answer.hosts)
    zones = ", ".join(f"{zone.zone or '(no zone)'} {zone.fits}" for zone in answer.zones)
    stdout().print(f"total {answer.total}" + (f" ({zones})" if zones else ""), markup=False)
