"""The integration marker comes from the fixtures (the hook in tests/conftest.py): a test that takes
the servers, directly or through other fixtures, is selected by ``-m integration`` without a mark
of its own, and one that takes none is left to ``-m "not integration"`` (make test-fast)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Marked by hand nowhere: the agent's tests take the servers through the broker and stand-in
# gateway fixtures; two of the fit rule's take no fixture at all; the round's tests take a world
# whose servers' parameter needs them.
MODULES = ("tests/agent/test_reconnection.py", "tests/integration/test_fit_rule.py", "tests/round/test_preemption.py")


def collected(marker: str) -> set[str]:
    """The tests of MODULES that ``-m <marker>`` selects (collected in a pytest of its own)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", marker, *MODULES],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_a_test_on_the_servers_is_integration_by_its_fixtures_and_one_without_them_is_not() -> None:
    on_servers = collected("integration")
    without = collected("not integration")

    assert on_servers.isdisjoint(without)
    reconnection = {test for test in on_servers if test.startswith("tests/agent/test_reconnection.py::")}
    assert len(reconnection) == 2
    assert "tests/integration/test_fit_rule.py::test_the_rule_checks_only_what_a_vm_asks_for" in without
    assert "tests/integration/test_fit_rule.py::test_python_the_engine_redis_and_postgresql_agree_on_every_fit" in (
        on_servers
    )
    preemption = "tests/round/test_preemption.py::test_nothing_of_equal_or_higher_priority_is_taken"
    assert f"{preemption}[servers]" in on_servers
    assert f"{preemption}[memory]" in without
