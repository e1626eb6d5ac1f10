"""Whether this gateway hears the broker well enough to take a host's silence for the host's own.

Every agent heartbeats through the broker. A gateway cut from the broker hears none of them, and
would take the whole fleet for silent: mark every host offline (the scheduler then tells every new
VM ``no_available_agents``) and, a lost timeout later, fail their VMs. So the gateway listens to the
broker itself: besides the heartbeats, a small probe it sends itself through the broker every
second (:mod:`vmsched_gateway.self_probe`) comes back while the link works, even when no agent is
left to heartbeat (a fleet that really stopped is still marked offline). The gateway is **deaf**
while its broker connection is down, or once nothing at all (no heartbeat, no probe) arrived for
``deaf_after`` seconds; :class:`BrokerHearing` then says so and the health check marks no host
offline and fails nothing (vmsched_gateway.health).

``deaf_after`` is a few probe intervals, well under the offline timeout: a host heard just before the
cut must not reach the offline timeout before the gateway notices that it is the one cut off. And a
host is taken for offline only after a silence of the offline timeout *plus* however long the gateway
itself has heard nothing, so no host silent only since the gateway's last message counts.

Once it hears again, a host is not taken for offline for one more offline timeout: the heartbeats of
the whole fleet come back over a heartbeat interval, and a host whose heartbeat comes last must not
be marked offline for the silence of the cut. The gateway's :class:`~vmsched_gateway.health.FailureGrace`
is cut off with every deaf moment, so nothing is failed for a lost timeout after one either. A
health check that fails (PostgreSQL or Redis away: no heartbeat could be folded) holds the same way,
and so does a gateway that hears heartbeats but has not folded them for ``deaf_after`` seconds
(:class:`FoldProgress`): its fold waits on a server whose packets are dropped (Redis, with the
hosts' rows already written for the first batch and none since), and the hosts whose heartbeats
wait behind it are not silent.
"""

from __future__ import annotations

from dataclasses import dataclass

# Seconds between two probes the gateway sends itself through the broker.
PROBE_INTERVAL = 1.0
# Seconds of hearing nothing after which the gateway counts itself cut off: three probes missed. At
# most half the offline timeout, so that it notices before the hosts heard last before a cut reach it.
DEAF_AFTER = 3 * PROBE_INTERVAL


@dataclass
class BrokerHearing:
    """What this gateway heard from the broker lately, and what that lets it say of silent hosts."""

    offline_timeout: float
    deaf_after: float
    last_heard: float  # monotonic seconds: the last heartbeat of any host, or probe, that arrived
    hold_until: float  # no host is taken for offline before this moment

    @classmethod
    def starting(cls, now: float, offline_timeout: float) -> BrokerHearing:
        """A gateway that starts listening at ``now``: see :meth:`begin`."""
        return cls(offline_timeout, min(DEAF_AFTER, offline_timeout / 2), last_heard=now, hold_until=now)

    def begin(self, now: float) -> None:
        """The gateway starts consuming at ``now``, as though it had just heard something: what it
        did not hear before, it was not told (the broker kept the heartbeats sent meanwhile, and
        delivers them first), so the time it took to start is no deaf spell. Hosts silent since
        before it started may be marked offline at once, as ever."""
        self.last_heard = now
        self.hold_until = now

    def heard(self, now: float) -> None:
        """Something arrived from the broker (a heartbeat, or the gateway's own probe)."""
        if now - self.last_heard > self.deaf_after:
            self._deaf_at(now)  # a deaf spell the health check may not have seen (it was stuck on the cut)
        self.last_heard = max(self.last_heard, now)

    def deaf(self, now: float, *, connected: bool) -> bool:
        """Whether the gateway is cut from the broker now: its connection down, or nothing heard for
        ``deaf_after`` seconds."""
        if connected and now - self.last_heard <= self.deaf_after:
            return False
        self._deaf_at(now)
        return True

    def blind(self, now: float) -> None:
        """The gateway could not check its hosts (its PostgreSQL or Redis away), so could not fold
        their heartbeats either: held as after a deaf spell."""
        self._deaf_at(now)

    def offline_after(self, now: float) -> float | None:
        """The silence (seconds) after which a host is offline now, or None while no host may be
        taken for offline: deaf, or hearing again for less than an offline timeout."""
        if now < self.hold_until or now - self.last_heard > self.deaf_after:
            return None
        return self.offline_timeout + (now - self.last_heard)

    def _deaf_at(self, now: float) -> None:
        self.hold_until = max(self.hold_until, now + self.offline_timeout)


@dataclass
class FoldProgress:
    """Whether the heartbeats that arrive are folded: how many wait (submitted, not yet folded or
    failed) and since when nothing was folded while they did, and when a fold last failed (its
    heartbeats were not written: the consumer does not take them again)."""

    waiting: int = 0
    since: float = 0.0  # monotonic seconds: the last fold that ended well, or when heartbeats began to wait
    failed_at: float | None = None

    def submitted(self, now: float) -> None:
        if self.waiting == 0:
            self.since = now
        self.waiting += 1

    def answered(self) -> None:
        """A heartbeat submitted is folded, or its fold failed."""
        self.waiting -= 1

    def folded(self, now: float) -> None:
        """A batch of heartbeats was written (the hosts' rows and their snapshot)."""
        self.since = now

    def failed(self, now: float) -> None:
        """A batch of heartbeats could not be written."""
        self.failed_at = now

    def behind(self, now: float, by: float) -> bool:
        """Whether heartbeats have waited more than ``by`` seconds with nothing folded, or a fold
        failed within the last ``by`` seconds. Only as long as that lasts: a fleet that falls silent
        after a failure is taken for silent again, an offline timeout later (BrokerHearing.blind)."""
        stalled = self.waiting > 0 and now - self.since > by
        failing = self.failed_at is not None and now - self.failed_at <= by
        return stalled or failing
