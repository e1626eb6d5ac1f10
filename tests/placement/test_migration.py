from __future__ import annotations

from dataclasses import replace

from tests.placement.filter_checks import passes, reason
from tests.placement.support import context, fleet_of, host, request
from vmsched_placement import decide
from vmsched_placement.filters import MigrationFilter
from vmsched_placement.model import Migration

CAPABLE = replace(host("hv-02"), can_migrate=True)
MOVE = replace(request(), migration=Migration(source="hv-01"))


def test_migration_passes_every_host_for_a_placement() -> None:
    assert passes(MigrationFilter(), host(), request())


def test_migration_passes_a_host_whose_agent_can_migrate() -> None:
    assert passes(MigrationFilter(), CAPABLE, MOVE)


def test_migration_fails_a_host_whose_agent_cannot_migrate() -> None:
    assert not passes(MigrationFilter(), host("hv-02"), MOVE)
    assert reason(MigrationFilter(), host("hv-02"), MOVE) == (
        "migration: its agent cannot migrate VMs (it does not declare the 'migrate' capability)"
    )


def test_migration_fails_every_host_but_the_one_asked_for() -> None:
    to_hv_03 = replace(request(), migration=Migration(source="hv-01", target_host="hv-03"))
    assert not passes(MigrationFilter(), CAPABLE, to_hv_03)
    assert reason(MigrationFilter(), CAPABLE, to_hv_03) == "migration: not the host asked for (hv-03)"
    assert passes(MigrationFilter(), replace(CAPABLE, id="hv-03"), to_hv_03)


def test_a_migration_never_chooses_its_source_nor_a_host_that_cannot_migrate() -> None:
    fleet = fleet_of(
        replace(host("hv-01"), can_migrate=True),  # the source: emptiest
        replace(host("hv-02", used_cpu=8), can_migrate=True),
        host("hv-03"),  # empty, but cannot migrate
    )
    move = replace(request(), migration=Migration(source="hv-01"), exclude_hosts=frozenset({"hv-01"}))
    decision = decide(fleet, move, context())
    assert decision.host_id == "hv-02"
    assert dict(decision.rejections) == {"excluded": 1, "migration": 1}
