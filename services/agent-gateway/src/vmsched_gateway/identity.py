"""Whose word the gateway takes (docs/security.md, "Agent identity").

- With VMSCHED_AGENT_AUTH=required, a host's heartbeats and VM reports count only when published by
  that host's own broker user: the message's AMQP ``user_id`` must be the user
  ``vmsched-gateway enroll-agent`` made for it (:mod:`vmsched_amqp.agent_identity`). RabbitMQ
  refuses a ``user_id`` that is not the publishing connection's user (unless that user has the
  ``impersonator`` tag: give it to nobody), so the property cannot be forged.
- A VM report counts only about a VM vmsched placed on that host, now or in an earlier attempt (a
  late answer, or the answer to a delete of a copy left behind); any other is refused.
- A second agent process for a host id already online is refused (:mod:`vmsched_gateway.instances`).

A refused message is dead-lettered with the reason (``x-vmsched-dead-letter-reason``), counted in
``vmsched_agent_messages_refused_total`` and changes nothing.
"""

from __future__ import annotations

from enum import StrEnum

from vmsched_amqp.agent_identity import agent_username, host_of_username
from vmsched_amqp.failures import PoisonMessage
from vmsched_domain.records import VmRecord
from vmsched_gateway.metrics import AGENT_MESSAGES_REFUSED
from vmsched_runtime.settings import AgentAuth


class Refusal(StrEnum):
    NO_USER = "no_user"  # no user_id: not published by an enrolled agent
    WRONG_USER = "wrong_user"  # published by a broker user that is not the host's
    INSTANCE_CONFLICT = "instance_conflict"  # another agent process holds the host id
    NOT_PLACED_HERE = "vm_not_placed_here"  # a report about a VM vmsched never placed on that host


class MessageKind(StrEnum):
    HEARTBEAT = "heartbeat"
    STATUS = "status"


class AgentRefused(PoisonMessage):
    """An agent's message the gateway will not act on (dead-lettered with this text as the reason)."""

    def __init__(self, kind: MessageKind, refusal: Refusal, detail: str) -> None:
        super().__init__(f"{kind.value} refused ({refusal.value}): {detail}")
        self.kind = kind
        self.refusal = refusal


def refuse(kind: MessageKind, refusal: Refusal, detail: str) -> AgentRefused:
    """The error to raise for a refused message, counted."""
    AGENT_MESSAGES_REFUSED.labels(kind.value, refusal.value).inc()
    return AgentRefused(kind, refusal, detail)


def speaker_refusal(mode: AgentAuth, user_id: str | None, host_id: str, vhost: str) -> tuple[Refusal, str] | None:
    """Why a message about ``host_id`` published as ``user_id`` does not count, or None when it does."""
    if mode is AgentAuth.OFF:
        return None
    expected = agent_username(host_id, vhost)
    if not user_id:
        return Refusal.NO_USER, (
            f"no user_id: with VMSCHED_AGENT_AUTH=required, host {host_id}'s messages must be published by its "
            f"broker user {expected!r} with the user_id property set (vmsched-gateway enroll-agent {host_id})"
        )
    if host_of_username(user_id, vhost) != host_id:
        return Refusal.WRONG_USER, f"published by broker user {user_id!r}, not by host {host_id}'s user {expected!r}"
    return None


def placed_on(vm: VmRecord, host_id: str) -> bool:
    """Whether vmsched placed ``vm`` on ``host_id``, now or in an earlier attempt."""
    return vm.hypervisor_id == host_id or any(entry.get("host") == host_id for entry in vm.attempts)


class Speakers:
    """The admission check of the gateway's consumers (``LeanConsumer(admit=...)``)."""

    def __init__(self, mode: AgentAuth, vhost: str) -> None:
        self.mode = mode
        self.vhost = vhost

    def check(self, kind: MessageKind, user_id: str | None, host_id: str) -> None:
        """Raise :class:`AgentRefused` unless ``user_id`` may speak for ``host_id``."""
        refusal = speaker_refusal(self.mode, user_id, host_id, self.vhost)
        if refusal is not None:
            raise refuse(kind, *refusal)


# Every series that can occur, at 0 from the start (a rate over a series that appears late misses its first count).
for _refusal in (Refusal.NO_USER, Refusal.WRONG_USER, Refusal.INSTANCE_CONFLICT):
    AGENT_MESSAGES_REFUSED.labels(MessageKind.HEARTBEAT.value, _refusal.value)
for _refusal in (Refusal.NO_USER, Refusal.WRONG_USER, Refusal.NOT_PLACED_HERE):
    AGENT_MESSAGES_REFUSED.labels(MessageKind.STATUS.value, _refusal.value)
