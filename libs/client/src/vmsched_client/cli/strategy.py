"""``vmsched strategy``: the cluster's default placement strategy."""

from __future__ import annotations

from vmsched_client.cli.command import command, state, sub_app
from vmsched_client.cli.output import show_one
from vmsched_contract.strategy import Strategy

commands = sub_app("The cluster's default placement strategy.")


@command(commands, "show")
def show_strategy() -> None:
    """The default strategy and where it comes from."""
    show_one(state().output, state().client().get_scheduler_settings())


@command(commands, "set")
def set_strategy(name: Strategy) -> None:
    """Change the default strategy at runtime (admin)."""
    show_one(state().output, state().client().set_default_strategy(name))
