"""One agent process per host id: the rule that refuses a second one (``agent.conflict``).

Each agent process names itself in its heartbeats with an ``instance_id`` drawn when it starts. The
instance whose heartbeat the gateway last accepted *holds* the host id (``hosts.agent_instance``).
A heartbeat from another instance is accepted, and the host id changes hands, only when:

- nobody holds it: a new host, or the holder left (its last heartbeat said ``leaving``, as the SDK's
  does when it stops); or
- the holder has been silent for ``takeover_after`` seconds (AGENT_OFFLINE_TIMEOUT): the host is
  offline, so the holder is taken for dead. This is the restart after a crash: the new process is
  refused until then, and its VMs come back as they do for any host that was offline.

Otherwise it is refused: a second process configured with a host id already online (a copied
config, a restarted VM image) would otherwise flip the host's labels and capacity with every
heartbeat. Consul refuses a node joining under a live node's name the same way, until that node
has left or failed.

A heartbeat without an instance (an agent older than this rule) is the instance ``None``: it keeps
a host that no instance holds, and is refused while a named instance holds it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from vmsched_contract.messages import AgentHeartbeat


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a host id: the instance (None: nobody, or an agent too old to name itself) and how
    long since its last accepted heartbeat (seconds; infinite: never heard)."""

    instance_id: str | None
    silent_for: float = math.inf


FREE = Holder(None)


def accepts(holder: Holder, instance_id: str | None, takeover_after: float) -> bool:
    """Whether a heartbeat of ``instance_id`` is accepted from the host ``holder`` holds."""
    return holder.instance_id is None or holder.instance_id == instance_id or holder.silent_for >= takeover_after


def after(beat: AgentHeartbeat) -> Holder:
    """Who holds the host once ``beat`` is accepted: its instance, heard just now; nobody if it left."""
    return Holder(None if beat.leaving else beat.instance_id, 0.0)


@dataclass(frozen=True, slots=True)
class Refused:
    beat: AgentHeartbeat
    held_by: str | None


@dataclass
class Settled:
    """A batch of heartbeats judged: the newest accepted one per host (what is folded), each host's
    holder afterwards (what is stored), and the refused ones."""

    accepted: dict[str, AgentHeartbeat] = field(default_factory=dict)
    holders: dict[str, Holder] = field(default_factory=dict)
    refused: list[Refused] = field(default_factory=list)


def settle(holders: Mapping[str, Holder], beats: Sequence[AgentHeartbeat], takeover_after: float) -> Settled:
    """Judge ``beats`` host by host in the order they were sent, starting from ``holders`` (a host
    missing from it is free): a batch may hold a leaving instance's last heartbeat and its
    successor's first."""
    settled = Settled()
    for beat in sorted(beats, key=lambda beat: beat.sent_at):
        holder = (
            settled.holders[beat.agent_id] if beat.agent_id in settled.holders else holders.get(beat.agent_id, FREE)
        )
        if accepts(holder, beat.instance_id, takeover_after):
            settled.accepted[beat.agent_id] = beat
            settled.holders[beat.agent_id] = after(beat)
        else:
            settled.refused.append(Refused(beat, holder.instance_id))
    return settled


class ConflictNotices:
    """Whether to announce a refused instance now: once per (host, instance) per ``repeat_after``
    seconds, so a duplicate heartbeating every few seconds makes one event a minute, not thousands.
    (Every refused heartbeat is still dead-lettered and counted.)"""

    def __init__(self, clock: Callable[[], float], repeat_after: float = 60.0) -> None:
        self.clock = clock
        self.repeat_after = repeat_after
        self._last: dict[tuple[str, str | None], float] = {}

    def due(self, host_id: str, instance_id: str | None) -> bool:
        now = self.clock()
        key = (host_id, instance_id)
        if now - self._last.get(key, -math.inf) < self.repeat_after:
            return False
        self._last = {k: at for k, at in self._last.items() if now - at < self.repeat_after}
        self._last[key] = now
        return True
