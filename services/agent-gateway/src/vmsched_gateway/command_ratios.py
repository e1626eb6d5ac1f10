"""The commands that put a VM on a host (a create, a migration's ``prepare_migration``) carry that
host's allocation ratios as the capacity snapshot holds them: the operator's overcommit over the
agent's own, what the scheduler placed the VM by. An agent that checks room (the simulator) then
counts the room the scheduler counted; one fit rule on both sides (``vmsched_domain.fit``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from vmsched_contract.messages import AgentCommand, CommandAction, Overcommit
from vmsched_redis.snapshot import Snapshot

# The commands after which the host holds the VM's resources.
TAKES_ROOM = frozenset({CommandAction.CREATE, CommandAction.PREPARE_MIGRATION})


def with_ratios(command: AgentCommand, ratios: Overcommit | None) -> AgentCommand:
    """``command`` carrying ``ratios`` when it takes room and carries none yet (a host the snapshot
    does not know leaves it as it is: the agent then counts its own)."""
    if command.action not in TAKES_ROOM or command.overcommit is not None or ratios is None:
        return command
    return command.model_copy(update={"overcommit": ratios})


class CommandRatios:
    """Reads the hosts' ratios from the snapshot, one read for a batch of commands."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    async def of(self, host_ids: Sequence[str]) -> Mapping[str, Overcommit]:
        wanted = sorted(set(host_ids))
        if not wanted:
            return {}
        return await self.snapshot.read_ratios(wanted)

    async def stamp(self, host_id: str, command: AgentCommand) -> AgentCommand:
        if command.action not in TAKES_ROOM:
            return command
        return with_ratios(command, (await self.of([host_id])).get(host_id))
