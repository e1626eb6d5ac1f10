"""Message models: what they accept, what they refuse, and deterministic ids."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError

from vmsched_contract.messages import (
    MAX_VMS_PER_MESSAGE,
    AgentHeartbeat,
    HostSelectorTerm,
    Resources,
    SelectorOperator,
    VmCreate,
    VmToPlace,
    batch_message_id,
)


def vm(**overrides: object) -> VmToPlace:
    fields: dict[str, object] = {
        "vm_id": uuid.uuid4(),
        "name": "web-1",
        "resources": Resources(cpu=2, memory_mb=4096, disk_gb=20),
        **overrides,
    }
    return VmToPlace.model_validate(fields)


def test_vm_create_carries_the_vms_of_one_request_and_round_trips_through_json() -> None:
    message = VmCreate(vms=[vm(labels={"zone": "eu-1"}, exclude_hosts=["hv-3"], attempt=2), vm(name="web-2")])
    assert VmCreate.model_validate_json(message.model_dump_json()) == message
    assert message.schema_version == 2


def test_a_vm_create_carries_the_host_selector_and_one_without_it_selects_every_host() -> None:
    selector = [HostSelectorTerm(key="zone", operator=SelectorOperator.IN, values=["z1", "z2"])]
    message = VmCreate(vms=[vm(host_selector=selector)])
    assert VmCreate.model_validate_json(message.model_dump_json()).vms[0].host_selector == selector
    # What a producer of before host selectors sends (same schema version) still parses.
    body = (
        '{"schema_version": 2, "vms": [{"vm_id": "6f1c1a34-8a4e-4a8e-9b59-1e1f1d1b1a10", "name": "a", '
        '"resources": {"cpu": 1, "memory_mb": 1, "disk_gb": 1}}]}'
    )
    assert VmCreate.model_validate_json(body).vms[0].host_selector == []


@pytest.mark.parametrize(
    ("term", "message"),
    [
        ({"key": "zone", "operator": "In"}, "operator In needs at least one value"),
        ({"key": "zone", "operator": "NotIn", "values": []}, "operator NotIn needs at least one value"),
        ({"key": "zone", "operator": "Exists", "values": ["z1"]}, "operator Exists takes no values"),
        ({"key": "zone", "operator": "DoesNotExist", "values": ["z1"]}, "operator DoesNotExist takes no values"),
    ],
)
def test_a_selector_term_s_values_must_suit_its_operator(term: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message) as refused:
        HostSelectorTerm.model_validate(term)
    assert refused.value.errors()[0]["loc"] == ("values",)


def test_a_vm_create_of_no_vm_or_too_many_is_refused() -> None:
    with pytest.raises(ValidationError, match="at least 1 item"):
        VmCreate(vms=[])
    with pytest.raises(ValidationError, match=f"at most {MAX_VMS_PER_MESSAGE} items"):
        VmCreate(vms=[vm()] * (MAX_VMS_PER_MESSAGE + 1))


def test_a_message_of_another_schema_version_is_refused() -> None:
    body = '{"schema_version": 1, "vm_id": "6f1c1a34-8a4e-4a8e-9b59-1e1f1d1b1a10", "name": "a"}'
    with pytest.raises(ValidationError, match="schema_version"):
        VmCreate.model_validate_json(body)


def test_consumers_ignore_fields_a_newer_producer_added() -> None:
    body = (
        '{"vms": [{"vm_id": "6f1c1a34-8a4e-4a8e-9b59-1e1f1d1b1a10", "name": "a", '
        '"resources": {"cpu": 1, "memory_mb": 1, "disk_gb": 1}, "future_field": 3}], "other": 1}'
    )
    assert VmCreate.model_validate_json(body).vms[0].name == "a"


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


def test_message_ids_are_made_from_the_vms_they_carry() -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    assert batch_message_id("assigned", [(first, 1)]) == f"{first}:assigned:1"
    assert batch_message_id("assigned", [(first, 1), (second, 1)]) == f"{first}:assigned:1+1"
    assert batch_message_id("assigned", [(first, 1)]) != batch_message_id("assigned", [(first, 2)])


def test_resources_carry_named_extras_and_leave_them_out_of_json_when_there_are_none() -> None:
    plain = Resources(cpu=1, memory_mb=1, disk_gb=1)
    assert plain.extra == {}
    assert "extra" not in plain.model_dump_json()  # what consumers that predate extras accept
    accel = Resources(cpu=1, memory_mb=1, disk_gb=1, extra={"fpga": 2, "example.com/nic": 1})
    assert Resources.model_validate_json(accel.model_dump_json()) == accel
    assert accel.plus(Resources(cpu=1, memory_mb=1, disk_gb=1, extra={"fpga": 1})).extra == {
        "fpga": 3,
        "example.com/nic": 1,
    }
    assert accel.minus(Resources(cpu=1, memory_mb=1, disk_gb=1, extra={"fpga": 2})).extra == {"example.com/nic": 1}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"FPGA": 1}, "lowercase letters"),
        ({"-fpga": 1}, "lowercase letters"),
        ({"vendor/": 1}, "lowercase letters"),
        ({"memory_mb": 1}, "use the memory_mb field"),
        ({"fpga": -1}, "greater than or equal to 0"),
        ({f"r{i}": 1 for i in range(17)}, "at most 16 items"),
    ],
)
def test_a_heartbeat_with_bad_extras_is_refused(extra: dict[str, int], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        AgentHeartbeat.model_validate(
            {"agent_id": "hv-1", "capacity": {"cpu": 1, "memory_mb": 1, "disk_gb": 1, "extra": extra}}
        )


def test_a_heartbeat_advertises_extras_in_its_capacity() -> None:
    beat = AgentHeartbeat.model_validate_json(
        '{"agent_id": "hv-1", "capacity": {"cpu": 1, "memory_mb": 1, "disk_gb": 1, "extra": {"fpga": 2}}}'
    )
    assert beat.capacity.extra == {"fpga": 2}
