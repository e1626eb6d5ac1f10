"""The one way a command for a host's agent is made (``agent.<host id>``), whoever sends it: the
gateway's create for a placed VM, a delete, a stop or start, a migration's steps."""

from __future__ import annotations

from uuid import UUID

from vmsched_contract.messages import AgentCommand, CommandAction, MigrationOrder, Overcommit, Resources


def agent_command(
    action: CommandAction,
    vm_id: UUID,
    name: str,
    resources: Resources,
    *,
    attempt: int = 1,
    migration: MigrationOrder | None = None,
    overcommit: Overcommit | None = None,
) -> AgentCommand:
    """What the agent needs to carry ``action`` out for the VM (its placement ``attempt``, or its
    ``migration``: a command sent again is recognised by them, and carried out once), with the host's
    allocation ratios when the sender knows them (see :mod:`vmsched_domain.fit`)."""
    return AgentCommand(
        action=action,
        vm_id=vm_id,
        name=name,
        resources=resources,
        attempt=attempt,
        migration=migration,
        overcommit=overcommit,
    )
