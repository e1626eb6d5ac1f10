"""``vmsched groups``: server groups, which keep VMs apart or together."""

from __future__ import annotations

from typing import Annotated

import typer

from vmsched_client.cli.command import command, state, sub_app
from vmsched_client.cli.options import IdArgument
from vmsched_client.cli.output import show_list, show_one, stderr
from vmsched_contract.api import ServerGroup, ServerGroupRequest
from vmsched_contract.groups import HOST_TOPOLOGY, GroupPolicy

commands = sub_app("Server groups: keep VMs apart or together.")


@command(commands, "list")
def list_groups() -> None:
    """The server groups (of the token's project; every one for an admin)."""
    show_list(state().output, ServerGroup, state().client().list_server_groups())


@command(commands, "show")
def show_group(group_id: IdArgument) -> None:
    show_one(state().output, state().client().get_server_group(group_id))


@command(commands, "create")
def create_group(
    name: str,
    policy: Annotated[GroupPolicy, typer.Option(help="how its members are kept apart or together")],
    topology_key: Annotated[str, typer.Option(help="'host', or a host label such as zone")] = HOST_TOPOLOGY,
    max_per_domain: Annotated[int, typer.Option(help="anti-affinity: members a domain may hold")] = 1,
    max_skew: Annotated[int, typer.Option(help="spread: how uneven the domains may be")] = 1,
) -> None:
    """Create a server group; VMs join it with `vms create --server-group ID`."""
    request = ServerGroupRequest(
        name=name, policy=policy, topology_key=topology_key, max_per_domain=max_per_domain, max_skew=max_skew
    )
    show_one(state().output, state().client().create_server_group(request))


@command(commands, "delete")
def delete_group(group_id: IdArgument) -> None:
    """Delete a server group without members (exit 5 while it has some)."""
    state().client().delete_server_group(group_id)
    stderr().print(f"server group {group_id} deleted", markup=False)
