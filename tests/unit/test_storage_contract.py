"""The storage pools' contract: what a heartbeat, a VM and the operator may say (bad input is refused
by the models: a 422 naming the field over HTTP, the dead-letter queue for a message)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from vmsched_contract.api import VmRequest
from vmsched_contract.messages import AgentHeartbeat, Resources
from vmsched_contract.storage import MAX_POOLS_PER_HOST, PoolKind, SharedPoolBody, StoragePool

CAPACITY = Resources(cpu=1, memory_mb=1, disk_gb=1)


def test_a_local_pool_needs_its_capacity_and_a_shared_one_names_none() -> None:
    with pytest.raises(ValidationError, match="a local pool needs capacity_gb"):
        StoragePool(name="local", kind=PoolKind.LOCAL)
    assert StoragePool(name="ceph", kind=PoolKind.SHARED).capacity_gb is None


def test_a_heartbeat_lists_at_most_its_pools_and_a_bad_one_is_refused() -> None:
    pools = [{"name": f"p{n}", "kind": "shared"} for n in range(MAX_POOLS_PER_HOST + 1)]
    with pytest.raises(ValidationError, match="storage_pools"):
        AgentHeartbeat(agent_id="hv-1", capacity=CAPACITY, storage_pools=pools)
    with pytest.raises(ValidationError, match=r"storage_pools\.0\.name"):
        AgentHeartbeat.model_validate(
            {"agent_id": "hv-1", "capacity": CAPACITY.model_dump(), "storage_pools": [{"name": "a b", "kind": "local"}]}
        )


def test_a_heartbeat_without_pools_is_the_message_it_was() -> None:
    assert "storage_pools" not in AgentHeartbeat(agent_id="hv-1", capacity=CAPACITY).model_dump()


@pytest.mark.parametrize(
    ("volumes", "field"),
    [([{"size_gb": 0}], "volumes.0.size_gb"), ([{"size_gb": 1, "tags": ["a b"]}], "volumes.0.tags.0"),
     ([{"size_gb": 1}] * 17, "volumes")],
)  # fmt: skip
def test_a_vm_asking_bad_volumes_is_refused_naming_the_field(volumes: list[dict[str, object]], field: str) -> None:
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        VmRequest.model_validate({"name": "v", "disk_gb": 1, "volumes": volumes})


def test_a_shared_pools_capacity_is_not_negative() -> None:
    with pytest.raises(ValidationError, match="capacity_gb"):
        SharedPoolBody(capacity_gb=-1)
