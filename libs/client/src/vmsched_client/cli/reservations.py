"""``vmsched reservations``: room held for a project's VMs (an admin makes and ends them)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer

from vmsched_client.cli.command import command, state, sub_app
from vmsched_client.cli.options import IdArgument, host_selector, utc
from vmsched_client.cli.output import show_list, show_one
from vmsched_contract.api import Reservation, ReservationRequest

commands = sub_app("Reservations: room held for a project's VMs (admin makes and ends them).")


@command(commands, "list")
def list_reservations(
    project: Annotated[str | None, typer.Option(help="admin: only this project's")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="at most this many, newest first")] = 100,
) -> None:
    """The reservations, newest first (of the token's project; every one for an admin)."""
    show_list(state().output, Reservation, state().client().list_reservations(project=project, limit=limit))


@command(commands, "show")
def show_reservation(reservation_id: IdArgument) -> None:
    """One reservation, every field (with the decision record of its placement)."""
    show_one(state().output, state().client().get_reservation(reservation_id))


@command(commands, "create")
def create_reservation(
    project: Annotated[str, typer.Argument(help="the project whose VMs may take the room")],
    cpu: Annotated[int, typer.Option(help="vCPUs of each slot")],
    memory_mb: Annotated[int, typer.Option(help="MiB of each slot")],
    disk_gb: Annotated[int, typer.Option(help="GB of disk of each slot")] = 0,
    gpu: Annotated[int, typer.Option(help="GPUs of each slot")] = 0,
    count: Annotated[int, typer.Option(help="slots: VMs of that size the room is for")] = 1,
    label: Annotated[list[str], typer.Option("--label", "-l", help="key=value the hosts must have")] = [],  # noqa: B006
    ends_at: Annotated[
        datetime | None, typer.Option(help="when what is still held goes back (UTC); default: never")
    ] = None,
) -> None:
    """Hold room for COUNT VMs of one size (pending until a scheduler places it); the project's
    VMs take it with `vms create --reservation ID`."""
    request = ReservationRequest(
        project=project,
        cpu=cpu,
        memory_mb=memory_mb,
        disk_gb=disk_gb,
        gpu=gpu,
        count=count,
        host_selector=host_selector(label),
        ends_at=utc(ends_at),
    )
    show_one(state().output, state().client().create_reservation(request))


@command(commands, "delete")
def delete_reservation(reservation_id: IdArgument) -> None:
    """End a reservation (released): the room still held goes back to the hosts; VMs on its slots stay."""
    show_one(state().output, state().client().delete_reservation(reservation_id))
