"""``vmsched``, the root app: its options (``--url``, ``--token``, ``-o``) and the commands of each
module assembled. Each command is a thin shell (parse, call the client, show the answer), registered
with :func:`vmsched_client.cli.command.command`."""

from __future__ import annotations

from typing import Annotated

import typer

from vmsched_client.cli import (
    events,
    groups,
    hosts,
    pools,
    projects,
    rebalance,
    replay,
    reservations,
    strategy,
    tokens,
    vms,
    whatif,
)
from vmsched_client.cli.command import State, begin
from vmsched_client.cli.output import Format

app = typer.Typer(
    name="vmsched",
    help="Operate vmsched: VMs, hosts, server groups, reservations, projects, tokens, rebalancing, live events.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # a usage error is Click's plain "Error: ..." line, not a panel
)
# In the order `vmsched --help` lists them: the root's own commands first, then the sub-apps.
for root_commands in (replay.commands, whatif.commands, events.commands):
    app.add_typer(root_commands)
for name, sub_app in (
    ("vms", vms.commands),
    ("hosts", hosts.commands),
    ("groups", groups.commands),
    ("pools", pools.commands),
    ("reservations", reservations.commands),
    ("projects", projects.commands),
    ("tokens", tokens.commands),
    ("strategy", strategy.commands),
    ("rebalance", rebalance.commands),
):
    app.add_typer(sub_app, name=name)


@app.callback()
def options(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(help="the API (else VMSCHED_URL, else the config file)")] = None,
    token: Annotated[
        str | None, typer.Option(help="the bearer token (else VMSCHED_TOKEN, else the config file)", show_default=False)
    ] = None,
    output: Annotated[
        Format, typer.Option("--output", "-o", help="table for people, json for scripts, id: the ids alone")
    ] = Format.TABLE,
) -> None:
    chosen = State(url=url, token=token, output=output)
    begin(chosen)
    ctx.call_on_close(chosen.close)
