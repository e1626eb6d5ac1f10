"""Log format: one JSON object a line with the bound ids and the trace, or readable text on a terminal."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys

# The logger is made before logging is configured, as a module's is at import.
SCRIPT = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from vmsched_runtime.logs import bound, configure_logging, get_logger

log = get_logger("vmsched_scheduler")
configure_logging("scheduler", "INFO", "auto")
trace.set_tracer_provider(TracerProvider())
with trace.get_tracer("t").start_as_current_span("consume"), bound(vm_id="vm-1", message_id="vm-1:create:1"):
    log.info("placed", host="hv-1")
"""


def run(stderr: int | None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT],
        stderr=stderr if stderr is not None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        timeout=60,
        check=True,
    )


def test_without_a_terminal_each_line_is_json_with_vm_host_trace_and_message_ids() -> None:
    finished = run(None)
    assert finished.stdout == b"", "log lines go to stderr only"
    lines = finished.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    line = json.loads(lines[0])
    assert line["message"] == "placed"
    assert line["vm_id"] == "vm-1"
    assert line["host"] == "hv-1"
    assert line["message_id"] == "vm-1:create:1"
    assert len(line["trace_id"]) == 32
    assert len(line["span_id"]) == 16
    assert line["service"] == "scheduler"
    assert line["level"] == "info"
    assert line["logger"] == "vmsched_scheduler"


def test_on_a_terminal_lines_are_readable_text() -> None:
    controller, terminal = pty.openpty()
    try:
        run(terminal)
        os.close(terminal)
        terminal = -1
        output = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal's other end is closed: everything was read
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(controller)
        if terminal != -1:
            os.close(terminal)
    text = re.sub(r"\x1b\[[0-9;]*m", "", output.decode(errors="replace"))  # without the colours
    assert "placed" in text
    assert "vm_id=vm-1" in text
    assert not text.lstrip().startswith("{")
