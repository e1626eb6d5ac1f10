"""The committed AsyncAPI document is the one the code generates (docs/asyncapi.json)."""

from __future__ import annotations

import json
from pathlib import Path

from vmsched_amqp import topology
from vmsched_api.asyncapi import document

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "asyncapi.json"


def test_the_committed_asyncapi_document_is_what_the_code_generates() -> None:
    generated = document()
    assert json.loads(generated) == json.loads(COMMITTED.read_text()), (
        "docs/asyncapi.json differs from the event contract in the code: run `make asyncapi` and commit it"
    )


def test_the_document_names_every_event_with_its_exchange_and_payload() -> None:
    spec = json.loads(COMMITTED.read_text())
    events = {
        topology.VM_CREATE: "VmCreate",
        topology.VM_ASSIGNED: "VmAssigned",
        topology.VM_UNSCHEDULABLE: "VmUnschedulable",
        topology.VM_WAITING: "VmWaiting",
        topology.VM_DELETED: "VmDeleted",
        topology.VM_ORPHANED: "VmOrphaned",
        topology.VM_PREEMPTED: "VmPreempted",
        topology.VM_MIGRATE: "VmMigrate",
        topology.VM_MIGRATING: "VmMigrating",
        topology.VM_MIGRATED: "VmMigrated",
        topology.VM_MIGRATION_FAILED: "VmMigrationFailed",
        topology.VM_STATUS: "VmStatusReport",
        topology.AGENT_HEARTBEAT: "AgentHeartbeat",
        topology.AGENT_CONFLICT: "AgentConflict",
        topology.HOST_FENCED: "HostFenced",
        topology.HOST_FENCE_FAILED: "HostFenceFailed",
        topology.HOST_FENCE_NEEDED: "HostFenceNeeded",
    }
    assert set(spec["channels"]) == {*events, "agent.<host id>"}
    command = spec["channels"]["agent.<host id>"]
    assert command["bindings"]["amqp"]["exchange"]["name"] == topology.AGENTS_EXCHANGE.name
    for routing_key, model in events.items():
        channel = spec["channels"][routing_key]
        assert channel["bindings"]["amqp"]["exchange"]["name"] == topology.EXCHANGE.name
        message = next(iter(channel["messages"].values()))["$ref"].rsplit("/", 1)[-1]
        assert spec["components"]["messages"][message]["payload"]["$ref"].endswith(f"/{model}")
