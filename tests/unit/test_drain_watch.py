"""``vmsched hosts drain --wait`` off a terminal: a line for each change of the drain, none for a
poll that changed nothing, and a last line that says why it stopped following."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from vmsched_client import NotFound
from vmsched_client.cli import drain_watch
from vmsched_client.cli.app import app
from vmsched_client.cli.command import State
from vmsched_client.cli.exit_codes import ExitCode
from vmsched_contract.api import Drain, DrainedVm, DrainRequest, StuckVm
from vmsched_contract.status import DrainState

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
VMS = [uuid.UUID(int=n) for n in range(1, 4)]


def drain(
    state: DrainState = DrainState.DRAINING,
    moved: int = 0,
    in_flight: int = 0,
    stuck: int = 0,
    deadline: datetime | None = None,
) -> Drain:
    """A drain of three VMs; by default its deadline is ten minutes from the real now (the CLI reads
    the clock to tell an overdue drain)."""
    queued = len(VMS) - moved - in_flight - stuck
    return Drain(
        host_id="hv-0002",
        state=state,
        evacuate=True,
        max_parallel=4,
        deadline_at=deadline or datetime.now(UTC) + timedelta(minutes=10),
        created_at=NOW,
        ended_at=None,
        moved=[DrainedVm(vm_id=vm, to="hv-0003") for vm in VMS[:moved]],
        in_flight=VMS[moved : moved + in_flight],
        stuck=[StuckVm(vm_id=vm, reason="stopped") for vm in VMS[moved + in_flight : moved + in_flight + stuck]],
        queued=VMS[len(VMS) - queued :] if queued else [],
    )


def test_a_progress_line_counts_every_vm_and_names_why_each_stuck_one_is() -> None:
    assert drain_watch.progress_line(drain(moved=1, in_flight=1, stuck=1)) == (
        "hv-0002 draining: 1 of 3 moved, 1 in flight, 1 stuck, 0 queued; "
        "stuck: 00000000-0000-0000-0000-000000000003: stopped"
    )


def test_the_last_line_says_drained_or_why_not() -> None:
    assert drain_watch.why_it_stopped(drain(DrainState.DRAINED, moved=3)).startswith(
        "host hv-0002 drained: 3 VM(s) moved away"
    )
    assert drain_watch.why_it_stopped(drain(DrainState.TIMED_OUT, moved=2, stuck=1)) == (
        "host hv-0002 not drained: its deadline passed with 1 VM(s) left; 00000000-0000-0000-0000-000000000003: stopped"
    )
    assert "is the gateway running?" in drain_watch.why_it_stopped(drain())


def test_a_drain_still_draining_well_past_its_deadline_is_overdue() -> None:
    late = drain(deadline=NOW - drain_watch.DEADLINE_GRACE - timedelta(seconds=1))
    assert drain_watch.overdue(late, NOW)
    assert not drain_watch.overdue(drain(deadline=NOW - timedelta(seconds=1)), NOW)
    assert not drain_watch.overdue(late.model_copy(update={"state": DrainState.TIMED_OUT}), NOW)


class FakeClient:
    """Answers the drain's states in turn, as the API would on each poll."""

    def __init__(self, states: list[Drain | None]) -> None:
        self.states: Iterator[Drain | None] = iter(states)

    def drain_host(self, host_id: str, request: DrainRequest) -> Drain:
        first = next(self.states)
        assert first is not None
        return first

    def get_drain(self, host_id: str) -> Drain:
        answer = next(self.states)
        if answer is None:
            raise NotFound(404, "no drain", {})
        return answer


def follow(monkeypatch: pytest.MonkeyPatch, states: list[Drain | None]) -> tuple[int, list[str]]:
    monkeypatch.setattr(State, "client", lambda self: FakeClient(states))
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    result = CliRunner().invoke(app, ["-o", "id", "hosts", "drain", "hv-0002", "--wait"])
    return result.exit_code, result.stderr.splitlines()


def test_off_a_terminal_each_change_is_one_line_and_the_end_says_drained(monkeypatch: pytest.MonkeyPatch) -> None:
    code, lines = follow(
        monkeypatch,
        [drain(), drain(in_flight=2), drain(in_flight=2), drain(moved=1, in_flight=2), drain(DrainState.DRAINED, 3)],
    )
    assert code == 0
    assert lines == [
        "hv-0002 draining: 0 of 3 moved, 0 in flight, 0 stuck, 3 queued",
        "hv-0002 draining: 0 of 3 moved, 2 in flight, 0 stuck, 1 queued",
        "hv-0002 draining: 1 of 3 moved, 2 in flight, 0 stuck, 0 queued",
        "hv-0002 drained: 3 of 3 moved, 0 in flight, 0 stuck, 0 queued",
        "host hv-0002 drained: 3 VM(s) moved away; `vmsched hosts undrain hv-0002` when it may take VMs again",
    ]


def test_a_drain_that_times_out_or_is_ended_exits_7_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    code, lines = follow(monkeypatch, [drain(moved=2, stuck=1), drain(DrainState.TIMED_OUT, moved=2, stuck=1)])
    assert code == ExitCode.NOT_PLACED
    assert lines[-1].startswith("vmsched: host hv-0002 not drained: its deadline passed with 1 VM(s) left")

    code, lines = follow(monkeypatch, [drain(in_flight=1), None])
    assert code == ExitCode.NOT_PLACED
    assert lines[-1] == "vmsched: host hv-0002: the drain was ended (hosts undrain) before the host was drained"
