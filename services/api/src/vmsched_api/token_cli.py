"""``vmsched-api create-token``: a token made straight in PostgreSQL, for the first admin of an
installation (or one who lost every admin token). It prints the secret alone on stdout, so that
``export VMSCHED_TOKEN=$(vmsched-api create-token --project default --scope admin)`` works."""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime
from typing import Annotated

import typer

from vmsched_api.identity.store import TokenStore, UnknownProject
from vmsched_api.identity.token_secrets import PREFIX
from vmsched_contract.scopes import Scope
from vmsched_pg.engine import DATABASE_SERVER, create_engine
from vmsched_pg.schema_upgrade import upgrade_schema
from vmsched_runtime.reachability import unreachable
from vmsched_runtime.service_cli import fail
from vmsched_runtime.settings import MIN_BOOTSTRAP_TOKEN, load_settings

SERVICE = "vmsched-api"


async def _create(
    database_url: str,
    name: str,
    project: str,
    scopes: list[Scope],
    expires_at: datetime | None,
    given: str | None = None,
) -> str:
    await upgrade_schema(database_url)
    engine = create_engine(database_url, pool_size=1)
    try:
        _, secret = await TokenStore(engine).create(
            name=name, project=project, scopes=scopes, expires_at=expires_at, secret=given
        )
    finally:
        await engine.dispose()
    return secret


def create_token(
    project: Annotated[str, typer.Option("--project", help="the project the token acts for (it must exist)")],
    scope: Annotated[list[Scope], typer.Option("--scope", help="a scope it holds; repeat for more")],
    name: Annotated[str, typer.Option("--name", help="a name to tell it by in GET /v1/tokens")] = "cli",
    expires_at: Annotated[
        datetime | None, typer.Option("--expires-at", help="when it stops working (default: never)")
    ] = None,
    secret_from_stdin: Annotated[
        bool,
        typer.Option(
            "--secret-from-stdin",
            help="use the secret read from standard input (a token of another cell, so that one token is "
            "valid in every cell behind the cell router) instead of making a new one",
        ),
    ] = False,
) -> None:
    """Make an API token in the database VMSCHED_DATABASE_URL names (upgrading its schema first)
    and print its secret, which nothing keeps."""
    settings = load_settings(SERVICE)
    problems = asyncio.run(unreachable(settings, [DATABASE_SERVER]))
    if problems:
        fail(SERVICE, "; ".join(problems))
    given = None
    if secret_from_stdin:
        given = sys.stdin.readline().strip()
        if not given.startswith(PREFIX) or len(given) < len(PREFIX) + MIN_BOOTSTRAP_TOKEN:
            fail(
                SERVICE, f"the secret on standard input is not a vmsched token ({PREFIX}... as create-token prints)", 2
            )
    try:
        secret = asyncio.run(_create(settings.sqlalchemy_url, name, project, scope, expires_at, given))
    except UnknownProject:
        fail(SERVICE, f"no project {project} (an admin token creates it: POST /v1/projects)")
    typer.echo(secret)
