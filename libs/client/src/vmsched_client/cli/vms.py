"""``vmsched vms``: ask for VMs, list them, see why they went where they went, stop, start, move
and delete them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any
from uuid import UUID

import typer

from vmsched_client import PLACED, Client
from vmsched_client.cli.command import command, fail, state, sub_app
from vmsched_client.cli.exit_codes import ExitCode
from vmsched_client.cli.options import (
    CpuOption,
    DiskOption,
    GpuOption,
    HostLabelOption,
    IdArgument,
    MemoryOption,
    NetworkOption,
    TimeoutOption,
    VolumeOption,
    vm_shape,
    volumes,
)
from vmsched_client.cli.output import Format, progress, show_list, show_one, stdout, to_json
from vmsched_client.cli.why import explain
from vmsched_contract.api import Vm, VmBatchRequest, VmRequest
from vmsched_contract.planner import Planner
from vmsched_contract.status import VmStatus
from vmsched_contract.strategy import Strategy

commands = sub_app("Ask for VMs, list them, see why they went where they went.")


@command(commands, "create")
def create_vm(
    name: Annotated[str, typer.Argument(help="the VM's name (with --count: the names' prefix)")],
    cpu: CpuOption = None,
    memory_mb: MemoryOption = None,
    disk_gb: DiskOption = 0,
    gpu: GpuOption = 0,
    label: HostLabelOption = [],  # noqa: B006
    network: NetworkOption = [],  # noqa: B006
    dedicated: Annotated[bool, typer.Option(help="only on a host dedicated to its project")] = False,
    planner: Annotated[Planner | None, typer.Option(help="flat, or cluster_first (default: VMSCHED_PLANNER)")] = None,
    volume: VolumeOption = [],  # noqa: B006
    strategy_name: Annotated[Strategy | None, typer.Option("--strategy", help="overrides the default")] = None,
    priority: Annotated[int, typer.Option(help="0..1000; may preempt VMs of lower priority")] = 0,
    wait_s: Annotated[int | None, typer.Option(help="seconds it may wait for room (status waiting)")] = None,
    server_group: Annotated[UUID | None, typer.Option(help="join this server group")] = None,
    reservation: Annotated[UUID | None, typer.Option(help="take a slot of this reservation of its project")] = None,
    count: Annotated[int, typer.Option(min=1, max=1000, help="ask for this many (NAME-1..NAME-N), in one batch")] = 1,
    all_or_nothing: Annotated[bool, typer.Option(help="with --count: place all of them or none")] = False,
    wait: Annotated[bool, typer.Option(help="wait until a scheduler has placed it (a progress bar)")] = False,
    timeout: TimeoutOption = 120.0,
) -> None:
    """Ask for a VM (or --count of them); with --wait, exit 7 unless every one is placed."""
    chosen = state()
    asked: dict[str, Any] = vm_shape(cpu, memory_mb, disk_gb, gpu, label, network) | {"priority": priority}
    if volume:
        asked["volumes"] = volumes(volume)
    optional = {
        "strategy": strategy_name,
        "planner": planner,
        "wait_s": wait_s,
        "server_group": server_group,
        "reservation": reservation,
    }
    if dedicated:
        asked["dedicated"] = True
    asked |= {key: value for key, value in optional.items() if value is not None}
    client = chosen.client()
    if count == 1:
        created = [client.create_vm(VmRequest(name=name, **asked))]
    else:
        batch = [VmRequest(name=f"{name}-{n}", **asked) for n in range(1, count + 1)]
        created = client.create_vms(VmBatchRequest(vms=batch, all_or_nothing=all_or_nothing))
    final = _wait_placed(client, created, timeout) if wait else created
    show_list(chosen.output, Vm, final)
    unplaced = [vm for vm in final if wait and vm.status not in PLACED]
    if unplaced:
        reasons = "; ".join(f"{vm.name} {vm.status.value}: {vm.status_reason or '-'}" for vm in unplaced[:3])
        raise fail(f"{len(unplaced)} of {len(final)} not placed ({reasons})", ExitCode.NOT_PLACED)


def _wait_placed(client: Client, created: list[Vm], timeout: float) -> list[Vm]:
    """Every VM polled until a scheduler is done with it, on a progress bar."""
    latest = {vm.id: vm for vm in created}
    with progress() as bar:
        task = bar.add_task("scheduling", total=len(created))
        for vm in created:
            bar.update(task, description=f"scheduling {vm.name}")
            latest[vm.id] = client.wait_for_vm(vm.id, timeout=timeout)
            bar.advance(task)
    return [latest[vm.id] for vm in created]


@command(commands, "list")
def list_vms(
    status: Annotated[VmStatus | None, typer.Option(help="only VMs of this status")] = None,
    host: Annotated[str | None, typer.Option(help="only VMs on this host")] = None,
    project: Annotated[str | None, typer.Option(help="admin: only this project's VMs")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="at most this many (default: every one)")] = None,
) -> None:
    """The VMs, oldest first (every page)."""
    found: list[Vm] = []
    for vm in state().client().list_vms(status=status, hypervisor_id=host, project=project):
        if limit is not None and len(found) >= limit:
            break
        found.append(vm)
    show_list(state().output, Vm, found)


@command(commands, "show")
def show_vm(vm_id: IdArgument) -> None:
    """One VM, every field."""
    show_one(state().output, state().client().get_vm(vm_id))


@command(commands, "why")
def why_vm(vm_id: IdArgument) -> None:
    """Why the VM went where it went, or nowhere: the chosen host and its score, then the hosts
    rejected, grouped by rule, with the numbers."""
    client = state().client()
    placement = client.get_placement(vm_id)
    if state().output is Format.JSON:
        print(to_json(placement))
        return
    for line in explain(client.get_vm(vm_id), placement):
        stdout().print(line, markup=False)


@command(commands, "delete")
def delete_vm(
    vm_id: IdArgument,
    wait: Annotated[bool, typer.Option(help="wait until its agent has deleted it")] = False,
    timeout: TimeoutOption = 120.0,
) -> None:
    """Delete a VM (its agent is told; its capacity is released when done)."""
    client = state().client()
    vm = client.delete_vm(vm_id)
    if wait:
        with progress() as bar:
            task = bar.add_task(f"deleting {vm.name}", total=1)
            vm = client.wait_for_vm(vm_id, until=lambda v: v.status is VmStatus.DELETED, timeout=timeout)
            bar.advance(task)
    show_one(state().output, vm)


def _settled(vm_id: UUID, what: str, done: Callable[[Vm], bool], timeout: float) -> Vm:
    """Wait (a progress line on stderr) until the VM's agent has done what it was asked."""
    with progress() as bar:
        task = bar.add_task(what, total=1)
        vm = state().client().wait_for_vm(vm_id, until=lambda v: v.task is None and done(v), timeout=timeout)
        bar.advance(task)
    return vm


@command(commands, "stop")
def stop_vm(
    vm_id: IdArgument,
    wait: Annotated[bool, typer.Option(help="wait until its agent has stopped it")] = False,
    timeout: TimeoutOption = 120.0,
) -> None:
    """Power a running VM off; it keeps its room on its host (exit 5 when it is not running)."""
    vm = state().client().stop_vm(vm_id)
    if wait:
        vm = _settled(vm_id, f"stopping {vm.name}", lambda v: v.status is VmStatus.STOPPED, timeout)
    show_one(state().output, vm)


@command(commands, "start")
def start_vm(
    vm_id: IdArgument,
    wait: Annotated[bool, typer.Option(help="wait until its agent has started it")] = False,
    timeout: TimeoutOption = 120.0,
) -> None:
    """Power a stopped VM on (exit 5 when it is not stopped)."""
    vm = state().client().start_vm(vm_id)
    if wait:
        vm = _settled(vm_id, f"starting {vm.name}", lambda v: v.status is VmStatus.RUNNING, timeout)
    show_one(state().output, vm)


@command(commands, "migrate")
def migrate_vm(
    vm_id: IdArgument,
    to: Annotated[
        str | None, typer.Option("--to", help="target host (hosts:admin); default: the scheduler chooses")
    ] = None,
    wait: Annotated[bool, typer.Option(help="wait until the migration ended (moved or rolled back)")] = False,
    timeout: TimeoutOption = 300.0,
) -> None:
    """Move a running VM to another host, live; it runs on its source until the target runs it.
    With --wait, exit 7 when the migration was rolled back (the VM still runs on its source)."""
    vm = state().client().migrate_vm(vm_id, target_host=to)
    if wait:
        source = vm.hypervisor_id
        vm = _settled(vm_id, f"migrating {vm.name}", lambda v: v.status is not VmStatus.MIGRATING, timeout)
        if vm.hypervisor_id == source:
            show_one(state().output, vm)
            raise fail(f"VM {vm.id} was not moved: it runs on {source} still (vmsched vms why)", ExitCode.NOT_PLACED)
    show_one(state().output, vm)
