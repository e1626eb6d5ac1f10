"""What a group of DELETE requests decides (pure: the VMs as locked, the requests in their order)."""

from __future__ import annotations

import uuid

from tests.unit.test_vm_changes import vm
from vmsched_api.vm_deletes import Asked, DeleteAsk, decide
from vmsched_contract.status import VmStatus


def test_each_request_is_answered_for_its_own_vm_and_project() -> None:
    running, pending, theirs = (
        vm(VmStatus.RUNNING),
        vm(VmStatus.PENDING, host=None),
        vm(VmStatus.RUNNING, project="other"),
    )
    found = {v.id: v for v in (running, pending, theirs)}
    asks = [
        DeleteAsk(running.id, "default"),
        DeleteAsk(pending.id, None),  # an admin's: any project's VM
        DeleteAsk(theirs.id, "default"),  # not the asker's project: as if it did not exist
        DeleteAsk(uuid.uuid4(), None),  # no such VM
    ]

    answers, changes = decide(found, asks)

    first, second, third, fourth = answers
    assert first is not None
    assert first.vm.status is VmStatus.DELETING
    assert second is not None
    assert second.vm.status is VmStatus.DELETED
    assert (third, fourth) == (None, None)
    assert changes == [first.change, second.change]


def test_a_second_request_for_one_vm_sees_what_the_first_did() -> None:
    running = vm(VmStatus.RUNNING)
    asks = [DeleteAsk(running.id, None), DeleteAsk(running.id, None)]

    (first, second), changes = decide({running.id: running}, asks)

    assert first is not None
    assert first.change is not None
    assert second == Asked(first.vm, None)  # already deleting: nothing more to do, as one after the other
    assert len(changes) == 1


def test_nothing_found_changes_nothing() -> None:
    assert decide({}, [DeleteAsk(uuid.uuid4(), "default")]) == ([None], [])
