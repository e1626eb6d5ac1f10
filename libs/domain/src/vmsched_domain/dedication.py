"""Dedicated hosts: which VMs a host dedicated to a project takes (CloudStack's dedicated hosts, Nova's
AggregateMultiTenancyIsolation). One rule, read by the engine's ``dedicated`` filter and by the
scheduler's guards in PostgreSQL (:data:`SQL_TAKES` is the same rule over a host's and a VM's rows)."""

from __future__ import annotations


def takes(dedicated_to: str | None, project: str, dedicated: bool) -> bool:
    """Whether a host dedicated to ``dedicated_to`` (None: to no project) takes a VM of ``project``
    that asks (``dedicated``) or not for a host dedicated to its project."""
    if dedicated_to is None:
        return not dedicated
    return dedicated_to == project


def sql_takes(host: str, vm: str) -> str:
    """:func:`takes` as SQL over the aliases of a ``hosts`` row and a ``vms`` row: true or false, never
    NULL (an aggregate such as the guard's ``bool_and`` skips a NULL, which would let the VM through)."""
    return f"coalesce({host}.dedicated_to = {vm}.project, NOT {vm}.dedicated)"
