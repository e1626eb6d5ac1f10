"""The router's choice of cells (vmsched_router.choice) and a cell's summary (vmsched_api.cell_summary):
pure functions, without servers. The choice is checked against an obvious model: a cell is eligible
when some host it summarises could take each VM."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from vmsched_api.cell_summary import summarize
from vmsched_contract.cells import CellSummary, LabelSetSummary
from vmsched_contract.messages import HostSelectorTerm, Overcommit, Resources, SelectorOperator
from vmsched_domain.records import HostRecord
from vmsched_router.choice import Demand, carries_labels, cells_to_try, has_room


def host(
    host_id: str,
    cpu: int,
    memory_mb: int,
    *,
    labels: dict[str, str] | None = None,
    alloc_cpu: int = 0,
    alloc_memory_mb: int = 0,
    status: str = "online",
    paused: bool = False,
    cpu_ratio: float = 1.0,
    reserved_cpu: int = 0,
) -> HostRecord:
    return HostRecord(
        id=host_id,
        status=status,
        labels=labels or {},
        capacity=Resources(cpu=cpu, memory_mb=memory_mb, disk_gb=100),
        overcommit=Overcommit(cpu=cpu_ratio),
        reserved=Resources(cpu=reserved_cpu, memory_mb=0, disk_gb=0),
        allocated=Resources(cpu=alloc_cpu, memory_mb=alloc_memory_mb, disk_gb=0),
        vm_count=0,
        scheduling_paused=paused,
        last_heartbeat=datetime.now(UTC),
    )


def demand(cpu: int, memory_mb: int = 1, **labels: str) -> Demand:
    return Demand(amounts={"cpu": cpu, "memory_mb": memory_mb, "disk_gb": 0, "gpu": 0}, labels=labels)


def zone_in(*zones: str) -> tuple[HostSelectorTerm, ...]:
    return (HostSelectorTerm(key="zone", operator=SelectorOperator.IN, values=list(zones)),)


def test_a_summary_groups_schedulable_hosts_by_labels_with_the_fit_rules_room() -> None:
    summary = summarize(
        [
            host("h1", 16, 4096, labels={"zone": "a"}, alloc_cpu=4, cpu_ratio=2.0, reserved_cpu=2),
            host("h2", 8, 4096, labels={"zone": "a"}, alloc_memory_mb=1024),
            host("h3", 64, 65536, labels={"zone": "b"}, status="offline"),
            host("h4", 64, 65536, labels={"zone": "b"}, paused=True),
        ],
        waiting=3,
    )
    assert (summary.hosts, summary.schedulable_hosts, summary.waiting) == (4, 2, 3)
    (zone_a,) = summary.label_sets
    # h1: floor((16 - 2) x 2) - 4 = 24 cpus free; h2: 8.
    assert zone_a.free["cpu"] == 32
    assert zone_a.largest == {"cpu": 24, "memory_mb": 4096, "disk_gb": 100, "gpu": 0}
    assert summary.allocatable["cpu"] == 36
    assert summary.free["memory_mb"] == 4096 + 3072


def test_a_cell_without_the_zone_asked_for_is_not_chosen() -> None:
    cells = {
        "a": summarize([host("a1", 8, 8192, labels={"zone": "a"})], 0),
        "b": summarize([host("b1", 8, 8192, labels={"zone": "b"})], 0),
    }
    wanted = Demand(amounts={"cpu": 1}, selector=zone_in("b"))
    assert cells_to_try(cells, [wanted]) == ["b"]
    assert cells_to_try(cells, [demand(1, zone="a")]) == ["a"]


def test_a_cell_with_room_comes_before_a_less_loaded_one_without() -> None:
    cells = {
        "roomy": summarize([host("r1", 32, 65536, alloc_cpu=16)], 0),  # half loaded, 16 cpus free
        "empty": summarize([host("e1", 8, 65536)], 0),  # empty, but 8 cpus in all
    }
    assert cells_to_try(cells, [demand(12)]) == ["roomy", "empty"]
    assert cells_to_try(cells, [demand(2)]) == ["empty", "roomy"]


def test_a_batch_must_fit_the_cells_free_total() -> None:
    cells = {"a": summarize([host("a1", 8, 8192), host("a2", 8, 8192)], 0)}
    assert has_room(cells["a"], [demand(8), demand(8)])
    assert not has_room(cells["a"], [demand(8), demand(8), demand(1)])


def test_cells_without_a_summary_are_skipped_and_none_gives_nothing_to_try() -> None:
    up = summarize([host("a1", 8, 8192)], 0)
    assert cells_to_try({"down": None, "up": up}, [demand(1)]) == ["up"]
    assert cells_to_try({"down": None}, [demand(1)]) == []


def test_when_no_cell_carries_the_labels_the_least_loaded_cell_answers_alone() -> None:
    cells = {
        "busy": summarize([host("b1", 8, 8192, alloc_cpu=6)], 0),
        "idle": summarize([host("i1", 8, 8192)], 0),
    }
    assert cells_to_try(cells, [demand(1, rack="r9")]) == ["idle"]


def test_a_request_body_reads_as_the_cell_reads_it_with_its_defaults() -> None:
    read = Demand.of({"name": "x", "disk_gb": 5, "extra": {"fpga": 1}, "labels": {"zone": "a"}}, 4, 8192)
    assert read.amounts == {"cpu": 4, "memory_mb": 8192, "disk_gb": 5, "gpu": 0, "fpga": 1}
    assert read.labels == {"zone": "a"}


# -- the choice against a model: per host, by hand ---------------------------------------------------------

ZONES = ("a", "b", "c")
hosts_strategy = st.lists(
    st.builds(
        lambda cpu, used, zone, online: (cpu, min(used, cpu), zone, online),
        st.integers(0, 32),
        st.integers(0, 32),
        st.sampled_from(ZONES),
        st.booleans(),
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(("c1", "c2", "c3")), hosts_strategy, min_size=1),
    st.integers(1, 32),
    st.none() | st.sampled_from(ZONES),
)
def test_the_cells_to_try_are_those_whose_hosts_could_take_the_vm_roomy_first_least_loaded_first(
    fleets: dict[str, list[tuple[int, int, str, bool]]], cpu: int, zone: str | None
) -> None:
    summaries: dict[str, CellSummary | None] = {
        name: summarize(
            [
                host(
                    f"{name}-{i}",
                    cpu_total,
                    1024,
                    labels={"zone": z},
                    alloc_cpu=used,
                    status="online" if on else "offline",
                )
                for i, (cpu_total, used, z, on) in enumerate(hosts)
            ],
            0,
        )
        for name, hosts in fleets.items()
    }
    wanted = Demand(amounts={"cpu": cpu}, selector=zone_in(zone) if zone else ())
    tried = cells_to_try(summaries, [wanted])

    def usable(name: str) -> list[tuple[int, int, str, bool]]:
        return [h for h in fleets[name] if h[3] and (zone is None or h[2] == zone)]

    carrying = {name for name in fleets if usable(name)}
    roomy = {name for name in carrying if any(total - used >= cpu for total, used, _, _ in usable(name))}
    if not carrying:
        assert len(tried) == 1  # the least-loaded cell answers alone
        return
    assert set(tried) == carrying
    assert set(tried[: len(roomy)]) == roomy
    for first, second in itertools.pairwise(tried):
        if (first in roomy) == (second in roomy):
            a, b = summaries[first], summaries[second]
            assert a is not None
            assert b is not None
            assert a.load() <= b.load()


@given(st.lists(st.tuples(st.integers(0, 64), st.integers(0, 64)), min_size=1, max_size=8))
def test_a_cells_load_is_between_zero_and_one(amounts: list[tuple[int, int]]) -> None:
    summary = summarize([host(f"h{i}", total, 1024, alloc_cpu=used) for i, (total, used) in enumerate(amounts)], 0)
    assert 0.0 <= summary.load() <= 1.0


def test_a_label_set_summary_is_a_summary_not_a_host_list() -> None:
    summary = summarize([host(f"h{i}", 8, 1024, labels={"zone": "a"}) for i in range(100)], 0)
    assert summary.label_sets == [
        LabelSetSummary(
            labels={"zone": "a"},
            hosts=100,
            free={"cpu": 800, "memory_mb": 102400, "disk_gb": 10000, "gpu": 0},
            largest={"cpu": 8, "memory_mb": 1024, "disk_gb": 100, "gpu": 0},
        )
    ]
    assert carries_labels(summary, [demand(1, zone="a")])
