"""``vmsched tokens``: API tokens (admin)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer

from vmsched_client.cli.command import command, state, sub_app
from vmsched_client.cli.options import IdArgument, utc
from vmsched_client.cli.output import show_list, show_one, stderr
from vmsched_contract.api import Token, TokenRequest
from vmsched_contract.scopes import Scope

commands = sub_app("API tokens (admin).")


@command(commands, "list")
def list_tokens(project: Annotated[str | None, typer.Option(help="only this project's")] = None) -> None:
    """Every token (never its secret)."""
    show_list(state().output, Token, state().client().list_tokens(project=project))


@command(commands, "show")
def show_token(token_id: IdArgument) -> None:
    show_one(state().output, state().client().get_token(token_id))


@command(commands, "create")
def create_token(
    name: str,
    project: Annotated[str, typer.Option(help="the project whose VMs it sees and changes")],
    scope: Annotated[list[Scope], typer.Option("--scope", "-s", help="repeat for several")],
    expires_at: Annotated[datetime | None, typer.Option(help="when it stops working (UTC); default: never")] = None,
) -> None:
    """Create a token; its secret is shown this once."""
    request = TokenRequest(name=name, project=project, scopes=scope, expires_at=utc(expires_at))
    show_one(state().output, state().client().create_token(request))


@command(commands, "revoke")
def revoke_token(token_id: IdArgument) -> None:
    """Revoke a token: it is refused from now on."""
    state().client().revoke_token(token_id)
    stderr().print(f"token {token_id} revoked", markup=False)
