"""The server group rule: whether one more member of a group may go to a domain. Stated once, here.

A server group (Nova's server groups, Kubernetes' pod affinity and topology spread) keeps its members
apart or together across *domains*: a host (``topology_key = "host"``) or the value of one host label
(``"zone"``, ``"rack"``). A host lacking that label is in no domain and takes no member of a hard group.

- ``anti-affinity``: at most ``max_per_domain`` members in a domain.
- ``affinity``: every member in one domain; the first member fixes it.
- ``spread``: after placing, the member count of the chosen domain exceeds the smallest count among
  the *eligible* domains by at most ``max_skew`` (Kubernetes' topologySpreadConstraints with
  ``whenUnsatisfiable: DoNotSchedule``). Which domains are eligible is the placement engine's
  answer for the VM (the domains of the hosts that pass every other hard rule for it); the claim and
  the commit check against the same list, handed to them with the placement.
- ``soft-anti-affinity`` and ``soft-affinity``: preferences only (a weigher); this rule refuses nothing.

Four places need the rule: the engine (numpy, over every host at once), the Redis claim (Lua, atomic
with the capacity check), the PostgreSQL commit (Python, on counts read under the group's row lock)
and people. :func:`refuses` is the rule on three numbers; :data:`LUA_GROUP_RULE` is the same function
in Lua, pasted into the claim script, and tests/integration/test_group_rule.py proves them equal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from uuid import UUID

from vmsched_contract.groups import HOST_TOPOLOGY, GroupPolicy

HARD_POLICIES = frozenset({GroupPolicy.ANTI_AFFINITY, GroupPolicy.AFFINITY, GroupPolicy.SPREAD})

# The reason names users see: in rejections, refused claims and an unschedulable VM's reason.
SERVER_GROUP = "server_group"
SPREAD = "spread"


@dataclass(frozen=True, slots=True)
class GroupRule:
    """A server group's definition (immutable once created)."""

    id: UUID
    policy: GroupPolicy
    topology_key: str = HOST_TOPOLOGY
    max_per_domain: int = 1
    max_skew: int = 1

    @property
    def hard(self) -> bool:
        return self.policy in HARD_POLICIES

    @property
    def reason_name(self) -> str:
        return SPREAD if self.policy is GroupPolicy.SPREAD else SERVER_GROUP


def domain_of(topology_key: str, host_id: str, labels: Mapping[str, str]) -> str | None:
    """The domain a host is in for ``topology_key``: its id, its label's value, or None (no such label)."""
    if topology_key == HOST_TOPOLOGY:
        return host_id
    return labels.get(topology_key)


def refuses(rule: GroupRule, here: int, total: int, lowest: int) -> bool:
    """The rule on three numbers: ``here`` members in the chosen domain, ``total`` members in all, and
    ``lowest``, the fewest members in any eligible domain or the chosen one (spread only)."""
    if rule.policy is GroupPolicy.ANTI_AFFINITY:
        return here >= rule.max_per_domain
    if rule.policy is GroupPolicy.AFFINITY:
        return total > 0 and here == 0
    if rule.policy is GroupPolicy.SPREAD:
        return here + 1 - lowest > rule.max_skew
    return False


def refusal(
    rule: GroupRule, domain: str | None, members: Mapping[str, int], eligible: Iterable[str] = ()
) -> str | None:
    """Why one more member of ``rule``'s group may not go to ``domain``, with the numbers, as
    ``"<reason name>: ..."``; None when it may. ``members`` counts the members per domain;
    ``eligible`` lists the spread's eligible domains (the chosen one counts as eligible too)."""
    if not rule.hard:
        return None
    name, key = rule.reason_name, rule.topology_key
    if domain is None:
        return f"{name}: host has no {key} label (in no domain of the group)"
    here = members.get(domain, 0)
    lowest = min([here, *(members.get(other, 0) for other in eligible)])
    if not refuses(rule, here, sum(members.values()), lowest):
        return None
    if rule.policy is GroupPolicy.ANTI_AFFINITY:
        return (
            f"{name}: {here} members of the group in {key}={domain} already "
            f"(anti-affinity, at most {rule.max_per_domain})"
        )
    if rule.policy is GroupPolicy.AFFINITY:
        held = ", ".join(sorted(d for d, n in members.items() if n > 0))
        return f"{name}: the group's members are in {key}={held}, not {domain} (affinity)"
    return (
        f"{name}: {key}={domain} would hold {here + 1} members, the emptiest eligible domain {lowest} "
        f"(max_skew {rule.max_skew})"
    )


# The same rule in Lua (pasted into the claim script where it says ``-- {{group rule}}``): policy is
# the policy's value, the numbers as in :func:`refuses`. Returns true when the member is refused.
LUA_GROUP_RULE = "\n".join(
    (
        "-- The server group rule, from vmsched_domain.groups (do not edit here).",
        "local function group_refuses(policy, max_per_domain, max_skew, here, total, lowest)",
        f"  if policy == '{GroupPolicy.ANTI_AFFINITY.value}' then",
        "    return here >= max_per_domain",
        f"  elseif policy == '{GroupPolicy.AFFINITY.value}' then",
        "    return total > 0 and here == 0",
        f"  elseif policy == '{GroupPolicy.SPREAD.value}' then",
        "    return here + 1 - lowest > max_skew",
        "  end",
        "  return false",
        "end",
    )
)
