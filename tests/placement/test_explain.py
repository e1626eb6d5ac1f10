from __future__ import annotations

from tests.placement.support import context, fleet_of, host, request
from vmsched_contract.strategy import Strategy
from vmsched_placement import HostVerdict, decide, explain


def test_explain_gives_every_host_its_first_failing_filter_with_the_numbers() -> None:
    fleet = fleet_of(
        host("hv-01", memory_mb=32768, used_memory_mb=30720, labels={"zone": "eu-1"}),
        host("hv-02", heartbeat_age=42.0),
        host("hv-03", labels={"zone": "us-1"}),
        host("hv-04", labels={"zone": "eu-1"}, used_cpu=8),
        host("hv-05", paused=True),
        host("hv-06"),
    )
    req = request(memory_mb=8192, labels={"zone": "eu-1"}, exclude=["hv-06"])
    verdicts = explain(fleet, req, context())
    assert [v.host_id for v in verdicts] == ["hv-01", "hv-02", "hv-03", "hv-04", "hv-05", "hv-06"]
    assert verdicts[0] == HostVerdict(
        "hv-01",
        False,
        "memory",
        "memory: needs 8192 MiB, 2048 MiB free (32768 MiB total, 30720 MiB allocated)",
        None,
    )
    assert verdicts[1].reason == "offline: last heartbeat 42s ago (timeout 15s)"
    assert verdicts[2].reason == "labels: missing zone=eu-1 (host has zone=us-1)"
    assert verdicts[3].passed
    assert verdicts[3].score == 0.4 * 0.5
    assert verdicts[4].reason == "paused: scheduling paused"
    assert verdicts[5].reason == "excluded: excluded on retry"


def test_explain_agrees_with_decide() -> None:
    fleet = fleet_of(host("hv-01", used_cpu=8), host("hv-02", used_cpu=2), host("hv-03", cpu=1))
    req = request(cpu=2, strategy=Strategy.LEAST_LOADED)
    decision = decide(fleet, req, context())
    passed = [v for v in explain(fleet, req, context()) if v.passed]
    assert [v.host_id for v in passed] == ["hv-01", "hv-02"]
    assert min(passed, key=lambda v: (v.score, v.host_id)).host_id == decision.host_id


def test_explain_does_not_score_unscored_strategies_or_draw_random_numbers() -> None:
    ctx = context(seed=4)
    state = ctx.rng.getstate()
    verdicts = explain(fleet_of(host("hv-01"), host("hv-02")), request(strategy=Strategy.RANDOM), ctx)
    assert [v.score for v in verdicts] == [None, None]
    assert ctx.rng.getstate() == state
