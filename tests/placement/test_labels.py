from __future__ import annotations

from tests.placement.filter_checks import passes, reason
from tests.placement.support import host, request
from vmsched_placement.filters import LabelsFilter


def test_labels_passes_a_host_carrying_every_requested_label() -> None:
    tagged = host(labels={"zone": "eu-1", "gpu": "a100", "rack": "r7"})
    assert passes(LabelsFilter(), tagged, request(labels={"zone": "eu-1", "gpu": "a100"}))


def test_labels_passes_any_host_when_the_vm_asks_for_none() -> None:
    assert passes(LabelsFilter(), host(labels={}), request(labels={}))


def test_labels_fails_a_host_missing_a_label() -> None:
    assert not passes(LabelsFilter(), host(labels={"rack": "r7"}), request(labels={"zone": "eu-1"}))
    assert reason(LabelsFilter(), host(labels={"rack": "r7"}), request(labels={"zone": "eu-1"})) == (
        "labels: missing zone=eu-1"
    )


def test_labels_fails_a_host_with_another_value_and_says_which() -> None:
    other = host(labels={"zone": "us-1", "gpu": "a100"})
    req = request(labels={"zone": "eu-1", "gpu": "a100"})
    assert not passes(LabelsFilter(), other, req)
    assert reason(LabelsFilter(), other, req) == "labels: missing zone=eu-1 (host has zone=us-1)"
