"""Disruption budgets (vmsched_domain.disruption): who counts as unavailable and what a budget allows."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from vmsched_contract.status import VmStatus
from vmsched_domain.disruption import UNAVAILABLE_SQL, counted, is_unavailable

GROUP = uuid.uuid4()


def test_only_running_members_are_available_and_deleted_ones_are_no_members() -> None:
    assert not is_unavailable(VmStatus.RUNNING)
    assert not is_unavailable(VmStatus.DELETED)
    for status in (VmStatus.MIGRATING, VmStatus.PREEMPTED, VmStatus.STOPPED, VmStatus.FAILED, VmStatus.PENDING):
        assert is_unavailable(status)
        assert f"'{status.value}'" in UNAVAILABLE_SQL  # the SQL count says the same
    assert "'running'" not in UNAVAILABLE_SQL


def test_a_budget_of_one_allows_one_member_down() -> None:
    budget = counted(GROUP, 1, [VmStatus.RUNNING] * 3)
    assert budget.refusal() is None
    assert budget.refusal(2) is not None
    spent = budget.taken()
    assert spent.left == 0
    assert spent.refusal() == f"disruption_budget: server group {GROUP} allows 1 member(s) unavailable and has 1"


@given(
    max_unavailable=st.none() | st.integers(0, 5),
    statuses=st.lists(st.sampled_from(list(VmStatus)), max_size=8),
    taking=st.integers(1, 4),
)
def test_a_budget_refuses_exactly_what_would_leave_more_members_down_than_allowed(
    max_unavailable: int | None, statuses: list[VmStatus], taking: int
) -> None:
    budget = counted(GROUP, max_unavailable, statuses)
    down = sum(1 for status in statuses if is_unavailable(status))
    allowed = max_unavailable is None or down + taking <= max_unavailable
    assert (budget.refusal(taking) is None) == allowed
