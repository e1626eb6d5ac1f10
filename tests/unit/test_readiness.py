"""A service's readiness: every server asked at once, each within its timeout, the verdict kept a moment
so that probes cannot pile questions up on a server that does not answer."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from devtools.stack import free_port
from vmsched_runtime.metrics_server import start_metrics_server
from vmsched_runtime.readiness import Readiness, Verdict
from vmsched_runtime.settings import Settings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def answers() -> None:
    return None


async def never_answers() -> None:
    await asyncio.Event().wait()


async def refuses() -> None:
    raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 6390)")


async def test_ready_when_every_server_answers() -> None:
    verdict = await Readiness({"database": answers, "redis": answers}).verdict()
    assert verdict.ready
    assert json.loads(verdict.body()) == {"database": "ok", "redis": "ok"}


async def test_not_ready_names_the_server_that_refuses_and_why() -> None:
    verdict = await Readiness({"database": answers, "redis": refuses}).verdict()
    assert not verdict.ready
    assert verdict.checks["database"] == "ok"
    assert verdict.checks["redis"].startswith("ConnectionRefusedError: ")


async def test_a_check_may_say_why_it_is_not_ready() -> None:
    async def reconnecting() -> str:
        return "connection down (reconnecting)"

    verdict = await Readiness({"broker": reconnecting}).verdict()
    assert verdict.checks == {"broker": "connection down (reconnecting)"}


async def test_servers_that_do_not_answer_cost_one_timeout_together_not_one_each() -> None:
    readiness = Readiness({"database": never_answers, "redis": never_answers, "broker": answers}, timeout=0.2)
    started = time.monotonic()
    verdict = await readiness.verdict()
    assert time.monotonic() - started < 0.6
    assert verdict.checks == {"database": "no answer for 0.2 s", "redis": "no answer for 0.2 s", "broker": "ok"}


async def test_a_question_still_unanswered_is_waited_for_again_not_asked_anew() -> None:
    asked = 0
    answer = asyncio.Event()

    async def silent_then_answers() -> None:
        nonlocal asked
        asked += 1
        await answer.wait()

    clock = Clock()
    readiness = Readiness({"database": silent_then_answers}, timeout=0.01, fresh_for=0, clock=clock)
    for _ in range(5):
        clock.now += 1.5
        verdict = await readiness.verdict()
    assert asked == 1
    assert verdict.checks == {"database": "no answer for 6.0 s"}
    answer.set()
    assert (await readiness.verdict()).ready
    assert asked == 2  # answered: the next check asks anew


async def test_a_verdict_answers_every_probe_while_fresh_then_a_new_check_is_made() -> None:
    asked = 0

    async def counted() -> None:
        nonlocal asked
        asked += 1

    clock = Clock()
    readiness = Readiness({"redis": counted}, fresh_for=1.5, clock=clock)
    await readiness.verdict()
    clock.now += 1.4
    await readiness.verdict()
    assert asked == 1
    clock.now += 0.1
    await readiness.verdict()
    assert asked == 2


async def test_probes_asked_while_a_check_runs_share_it() -> None:
    asked = 0
    release = asyncio.Event()

    async def slow() -> None:
        nonlocal asked
        asked += 1
        await release.wait()

    readiness = Readiness({"database": slow})
    probes = [asyncio.create_task(readiness.verdict()) for _ in range(20)]
    await asyncio.sleep(0)
    release.set()
    verdicts = await asyncio.gather(*probes)
    assert asked == 1
    assert all(verdict.ready for verdict in verdicts)


async def test_a_probe_that_gives_up_does_not_cancel_the_check_the_others_wait_for() -> None:
    release = asyncio.Event()

    async def slow() -> None:
        await release.wait()

    readiness = Readiness({"database": slow})
    impatient = asyncio.create_task(readiness.verdict())
    patient = asyncio.create_task(readiness.verdict())
    await asyncio.sleep(0)
    impatient.cancel()
    release.set()
    assert (await patient).ready


@pytest.fixture
def loop_in_a_thread() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
    # The loop may stop before it ran what a test left on it (a verdict asked of a stuck loop, then
    # given up on): those tasks are finished here, as asyncio.run would, rather than destroyed pending.
    for task in asyncio.all_tasks(loop):
        task.cancel()
        loop.run_until_complete(asyncio.wait([task]))
    loop.close()


def test_the_http_thread_gets_the_loops_verdict(loop_in_a_thread: asyncio.AbstractEventLoop) -> None:
    assert Readiness({"redis": refuses}).from_thread(loop_in_a_thread).checks["redis"].startswith("Connection")


def test_a_stuck_event_loop_is_not_ready_within_the_answer_time(loop_in_a_thread: asyncio.AbstractEventLoop) -> None:
    unstuck = threading.Event()
    loop_in_a_thread.call_soon_threadsafe(unstuck.wait, 10)  # blocks the loop, as a stall would
    readiness = Readiness({"redis": answers})
    try:
        started = time.monotonic()
        verdict = readiness.from_thread(loop_in_a_thread, within=0.3)
        assert time.monotonic() - started < 1.0
        assert verdict.checks == {"event_loop": "no answer within 0.3 s"}
        # The probes that follow hear the same at once, without queueing more work on the stuck loop.
        started = time.monotonic()
        assert readiness.from_thread(loop_in_a_thread, within=0.3) is verdict
        assert time.monotonic() - started < 0.1
    finally:
        unstuck.set()


def _get(port: int, path: str) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize(
    ("verdict", "status"),
    [
        (Verdict({"broker": "ok", "redis": "ok"}), 200),
        (Verdict({"broker": "ok", "redis": "no answer within 1.5 s"}), 503),
    ],
)
def test_readyz_answers_the_verdict_on_the_metrics_port(verdict: Verdict, status: int) -> None:
    port = free_port()
    stop = start_metrics_server(Settings(metrics_port=port), default_port=0, ready=lambda: verdict)
    assert stop is not None
    try:
        assert _get(port, "/readyz") == (status, dict(verdict.checks))
    finally:
        stop()
