from __future__ import annotations

from tests.placement.support import host
from vmsched_contract.strategy import Strategy
from vmsched_placement import Demand, decision_log_lines, scheduling_line, selected_line


def test_scheduling_line_matches_the_seed() -> None:
    assert scheduling_line("web-server-1", Strategy.LEAST_LOADED) == (
        "Scheduling VM 'web-server-1' using least_loaded strategy"
    )


def test_selected_line_shows_the_host_after_placing_the_vm() -> None:
    before = host("hypervisor-01", used_cpu=10, used_memory_mb=20480, used_disk_gb=80)
    line = selected_line("web-server-1", before, Demand(2, 4096, 20))
    assert line == (
        "Selected agent 'hypervisor-01' for VM 'web-server-1' - CPU: 12/16, Memory: 24GB/32GB, Disk: 100GB/500GB"
    )


def test_selected_line_of_a_host_that_already_has_the_vm_booked() -> None:
    after = host("hv-01", used_cpu=12, used_memory_mb=1536)
    assert selected_line("web-1", after, None).endswith("CPU: 12/16, Memory: 1.5GB/32GB, Disk: 0GB/500GB")


def test_decision_log_lines_end_with_the_selected_line() -> None:
    lines = decision_log_lines("web-1", host("hv-01"), Demand(1, 1024, 10), Strategy.BEST_FIT)
    assert lines[0] == "Scheduling VM 'web-1' using best_fit strategy"
    assert lines[-1].startswith("Selected agent 'hv-01' for VM 'web-1' - CPU: 1/16")
    assert decision_log_lines("web-1", host("hv-01"), Demand(1, 1024, 10))[-1] == lines[-1]
