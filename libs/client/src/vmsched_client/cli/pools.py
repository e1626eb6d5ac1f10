"""``vmsched pools``: the shared storage pools, whose capacity and tags are the operator's."""

from __future__ import annotations

from typing import Annotated

import typer

from vmsched_client.cli.command import command, state, sub_app
from vmsched_client.cli.output import show_list, show_one, stderr
from vmsched_contract.storage import SharedPoolBody, SharedPoolView

commands = sub_app("Shared storage pools: list them, set their capacity and tags, remove them.")

PoolArgument = Annotated[str, typer.Argument(metavar="NAME")]


@command(commands, "list")
def list_pools() -> None:
    """Every shared pool, with what is allocated on it and how many hosts reach it."""
    show_list(state().output, SharedPoolView, state().client().list_storage_pools())


@command(commands, "show")
def show_pool(name: PoolArgument) -> None:
    """One shared pool, every field."""
    show_one(state().output, state().client().get_storage_pool(name))


@command(commands, "set")
def set_pool(
    name: PoolArgument,
    capacity_gb: Annotated[int, typer.Option(min=0, help="its size in GB")],
    tag: Annotated[list[str], typer.Option("--tag", "-t", help="a tag volumes may ask for (repeat)")] = [],  # noqa: B006
) -> None:
    """Create a shared pool or set its capacity and tags (hosts whose heartbeat names it reach it)."""
    show_one(state().output, state().client().set_storage_pool(name, SharedPoolBody(capacity_gb=capacity_gb, tags=tag)))


@command(commands, "delete")
def delete_pool(name: PoolArgument) -> None:
    """Forget a shared pool no VM's volumes are on; exit 5 while some are."""
    state().client().delete_storage_pool(name)
    stderr().print(f"storage pool {name} deleted", markup=False)
