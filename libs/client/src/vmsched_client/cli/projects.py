"""``vmsched projects``: projects and their quotas (admin)."""

from __future__ import annotations

from typing import Annotated

import typer

from vmsched_client.cli.command import command, state, sub_app
from vmsched_client.cli.output import show_list, show_one
from vmsched_contract.api import Project, ProjectRequest, Quota

commands = sub_app("Projects and their quotas (admin).")


@command(commands, "list")
def list_projects() -> None:
    """Every project, its usage against its quota (used/limit, '-': no limit)."""
    show_list(state().output, Project, state().client().list_projects())


@command(commands, "show")
def show_project(name: str) -> None:
    show_one(state().output, state().client().get_project(name))


@command(commands, "create")
def create_project(
    name: str,
    instances: Annotated[int | None, typer.Option(help="most VMs")] = None,
    cpu: Annotated[int | None, typer.Option(help="most vCPUs, summed")] = None,
    memory_mb: Annotated[int | None, typer.Option(help="most MiB, summed")] = None,
    disk_gb: Annotated[int | None, typer.Option(help="most GB, summed")] = None,
    gpu: Annotated[int | None, typer.Option(help="most GPUs, summed")] = None,
    max_priority: Annotated[int | None, typer.Option(help="the highest priority its VMs may ask for")] = None,
) -> None:
    """Create a project with its quota (a limit left out: none)."""
    quota = Quota(
        instances=instances, cpu=cpu, memory_mb=memory_mb, disk_gb=disk_gb, gpu=gpu, max_priority=max_priority
    )
    show_one(state().output, state().client().create_project(ProjectRequest(name=name, quota=quota)))
