"""A host's inventory in PostgreSQL: what its agent reports, overlaid by what the operator set.

The ``hosts`` table keeps both sources, ``agent_*`` (the last heartbeat) and ``operator_*``
(``PATCH /v1/hosts/{id}``), and the effective value in the column every reader uses (``labels``,
``taints``, ``cpu_ratio``, ...: the API, PostgreSQL's guard, the snapshot). The overlay, written once
here and applied by both writers (the gateway's heartbeat upsert and the API's PATCH):

- labels: the agent's, and every key the operator set takes the operator's value;
- taints: the operator's list when set (even an empty one), else the agent's;
- each allocation ratio: the operator's when set, else the agent's;
- reserved capacity is the operator's alone (agents report none);
- named extra resources (``extra``) are the agent's alone: like cpu or GPUs they are capacity the
  hardware has, and the fit rule reserves and overcommits none of them, so there is nothing to overlay.

The operator's word wins whatever the agent sends later, and withdrawing it (a null) lets the
agent's value through again.
"""

from __future__ import annotations

from vmsched_domain.inventory import RATIOS


def overlay(agent: str, operator: str) -> str:
    """The ``SET`` assignments of the effective columns, from the agent's values in the row (or
    alias) ``agent`` and the operator's in ``operator``."""
    assignments = [
        f"labels = {agent}.agent_labels || {operator}.operator_labels",
        f"taints = coalesce({operator}.operator_taints, {agent}.agent_taints)",
    ]
    assignments += [
        f"{column} = coalesce({operator}.operator_{column}, {agent}.agent_{column})" for column, _ in RATIOS
    ]
    return ", ".join(assignments)
