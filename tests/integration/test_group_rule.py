"""The one server group rule, four ways: Python (vmsched_domain.groups), the engine's filters, the
Redis claim (its Lua copy, atomic with the capacity check) and PostgreSQL's guard (the settlement,
under the group's row lock). Hypothesis throws random groups, members and hosts at all four, on the
real Redis and PostgreSQL, and demands the same answer; a released claim gives its place back."""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from tests.integration.stores import Stores, module_stores
from tests.servers import Servers
from vmsched_contract.decision import PlacementRecord
from vmsched_contract.groups import GroupPolicy
from vmsched_contract.messages import Overcommit, Resources
from vmsched_contract.strategy import Strategy
from vmsched_domain.groups import GroupRule, domain_of, refusal
from vmsched_placement import DecisionContext, Demand, Fleet, HostState, PlacementRequest, Weights, explain
from vmsched_placement.model import PlacementGroup
from vmsched_redis.claims import Claim, GroupClaim
from vmsched_redis.host_hash import HostWrite
from vmsched_scheduler.ports import Committed, Placement

ROOMY = Resources(cpu=64, memory_mb=65536, disk_gb=1000)
NEED = Resources(cpu=1, memory_mb=512, disk_gb=1)


@pytest.fixture(scope="module")
def stores(servers: Servers) -> Iterator[Stores]:
    with module_stores(servers, "groups") as opened:
        yield opened


DOMAINS = ["a", "b", "c", "d"]


@dataclass(frozen=True)
class Case:
    rule: GroupRule
    members: dict[str, int]  # domain -> members there (for the host key, the domain is a host id)
    target: str  # the domain of the host the VM goes to, or "" for a host without the label
    eligible: tuple[str, ...]  # the other hosts' domains (the spread's eligible ones)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    key = draw(st.sampled_from(["host", "zone"]))
    rule = GroupRule(
        uuid.uuid4(),
        draw(st.sampled_from(list(GroupPolicy))),
        key,
        draw(st.integers(1, 3)),
        draw(st.integers(1, 2)),
    )
    members = draw(st.dictionaries(st.sampled_from(DOMAINS), st.integers(1, 3), max_size=4))
    target = draw(st.sampled_from(DOMAINS + ([""] if key == "zone" else [])))
    eligible = tuple(sorted(set(draw(st.lists(st.sampled_from(DOMAINS), max_size=4))) - {target}))
    return Case(rule, members, target, eligible)


def host_of(case: Case, domain: str, prefix: str) -> tuple[str, dict[str, str]]:
    """The id and labels of a host in ``domain`` ("" : in none)."""
    if case.rule.topology_key == "host":
        return f"{prefix}-{domain}", {}
    return f"{prefix}-{domain or 'none'}", ({"zone": domain} if domain else {})


def domains_named(case: Case, prefix: str) -> tuple[str | None, dict[str, int], tuple[str, ...]]:
    """The target's domain, the members and the eligible domains as the stores name them."""
    if case.rule.topology_key == "host":
        return (
            f"{prefix}-{case.target}",
            {f"{prefix}-{d}": n for d, n in case.members.items()},
            tuple(f"{prefix}-{d}" for d in case.eligible),
        )
    return case.target or None, dict(case.members), case.eligible


def in_python(case: Case, prefix: str) -> bool:
    target_id, labels = host_of(case, case.target, prefix)
    _, members, eligible = domains_named(case, prefix)
    return refusal(case.rule, domain_of(case.rule.topology_key, target_id, labels), members, eligible) is None


def in_the_engine(case: Case, prefix: str) -> bool:
    def healthy(domain: str) -> HostState:
        host_id, labels = host_of(case, domain, prefix)
        return HostState(host_id, "online", labels, Demand(64, 65536, 1000), Demand(0, 0, 0), 0, False, 0.0)

    target = healthy(case.target)
    fleet = Fleet.from_hosts([target, *(healthy(d) for d in case.eligible)])
    _, members, _ = domains_named(case, prefix)
    request = PlacementRequest(
        "vm", "vm", Demand(1, 512, 1), {}, Strategy.BEST_FIT, group=PlacementGroup(case.rule, members)
    )
    context = DecisionContext(now=0.0, offline_timeout=1.0, weights=Weights(), rng=random.Random(0))
    (verdict,) = [v for v in explain(fleet, request, context) if v.host_id == target.id]
    return verdict.passed


async def in_redis(stores: Stores, case: Case, prefix: str) -> bool:
    snapshot = stores.snapshot
    target_id, labels = host_of(case, case.target, prefix)
    _, members, eligible = domains_named(case, prefix)
    write = HostWrite(target_id, ROOMY, Overcommit(), Resources(cpu=0, memory_mb=0, disk_gb=0), labels, "online",
                      time.time(), False, Resources(cpu=0, memory_mb=0, disk_gb=0), 0)  # fmt: skip
    await snapshot.record_heartbeats([write], bump_interval=60.0)
    if members:
        counts: dict[str | bytes, str | int] = dict(members.items())
        await stores.redis.hset(snapshot.group_key(case.rule.id), mapping=counts)  # type: ignore[arg-type]
    vm_id = uuid.uuid4()
    result = await snapshot.claim_many([Claim(vm_id, target_id, NEED, GroupClaim(case.rule, eligible))], time.time())
    (outcome,) = result.results
    assert outcome.outcome in ("claimed", "group"), outcome
    after_claim = await snapshot.group_members([case.rule.id])
    await snapshot.release(vm_id)
    after_release = await snapshot.group_members([case.rule.id])
    await stores.redis.delete(snapshot.group_key(case.rule.id), snapshot.group_vms_key(case.rule.id))
    await snapshot.forget_host(target_id)
    domain = domain_of(case.rule.topology_key, target_id, labels)
    counted = {d: n for d, n in members.items() if n > 0}
    if outcome.outcome == "claimed" and domain is not None:
        assert after_claim[case.rule.id] == {**counted, domain: counted.get(domain, 0) + 1}
    else:
        assert after_claim[case.rule.id] == counted
    assert after_release[case.rule.id] == counted  # the release gave the place back
    return outcome.outcome == "claimed"


async def in_postgresql(stores: Stores, case: Case, prefix: str) -> Committed:
    target_id, target_labels = host_of(case, case.target, prefix)
    _, _, eligible = domains_named(case, prefix)
    hosts = {target_id: target_labels}
    vms: list[tuple[uuid.UUID, str]] = []
    for domain, count in case.members.items():
        host_id, labels = host_of(case, domain, prefix)
        hosts[host_id] = labels
        vms += [(uuid.uuid4(), host_id) for _ in range(count)]
    vm_id = uuid.uuid4()
    rule = case.rule
    async with stores.engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO server_groups (id, name, policy, topology_key, max_per_domain, max_skew) "
                "VALUES (:id, 'g', :policy, :key, :max_per_domain, :max_skew)"
            ),
            {"id": rule.id, "policy": rule.policy.value, "key": rule.topology_key,
             "max_per_domain": rule.max_per_domain, "max_skew": rule.max_skew},
        )  # fmt: skip
        for host_id, labels in hosts.items():
            await connection.execute(
                text(
                    "INSERT INTO hosts (id, status, labels, cpu, memory_mb, disk_gb) "
                    "VALUES (:id, 'online', CAST(:labels AS jsonb), 64, 65536, 1000)"
                ),
                {"id": host_id, "labels": json.dumps(labels)},
            )
        for member, host_id in vms:
            await connection.execute(
                text(
                    "INSERT INTO vms (id, name, status, hypervisor_id, cpu, memory_mb, disk_gb, server_group) "
                    "VALUES (:id, 'member', 'running', :host, 0, 0, 0, :group)"
                ),
                {"id": member, "host": host_id, "group": rule.id},
            )
        await connection.execute(
            text(
                "INSERT INTO vms (id, name, status, cpu, memory_mb, disk_gb, server_group) "
                "VALUES (:id, 'joining', 'pending', 1, 512, 1, :group)"
            ),
            {"id": vm_id, "group": rule.id},
        )
    record = PlacementRecord(
        strategy=Strategy.BEST_FIT, host=target_id, considered=1, eligible=1,
        decided_at="2026-01-01T00:00:00Z", decision_us=1.0,
    )  # fmt: skip
    placement = Placement(vm_id, 1, target_id, NEED, Strategy.BEST_FIT, record, GroupClaim(rule, eligible))
    settled = await stores.ledger.settle([placement], [])
    async with stores.engine.begin() as connection:
        await connection.execute(text("DELETE FROM vms WHERE server_group = :id"), {"id": rule.id})
        await connection.execute(text("DELETE FROM server_groups WHERE id = :id"), {"id": rule.id})
        await connection.execute(text("DELETE FROM hosts WHERE id = ANY(:ids)"), {"ids": list(hosts)})
    return settled.placements[0].outcome


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_python_the_engine_redis_and_postgresql_agree_on_every_group_rule(stores: Stores, case: Case) -> None:
    prefix = f"hv{uuid.uuid4().hex[:6]}"
    expected = in_python(case, prefix)
    assert in_the_engine(case, prefix) is expected
    assert stores.loop.run(in_redis(stores, case, prefix)) is expected
    assert stores.loop.run(in_postgresql(stores, case, prefix)) is (
        Committed.PLACED if expected else Committed.GROUP_REFUSED
    )


async def gang_claims(stores: Stores, rule: GroupRule, targets: list[str]) -> tuple[list[str], dict[str, int], int]:
    """An all-or-nothing claim of one member of ``rule`` per entry of ``targets`` (host ids, each
    created roomy): the outcomes, the group's counts after, and the vCPUs allocated on the hosts."""
    snapshot = stores.snapshot
    zero = Resources(cpu=0, memory_mb=0, disk_gb=0)
    hosts = sorted(set(targets))
    writes = [HostWrite(h, ROOMY, Overcommit(), zero, {}, "online", time.time(), False, zero, 0) for h in hosts]
    await snapshot.record_heartbeats(writes, bump_interval=60.0)
    vm_ids = [uuid.uuid4() for _ in targets]
    claims = [Claim(vm_id, host, NEED, GroupClaim(rule)) for vm_id, host in zip(vm_ids, targets, strict=True)]
    claimed = await snapshot.claim_many(claims, time.time(), all_or_nothing=True)
    counts = (await snapshot.group_members([rule.id]))[rule.id]
    allocated = 0
    for host in hosts:
        allocated += int(await stores.redis.hget(snapshot.host_key(host), "a_cpu") or 0)
    await snapshot.release_many(vm_ids)
    await stores.redis.delete(snapshot.group_key(rule.id), snapshot.group_vms_key(rule.id))
    for host in hosts:
        await snapshot.forget_host(host)
    return [result.outcome for result in claimed.results], counts, allocated


def test_an_all_or_nothing_claim_counts_the_members_it_would_add_and_reserves_none_if_the_group_refuses_one(
    stores: Stores,
) -> None:
    rule = GroupRule(uuid.uuid4(), GroupPolicy.ANTI_AFFINITY)
    prefix = f"hv{uuid.uuid4().hex[:6]}"
    a, b = f"{prefix}-a", f"{prefix}-b"
    # Each member alone fits a; together they break the rule: nothing reserved, nothing counted.
    outcomes, counts, allocated = stores.loop.run(gang_claims(stores, rule, [a, b, a]))
    assert outcomes == ["gang", "gang", "group"]
    assert (counts, allocated) == ({}, 0)
    outcomes, counts, allocated = stores.loop.run(gang_claims(stores, rule, [a, b]))
    assert outcomes == ["claimed", "claimed"]
    assert (counts, allocated) == ({a: 1, b: 1}, 2 * NEED.cpu)


def test_an_all_or_nothing_claim_of_an_affinity_group_sends_every_member_to_the_first_ones_domain(
    stores: Stores,
) -> None:
    rule = GroupRule(uuid.uuid4(), GroupPolicy.AFFINITY)
    prefix = f"hv{uuid.uuid4().hex[:6]}"
    a, b = f"{prefix}-a", f"{prefix}-b"
    outcomes, counts, _ = stores.loop.run(gang_claims(stores, rule, [a, b]))
    assert outcomes == ["gang", "group"]
    assert counts == {}
    outcomes, counts, _ = stores.loop.run(gang_claims(stores, rule, [a, a]))
    assert (outcomes, counts) == (["claimed", "claimed"], {a: 2})
