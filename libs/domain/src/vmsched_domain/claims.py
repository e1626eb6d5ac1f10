"""Which claim holds a VM's share of a host: a VM's claim on its own host is its id; a migrating VM's
claim on its migration target is its *target claim*, ``<vm id>:target``. PostgreSQL's shares
(:mod:`vmsched_pg.shares`) and the Redis snapshot (:mod:`vmsched_redis.snapshot`) name claims alike."""

from __future__ import annotations

from uuid import UUID

# A migrating VM's claim on its target is keyed by ``<vm id>`` and this.
TARGET_CLAIM_SUFFIX = ":target"


def target_claim_id(vm_id: UUID | str) -> str:
    """The id of a migrating VM's claim on its target (its claim on its own host is its id)."""
    return f"{vm_id}{TARGET_CLAIM_SUFFIX}"
