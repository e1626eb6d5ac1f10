"""The guard before "no host fits": before a pass says of any VM that it fits nowhere (unschedulable,
waiting, no migration target, a batch that cannot be placed whole), whether saying so now would be
premature. Every kind of pass asks here (:meth:`~vmsched_scheduler.round.SchedulingRound.run_pass`).

- PostgreSQL knows more online hosts than the snapshot holds, or knows some while the snapshot has
  none online: after a Redis flush the snapshot lacks hosts until their next heartbeat, and the copy
  may still hold hosts the flush took. Or the snapshot still says hosts are online that nobody has
  heard within the offline timeout: the gateway, which marks silent hosts offline, is itself cut
  off from PostgreSQL or Redis (its FailureGrace reasons the same way about failing VMs). The VMs
  come back later, after a full read. Hosts the gateway marked offline, or silent for long, are
  gone: ``no_available_agents`` is the answer then.
- The copy was behind the snapshot: a host changed a moment ago (an operator unpaused it, a
  heartbeat brought it back) after the copy was last read, which a refresh may skip for a few
  milliseconds. The copy reads the changes at once, and the VMs are decided again only if what
  rejected them is gone: re-checked against the copy as it is now and the server groups as
  PostgreSQL holds them now. On a busy fleet the copy changes at every heartbeat, so "something
  changed" alone would decide a VM that truly fits nowhere again and again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from vmsched_placement import NO_AVAILABLE_AGENTS
from vmsched_placement.inputs import demand_of
from vmsched_placement.journal import seeded
from vmsched_scheduler.groups import RoundGroups
from vmsched_scheduler.round_items import Choice
from vmsched_scheduler.tracing import traced_decide

if TYPE_CHECKING:
    from vmsched_scheduler.round import SchedulingRound


@dataclass(frozen=True, slots=True)
class Premature:
    """Saying "no host fits" now would be premature: try the VMs again, ``later`` (another round,
    after a full read of the snapshot) or in this round's next pass (the copy just caught up)."""

    later: bool
    why: str


async def premature_nowhere(
    rnd: SchedulingRound, nowhere: list[Choice], *, members: list[Choice] | None = None
) -> Premature | None:
    """Whether saying that ``nowhere`` fit nowhere would be premature. ``members``: the pass places
    these VMs whole or not at all (a gang): the verdict is then whether all of them fit together now."""
    if not nowhere:
        return None
    online = await rnd.ledger.online_hosts()
    none_online = any(c.decision.reason == NO_AVAILABLE_AGENTS for c in nowhere)
    if len(rnd.fleet.fleet) < online or (none_online and (online > 0 or silent_but_unmarked(rnd))):
        await rnd.fleet.refresh(force_full=True)
        return Premature(later=True, why="the snapshot knows fewer hosts than PostgreSQL, or hears none")
    if not await rnd.fleet.catch_up():
        return None
    deciding = nowhere if members is None else members
    groups = await RoundGroups.load(rnd.groups, (c.vm for c in deciding))
    if members is not None:
        fits = fits_together(rnd, members, groups)
    else:
        fits = any(fits_now(rnd, c, groups) for c in nowhere)
    return Premature(later=False, why="the snapshot changed since the decision") if fits else None


# A fleet silent for longer than this many offline timeouts is taken for gone, however it fell silent.
SILENT_FLEET_GRACE = 10


def silent_but_unmarked(rnd: SchedulingRound) -> bool:
    """Hosts the snapshot says are online though none passes the offline filter (none heard within
    the offline timeout), the newest heard within :data:`SILENT_FLEET_GRACE` offline timeouts: the
    heartbeats stopped reaching the snapshot and nobody marked the hosts offline, as a gateway cut
    from its servers cannot. A gateway that works marks silent hosts offline within a second."""
    columns = rnd.fleet.fleet.columns
    if not bool(columns.online.any()):
        return False
    newest = float(columns.last_heartbeat[columns.online].max())
    return rnd.clock() - newest <= SILENT_FLEET_GRACE * rnd.settings.offline_timeout


def fits_now(rnd: SchedulingRound, choice: Choice, groups: RoundGroups) -> bool:
    """Whether a host of the copy as it is now takes the VM (no journal entry: only a check). As a
    decision does, hosts that failed the VM lately are left out only while another host fits."""
    return _host_now(rnd, choice, groups) is not None


def fits_together(rnd: SchedulingRound, members: list[Choice], groups: RoundGroups) -> bool:
    """Whether every member fits now, each booked on the copy before the next is checked (as a
    decision books them); the bookings are undone before returning, with no await in between."""
    booked: list[tuple[str, Choice]] = []
    try:
        for choice in members:
            host = _host_now(rnd, choice, groups)
            if host is None:
                return False
            rnd.fleet.fleet.allocate(host, demand_of(choice.vm.resources))
            groups.book(choice.vm, rnd.fleet.fleet, host)
            booked.append((host, choice))
        return True
    finally:
        for host, choice in booked:
            rnd.fleet.fleet.release(host, demand_of(choice.vm.resources))


def _host_now(rnd: SchedulingRound, choice: Choice, groups: RoundGroups) -> str | None:
    request = choice.work.request(groups.placement_group(choice.vm), reserve=choice.reserve)
    context = seeded(rnd.context(), 0)
    host = traced_decide(rnd.fleet.fleet, request, context, None, fallbacks=0).host_id
    if host is None and choice.vm.exclude_hosts:
        alone = replace(request, exclude_hosts=choice.work.always_out())
        host = traced_decide(rnd.fleet.fleet, alone, context, None, fallbacks=0).host_id
    return None if host is None else str(host)
