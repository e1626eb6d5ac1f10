"""Whose word the gateway takes: a host's broker user named after it, the check of a message's
user_id, the permissions an enrolled agent gets, and which VMs a host may report about."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.test_vm_changes import NOW, vm
from vmsched_amqp import topology
from vmsched_amqp.agent_identity import agent_username, host_of_username, vhost_of, with_credentials
from vmsched_contract.status import VmStatus
from vmsched_domain.records import VmRecord
from vmsched_domain.vm_changes import agent_failed
from vmsched_gateway.enrollment import agent_permissions
from vmsched_gateway.identity import Refusal, placed_on, speaker_refusal
from vmsched_runtime.settings import AgentAuth

host_ids = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,40}\Z")
vhosts = st.one_of(st.just("/"), st.text(min_size=1, max_size=30).filter(lambda v: v != "/"))


def test_an_agent_user_is_named_after_its_host_and_the_virtual_host() -> None:
    assert agent_username("hv-0001", "/") == "agent-hv-0001"
    assert agent_username("hv-0001", "prod") == "agent-hv-0001@prod"


def test_a_name_that_is_not_a_host_id_makes_no_user() -> None:
    with pytest.raises(ValueError, match="not a host id"):
        agent_username("hv 1", "/")


@given(host_id=host_ids, vhost=vhosts)
def test_the_user_of_a_host_maps_back_to_that_host(host_id: str, vhost: str) -> None:
    assert host_of_username(agent_username(host_id, vhost), vhost) == host_id


@given(host_id=host_ids, vhost=vhosts, other=vhosts)
def test_an_agent_of_another_virtual_host_speaks_for_no_host_here(host_id: str, vhost: str, other: str) -> None:
    if other != vhost:
        assert host_of_username(agent_username(host_id, other), vhost) != host_id


@pytest.mark.parametrize("user", ["guest", "vmsched", "agent-", "agent-@prod", "agent-hv 1", "xagent-hv1"])
def test_a_user_that_is_no_agent_maps_to_no_host(user: str) -> None:
    assert host_of_username(user, "/") is None
    assert host_of_username(user, "prod") is None


@pytest.mark.parametrize(
    ("url", "vhost"),
    [
        ("amqp://guest:guest@127.0.0.1:5672/", "/"),
        ("amqp://guest:guest@127.0.0.1:5672", "/"),
        ("amqp://guest:guest@127.0.0.1:5672/%2F", "/"),
        ("amqp://guest:guest@127.0.0.1:5672/vmsched-test-1", "vmsched-test-1"),
        ("amqp://u:p@a:5672,b:5673/prod", "prod"),
    ],
)
def test_the_virtual_host_is_read_from_the_url_as_aio_pika_reads_it(url: str, vhost: str) -> None:
    assert vhost_of(url) == vhost


def test_an_agents_url_keeps_every_node_and_the_virtual_host_with_its_own_credentials() -> None:
    url = with_credentials("amqps://vmsched:s3cret@a:5671,b:5671/prod?heartbeat=30", "agent-hv1@prod", "pw/1")
    assert url == "amqps://agent-hv1%40prod:pw%2F1@a:5671,b:5671/prod?heartbeat=30"
    assert vhost_of(url) == "prod"


def test_without_auth_anyone_speaks_for_any_host() -> None:
    assert speaker_refusal(AgentAuth.OFF, None, "hv1", "/") is None
    assert speaker_refusal(AgentAuth.OFF, "agent-hv2", "hv1", "/") is None


def test_with_auth_only_the_hosts_own_user_speaks_for_it() -> None:
    assert speaker_refusal(AgentAuth.REQUIRED, "agent-hv1@prod", "hv1", "prod") is None
    refusal, detail = speaker_refusal(AgentAuth.REQUIRED, "agent-hv2@prod", "hv1", "prod") or (None, "")
    assert refusal is Refusal.WRONG_USER
    assert "'agent-hv2@prod'" in detail
    assert "'agent-hv1@prod'" in detail


@pytest.mark.parametrize("user", [None, ""])
def test_with_auth_a_message_without_user_id_is_refused_and_told_how_to_enroll(user: str | None) -> None:
    refusal, detail = speaker_refusal(AgentAuth.REQUIRED, user, "hv1", "/") or (None, "")
    assert refusal is Refusal.NO_USER
    assert "vmsched-gateway enroll-agent hv1" in detail


@pytest.mark.parametrize("user", ["guest", "agent-hv1@other", "agent-hv1"])
def test_with_auth_a_service_user_or_another_installations_agent_is_refused(user: str) -> None:
    refusal = speaker_refusal(AgentAuth.REQUIRED, user, "hv1", "prod")
    assert refusal is not None
    assert refusal[0] is Refusal.WRONG_USER


def test_an_agent_may_read_only_its_own_queue() -> None:
    read = re.compile(agent_permissions("hv.1").read)
    assert read.match("agent.hv.1")
    for other in ("agent.hv-1", "agent.hvx1", "agent.hv.10", "agent.hv.1.x", "gateway.heartbeats", "agent.hv"):
        assert not read.match(other), other


def test_an_agent_may_publish_only_heartbeats_and_reports_and_configure_nothing() -> None:
    permissions = agent_permissions("hv1")
    assert not re.match(permissions.configure, topology.agent_queue_name("hv1"))
    write = re.compile(permissions.write)
    assert write.match(topology.EXCHANGE.name)
    assert write.match(topology.DEAD_LETTER_EXCHANGE.name)
    assert not write.match(topology.AGENTS_EXCHANGE.name)  # no commands to any host
    topics = {topic.exchange: topic for topic in permissions.topics}
    keys = re.compile(topics[topology.EXCHANGE.name].write)
    assert keys.match(topology.AGENT_HEARTBEAT)
    assert keys.match(topology.VM_STATUS)
    for key in (topology.VM_CREATE, topology.VM_ASSIGNED, topology.VM_DELETED, topology.AGENT_CONFLICT):
        assert not keys.match(key), key
    # What it dead-letters goes under its own host id (the key its commands come with), nothing else.
    dead_letters = re.compile(topics[topology.DEAD_LETTER_EXCHANGE.name].write)
    assert dead_letters.match("hv1")
    assert not dead_letters.match("hv2")
    assert not dead_letters.match(topology.VM_CREATE)
    assert all(topic.read == "^$" for topic in permissions.topics)


def _failed_on(host: str) -> VmRecord:
    """A VM whose create ``host`` refused: back to pending, to be placed elsewhere."""
    change = agent_failed(vm(VmStatus.SCHEDULED, host), host, "no room", NOW, max_attempts=3, exclude_for=600)
    assert change is not None
    return change.after


def test_a_host_may_report_about_a_vm_placed_on_it_now_or_before() -> None:
    assert placed_on(vm(VmStatus.RUNNING, "hv1"), "hv1")
    pending = _failed_on("hv1")
    assert pending.hypervisor_id is None
    assert placed_on(pending, "hv1")  # a late or repeated answer
    moved = replace(pending, status=VmStatus.RUNNING, hypervisor_id="hv2")
    assert placed_on(moved, "hv1")  # e.g. the answer to deleting the copy it still ran


def test_a_host_may_not_report_about_a_vm_it_never_had() -> None:
    assert not placed_on(vm(VmStatus.RUNNING, "hv2"), "hv1")
    assert not placed_on(_failed_on("hv2"), "hv1")
    assert not placed_on(vm(VmStatus.PENDING, None), "hv1")
