"""``vmsched hosts``: the fleet; list hosts, cordon them for maintenance, drain, fence and remove them."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from vmsched_client.cli.command import command, fail, state, sub_app
from vmsched_client.cli.exit_codes import ExitCode
from vmsched_client.cli.options import HostIdArgument
from vmsched_client.cli.output import progress, show_list, show_one, stderr
from vmsched_contract.api import Drain, DrainRequest, Host
from vmsched_contract.status import DrainState

commands = sub_app("The fleet: list hosts, cordon them for maintenance, remove them.")


@command(commands, "list")
def list_hosts() -> None:
    """Every known host, with what is allocated of its capacity."""
    show_list(state().output, Host, state().client().list_hosts())


@command(commands, "show")
def show_host(host_id: HostIdArgument) -> None:
    """One host, every field."""
    show_one(state().output, state().client().get_host(host_id))


@command(commands, "info")
def host_info(host_id: HostIdArgument) -> None:
    """The host's scheduling info as a person reads it (capacity, allocations, VMs, rules)."""
    print(state().client().scheduling_info(host_id), end="")


@command(commands, "cordon")
def cordon_host(host_id: HostIdArgument) -> None:
    """Pause scheduling on the host (maintenance): no new VM goes there; its VMs stay."""
    show_one(state().output, state().client().pause_host(host_id))


@command(commands, "uncordon")
def uncordon_host(host_id: HostIdArgument) -> None:
    """Resume scheduling on the host."""
    show_one(state().output, state().client().resume_host(host_id))


@command(commands, "fence")
def fence_host(host_id: HostIdArgument) -> None:
    """Declare the host down now (it is powered off, or burning): its VMs fail and their restart policy
    applies; it takes no VM until `hosts unfence`; its agent, if it comes back, deletes every VM it runs."""
    show_one(state().output, state().client().fence_host(host_id))


@command(commands, "unfence")
def unfence_host(host_id: HostIdArgument) -> None:
    """Put a fenced host back in service: it takes VMs again once its agent is heard from."""
    show_one(state().output, state().client().unfence_host(host_id))


@command(commands, "delete")
def delete_host(host_id: HostIdArgument) -> None:
    """Forget a host that holds no VM (its agent stopped); exit 5 while it holds some."""
    state().client().delete_host(host_id)
    stderr().print(f"host {host_id} deleted", markup=False)


def _drain_left(drain: Drain) -> int:
    return len(drain.in_flight) + len(drain.stuck) + len(drain.queued)


@command(commands, "drain")
def drain_host(
    host_id: HostIdArgument,
    evacuate: Annotated[
        bool, typer.Option(help="migrate every VM away; --no-evacuate: only pause and wait for them to leave")
    ] = True,
    deadline: Annotated[int, typer.Option(help="seconds the drain tries; the VMs left then stay, running")] = 600,
    parallel: Annotated[int, typer.Option(help="migrations in flight at once")] = 4,
    wait: Annotated[bool, typer.Option(help="follow it (a progress bar) until drained or timed out")] = False,
) -> None:
    """Empty a host for maintenance: paused, and every VM migrated away. End it with `hosts undrain`.
    With --wait, exit 7 when the deadline passed with VMs left (listed as stuck, still running)."""
    client = state().client()
    drain = client.drain_host(host_id, DrainRequest(evacuate=evacuate, deadline_s=deadline, max_parallel=parallel))
    if wait:
        with progress() as bar:
            task = bar.add_task(f"draining {host_id}", total=len(drain.moved) + _drain_left(drain))
            while drain.state is DrainState.DRAINING:
                time.sleep(1.0)
                drain = client.get_drain(host_id)
                bar.update(task, completed=len(drain.moved), total=len(drain.moved) + _drain_left(drain))
        if drain.state is DrainState.TIMED_OUT:
            show_one(state().output, drain)
            raise fail(f"host {host_id} not drained: {len(drain.stuck)} VM(s) left", ExitCode.NOT_PLACED)
    show_one(state().output, drain)


@command(commands, "drain-status")
def drain_status(host_id: HostIdArgument) -> None:
    """Where the host's drain stands: the VMs moved, in flight, stuck (and why), queued."""
    show_one(state().output, state().client().get_drain(host_id))


@command(commands, "undrain")
def undrain_host(host_id: HostIdArgument) -> None:
    """End the host's drain, finished or not: it takes new VMs again."""
    state().client().end_drain(host_id)
    stderr().print(f"host {host_id}: drain ended", markup=False)
