"""The options and arguments several commands take, each stated once, and how the command line's
values are read (``key=value`` labels, UTC times)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any
from uuid import UUID

import typer

from vmsched_client.cli.output import Format
from vmsched_contract.messages import HostSelectorTerm, SelectorOperator

OutputOption = Annotated[
    Format | None,
    typer.Option("--output", "-o", help="table for people, json for scripts, id: the ids alone", show_default=False),
]
IdArgument = Annotated[UUID, typer.Argument(metavar="ID")]
HostIdArgument = Annotated[str, typer.Argument(metavar="ID")]
TimeoutOption = Annotated[float, typer.Option(help="seconds --wait waits at most")]

# A VM's shape (vms create, simulate, capacity)
CpuOption = Annotated[int | None, typer.Option(help="vCPUs (default: the API's VMSCHED_DEFAULT_VM_CPU)")]
MemoryOption = Annotated[int | None, typer.Option(help="MiB (default: VMSCHED_DEFAULT_VM_MEMORY_MB)")]
DiskOption = Annotated[int, typer.Option(help="GB of disk")]
GpuOption = Annotated[int, typer.Option(help="GPUs")]
HostLabelOption = Annotated[list[str], typer.Option("--label", "-l", help="key=value the host must have")]
NetworkOption = Annotated[
    list[str], typer.Option("--network", help="a network the host must reach (repeat for several)")
]
VolumeOption = Annotated[
    list[str], typer.Option("--volume", help="a volume: GB[:tag,tag...], on a storage pool with those tags (repeat)")
]


def pairs(values: list[str], what: str) -> dict[str, str]:
    """``key=value`` values (of the option ``what``) as a dict; a usage error (exit 2) for any other."""
    found = {}
    for value in values:
        key, equals, text = value.partition("=")
        if not equals or not key:
            raise typer.BadParameter(f"{value!r}: expected key=value", param_hint=what)
        found[key] = text
    return found


def vm_shape(
    cpu: int | None,
    memory_mb: int | None,
    disk_gb: int,
    gpu: int,
    label: list[str],
    network: list[str] = [],  # noqa: B006
) -> dict[str, Any]:
    """A VmRequest's size, labels and networks; cpu and memory_mb left out when not given (the API's
    defaults), networks when none is given."""
    shape: dict[str, Any] = {"disk_gb": disk_gb, "gpu": gpu, "labels": pairs(label, "--label")}
    if network:
        shape["networks"] = list(network)
    return shape | {key: value for key, value in {"cpu": cpu, "memory_mb": memory_mb}.items() if value is not None}


def volumes(values: list[str]) -> list[dict[str, Any]]:
    """``--volume 30:ssd,replicated`` values as a VmRequest's volumes; a usage error (exit 2) for others."""
    found = []
    for value in values:
        size, _, tags = value.partition(":")
        if not size.isdigit():
            raise typer.BadParameter(f"{value!r}: expected GB[:tag,tag...]", param_hint="--volume")
        found.append({"size_gb": int(size), "tags": [tag for tag in tags.split(",") if tag]})
    return found


def host_selector(label: list[str]) -> list[HostSelectorTerm]:
    """``--label key=value``, each a term the hosts must match."""
    return [
        HostSelectorTerm(key=key, operator=SelectorOperator.IN, values=[value])
        for key, value in pairs(label, "--label").items()
    ]


def utc(moment: datetime | None) -> datetime | None:
    """A time the command line gave: UTC, as the options say (Click's datetimes carry no zone;
    ``astimezone`` would take them for the machine's local time)."""
    return None if moment is None else moment.replace(tzinfo=UTC)
