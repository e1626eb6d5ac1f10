"""What a server group's request names. The rule itself is the services' (vmsched_domain.groups)."""

from __future__ import annotations

from enum import StrEnum


class GroupPolicy(StrEnum):
    ANTI_AFFINITY = "anti-affinity"
    AFFINITY = "affinity"
    SPREAD = "spread"
    SOFT_ANTI_AFFINITY = "soft-anti-affinity"
    SOFT_AFFINITY = "soft-affinity"


# The topology key that makes every host a domain of its own (not a label: a label named "host" is
# not consulted).
HOST_TOPOLOGY = "host"
