"""Message models: what they accept, what they refuse, and deterministic ids."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError

from vmsched_common.messages import AgentHeartbeat, Resources, VmCreate, assigned_message_id


def test_vm_create_round_trips_through_json() -> None:
    message = VmCreate(
        vm_id=uuid.uuid4(),
        name="web-1",
        resources=Resources(cpu=2, memory_mb=4096, disk_gb=20),
        labels={"zone": "eu-1"},
        exclude_hosts=["hv-3"],
        attempt=2,
    )
    assert VmCreate.model_validate_json(message.model_dump_json()) == message
    assert message.schema_version == 1


def test_consumers_ignore_fields_a_newer_producer_added() -> None:
    body = (
        '{"vm_id": "6f1c1a34-8a4e-4a8e-9b59-1e1f1d1b1a10", "name": "a", '
        '"resources": {"cpu": 1, "memory_mb": 1, "disk_gb": 1}, "future_field": 3}'
    )
    assert VmCreate.model_validate_json(body).name == "a"


@pytest.mark.parametrize(
    "body",
    [
        "{}",
        '{"agent_id": "", "capacity": {"cpu": 1, "memory_mb": 1, "disk_gb": 1}}',
        '{"agent_id": "hv 1", "capacity": {"cpu": 1, "memory_mb": 1, "disk_gb": 1}}',
        '{"agent_id": "hv-1", "capacity": {"cpu": -1, "memory_mb": 1, "disk_gb": 1}}',
    ],
)
def test_a_bad_heartbeat_is_refused(body: str) -> None:
    with pytest.raises(ValidationError):
        AgentHeartbeat.model_validate_json(body)


def test_assignment_ids_are_deterministic_per_attempt() -> None:
    vm_id = uuid.uuid4()
    assert assigned_message_id(vm_id, 1) == assigned_message_id(vm_id, 1)
    assert assigned_message_id(vm_id, 1) != assigned_message_id(vm_id, 2)
