"""``vmsched hosts``: the fleet; list hosts, cordon them for maintenance, drain and remove them."""

from __future__ import annotations

import time
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Annotated

import typer

from vmsched_client import Client, NotFound
from vmsched_client.cli import drain_watch
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


@command(commands, "dedicate")
def dedicate_host(
    host_id: HostIdArgument,
    project: Annotated[str, typer.Argument(help="the project whose VMs alone the host takes")],
) -> None:
    """Dedicate the host to a project: it takes that project's VMs only, whatever their tolerations."""
    show_one(state().output, state().client().dedicate_host(host_id, project))


@command(commands, "undedicate")
def undedicate_host(host_id: HostIdArgument) -> None:
    """End the host's dedication: it takes any project's VMs again."""
    show_one(state().output, state().client().dedicate_host(host_id, None))


@command(commands, "delete")
def delete_host(host_id: HostIdArgument) -> None:
    """Forget a host that holds no VM (its agent stopped); exit 5 while it holds some."""
    state().client().delete_host(host_id)
    stderr().print(f"host {host_id} deleted", markup=False)


@command(commands, "drain")
def drain_host(
    host_id: HostIdArgument,
    evacuate: Annotated[
        bool, typer.Option(help="migrate every VM away; --no-evacuate: only pause and wait for them to leave")
    ] = True,
    deadline: Annotated[int, typer.Option(help="seconds the drain tries; the VMs left then stay, running")] = 600,
    parallel: Annotated[int, typer.Option(help="migrations in flight at once")] = 4,
    wait: Annotated[
        bool,
        typer.Option(help="follow it until drained or timed out (a progress bar; off a terminal, a line per change)"),
    ] = False,
) -> None:
    """Empty a host for maintenance: paused, and every VM migrated away. End it with `hosts undrain`.
    With --wait, exit 7 when the deadline passed with VMs left (listed as stuck, still running), or
    when the drain was ended before the host was drained."""
    client = state().client()
    drain = client.drain_host(host_id, DrainRequest(evacuate=evacuate, deadline_s=deadline, max_parallel=parallel))
    if wait:
        drain = _follow(client, drain)
        if drain.state is not DrainState.DRAINED:
            show_one(state().output, drain)
            raise fail(drain_watch.why_it_stopped(drain), ExitCode.NOT_PLACED)
        stderr().print(drain_watch.why_it_stopped(drain), markup=False)
    show_one(state().output, drain)


def _follow(client: Client, drain: Drain) -> Drain:
    """Poll the drain until it is no longer draining (or is overdue), showing each change."""
    on_terminal = stderr().is_terminal
    with progress() if on_terminal else nullcontext() as bar:
        task = (
            bar.add_task(f"draining {drain.host_id}", total=len(drain.moved) + drain_watch.left(drain)) if bar else None
        )
        shown = ""
        while True:
            line = drain_watch.progress_line(drain)
            if bar is not None and task is not None:
                bar.update(task, completed=len(drain.moved), total=len(drain.moved) + drain_watch.left(drain))
            elif line != shown:
                stderr().print(line, markup=False)
            shown = line
            if drain.state is not DrainState.DRAINING or drain_watch.overdue(drain, datetime.now(UTC)):
                return drain
            time.sleep(1.0)
            try:
                drain = client.get_drain(drain.host_id)
            except NotFound:
                raise fail(
                    f"host {drain.host_id}: the drain was ended (hosts undrain) before the host was drained",
                    ExitCode.NOT_PLACED,
                ) from None


@command(commands, "drain-status")
def drain_status(host_id: HostIdArgument) -> None:
    """Where the host's drain stands: the VMs moved, in flight, stuck (and why), queued."""
    show_one(state().output, state().client().get_drain(host_id))


@command(commands, "undrain")
def undrain_host(host_id: HostIdArgument) -> None:
    """End the host's drain, finished or not: it takes new VMs again."""
    state().client().end_drain(host_id)
    stderr().print(f"host {host_id}: drain ended", markup=False)
