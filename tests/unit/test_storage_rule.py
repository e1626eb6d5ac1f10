"""The storage pool rule (vmsched_domain.storage): first fit in request order, pools in name order,
tags a subset, room counted with the volumes placed before; the claim's check agrees with it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from vmsched_domain.storage import PoolRoom, VolumeAsk, assign_volumes, per_pool, pool_fits, reason, refusal

SSD = frozenset({"ssd"})
LOCAL = PoolRoom("local", False, 100, 40, SSD)
CEPH = PoolRoom("ceph", True, 1000, 900, frozenset({"ssd", "replicated"}))


def test_a_pool_fits_up_to_its_capacity_exactly() -> None:
    assert pool_fits(60, 100, 40)
    assert not pool_fits(61, 100, 40)


def test_volumes_go_first_fit_in_name_order() -> None:
    assert assign_volumes([VolumeAsk(50, SSD)], [LOCAL, CEPH]) == ("ceph",)
    assert assign_volumes([VolumeAsk(100), VolumeAsk(60)], [LOCAL, CEPH]) == ("ceph", "local")


def test_a_volume_needs_every_tag_it_asks_for() -> None:
    assert assign_volumes([VolumeAsk(10, frozenset({"replicated"}))], [LOCAL]) is None
    assert assign_volumes([VolumeAsk(10, frozenset({"replicated"}))], [LOCAL, CEPH]) == ("ceph",)


def test_the_volumes_before_count_against_a_pool() -> None:
    assert assign_volumes([VolumeAsk(60), VolumeAsk(1)], [LOCAL]) is None
    assert assign_volumes([VolumeAsk(30), VolumeAsk(30)], [LOCAL]) == ("local", "local")


def test_the_reason_names_the_volume_and_every_pool_with_the_numbers() -> None:
    assert reason([VolumeAsk(70, SSD)], [LOCAL]) == (
        "storage: volume 1 (70 GB tagged ssd) fits no pool (local local 60 GB free of 100, ssd)"
    )
    assert reason([VolumeAsk(5)], []) == "storage: the host reaches no storage pool"


def test_refusal_names_an_unreached_pool_missing_tags_and_room() -> None:
    pools = {"local": LOCAL}
    assert refusal({"ceph": 1}, pools, {}) == "storage: pool ceph not reached by the host"
    assert refusal({"local": 1}, pools, {"local": frozenset({"nvme"})}) == "storage: pool local lacks tags nvme"
    assert refusal({"local": 61}, pools, {}) == "storage: pool local needs 61 GB, 60 GB free"
    assert refusal({"local": 60}, pools, {"local": SSD}) is None


TAGS = st.frozensets(st.sampled_from(["ssd", "hdd", "replicated"]), max_size=2)


@st.composite
def pools(draw: st.DrawFn) -> list[PoolRoom]:
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "local"]), unique=True, max_size=4))
    found = []
    for name in names:
        capacity = draw(st.integers(0, 200))
        found.append(PoolRoom(name, draw(st.booleans()), capacity, draw(st.integers(0, capacity + 20)), draw(TAGS)))
    return found


volumes = st.lists(
    st.builds(VolumeAsk, st.integers(1, 120), TAGS, st.one_of(st.none(), st.none(), st.sampled_from(["a", "b"]))),
    min_size=1,
    max_size=4,
)


def test_a_volume_that_stays_needs_its_shared_pool_reached_and_takes_no_room() -> None:
    staying = VolumeAsk(500, SSD, stays_on="ceph")
    # Ceph has 100 GB free: the 500 GB volume staying there takes none of it.
    assert assign_volumes([staying, VolumeAsk(60)], [LOCAL, CEPH]) == ("ceph", "ceph")
    assert per_pool([staying, VolumeAsk(60)], ("ceph", "ceph")) == {"ceph": 60}
    assert assign_volumes([staying], [LOCAL]) is None
    assert assign_volumes([VolumeAsk(1, stays_on="local")], [LOCAL]) is None  # a local pool is not kept


@given(pools(), volumes)
def test_an_assignment_is_what_the_claim_accepts_and_none_means_some_volume_fits_nowhere(
    reached: list[PoolRoom], asked: list[VolumeAsk]
) -> None:
    chosen = assign_volumes(asked, reached)
    by_name = {pool.name: pool for pool in reached}
    if chosen is None:
        assert reason(asked, reached).startswith("storage: ")
        return
    tags: dict[str, frozenset[str]] = {}
    for volume, name in zip(asked, chosen, strict=True):
        if volume.stays_on is None:
            tags[name] = tags.get(name, frozenset()) | volume.tags
    assert refusal(per_pool(asked, chosen), by_name, tags) is None


@given(pools(), st.builds(VolumeAsk, st.integers(1, 120), TAGS))
def test_one_volume_fits_exactly_when_some_pool_has_the_tags_and_room(reached: list[PoolRoom], one: VolumeAsk) -> None:
    expected = any(one.tags <= p.tags and p.allocated_gb + one.size_gb <= p.capacity_gb for p in reached)
    assert (assign_volumes([one], reached) is not None) == expected
