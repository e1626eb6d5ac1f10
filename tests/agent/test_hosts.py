"""Which hosts a simulated fleet pretends to be."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from vmsched_agent.hosts import (
    HOST_CLASSES,
    HostSpec,
    Profile,
    dump_hosts,
    generate_hosts,
    load_hosts,
    parse_labels,
)
from vmsched_contract.messages import Overcommit, Resources

CAPACITY = Resources(cpu=32, memory_mb=131072, disk_gb=1000)


def test_uniform_hosts_are_numbered_from_one_and_padded_to_sort() -> None:
    hosts = generate_hosts(3, prefix="rack", capacity=CAPACITY)

    assert [h.id for h in hosts] == ["rack-0001", "rack-0002", "rack-0003"]
    assert {h.capacity for h in hosts} == {CAPACITY}
    assert generate_hosts(12_000, capacity=CAPACITY)[-1].id == "sim-12000"


def test_zones_are_spread_round_robin_and_labels_added_to_every_host() -> None:
    hosts = generate_hosts(7, capacity=CAPACITY, zones=3, labels={"rack": "r1"})

    assert Counter(h.labels["zone"] for h in hosts) == {"z1": 3, "z2": 2, "z3": 2}
    assert all(h.labels["rack"] == "r1" for h in hosts)


def test_a_mixed_fleet_is_the_same_for_the_same_seed_and_has_gpu_hosts() -> None:
    first = generate_hosts(200, capacity=CAPACITY, profile=Profile.MIXED, seed=7)
    again = generate_hosts(200, capacity=CAPACITY, profile=Profile.MIXED, seed=7)
    other = generate_hosts(200, capacity=CAPACITY, profile=Profile.MIXED, seed=8)

    assert first == again
    assert first != other
    sizes = Counter(h.labels["size"] for h in first)
    assert set(sizes) == set(HOST_CLASSES)
    assert all(h.capacity.gpu > 0 for h in first if h.labels["size"] == "gpu")


def test_hosts_round_trip_through_a_file_and_keep_their_own_labels(tmp_path: Path) -> None:
    hosts = [
        HostSpec(id="a", capacity=CAPACITY, labels={"zone": "mine"}, overcommit=Overcommit(cpu=4.0)),
        HostSpec(id="b", capacity=CAPACITY),
    ]
    path = tmp_path / "hosts.json"
    path.write_text(dump_hosts(hosts))

    loaded = load_hosts(path, labels={"env": "test"}, zones=2)

    assert loaded[0].labels == {"env": "test", "zone": "mine"}  # a host's own label wins
    assert loaded[1].labels == {"env": "test", "zone": "z2"}
    assert loaded[0].overcommit.cpu == 4.0


def test_hosts_may_come_one_per_line_with_extra_fields_ignored(tmp_path: Path) -> None:
    path = tmp_path / "hosts.jsonl"
    path.write_text(
        '{"id": "h1", "status": "online", "capacity": {"cpu": 4, "memory_mb": 8192, "disk_gb": 50}}\n\n'
        '{"id": "h2", "capacity": {"cpu": 8, "memory_mb": 8192, "disk_gb": 50, "gpu": 1}}\n'
    )

    assert [(h.id, h.capacity.gpu) for h in load_hosts(path)] == [("h1", 0), ("h2", 1)]


def test_a_host_with_a_bad_id_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    path.write_text('[{"id": "no spaces", "capacity": {"cpu": 1, "memory_mb": 1, "disk_gb": 1}}]')

    with pytest.raises(ValidationError, match="id"):
        load_hosts(path)


def test_labels_parse_from_key_value_pairs() -> None:
    assert parse_labels("env=prod, tier = gold,") == {"env": "prod", "tier": "gold"}
    assert parse_labels("") == {}
    with pytest.raises(ValueError, match="not key=value"):
        parse_labels("env")
