"""Lost hosts and fencing (docs/operations.md#fencing): what the gateway does about each host silent
past AGENT_LOST_TIMEOUT, as :func:`vmsched_domain.fencing.decide` says: fail its VMs, run the fence
command (in the background: a power-off may take a while, and the health check must go on), or
announce ``host.fence_needed``. A fence command that fails runs again after a backoff
(:func:`vmsched_domain.fencing.retry_delay`) while the host stays silent; when the next try is due
is kept with the host in PostgreSQL (:class:`vmsched_pg.fences.FenceStore`), so a gateway restarted
in between, or another replica, takes it on time. A fenced host's VMs are failed by the health check
(:meth:`vmsched_gateway.host_store.HostStore.fail_fenced`), whoever fenced it.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from dataclasses import dataclass, field

from vmsched_amqp import events
from vmsched_amqp.publishing import Publisher
from vmsched_contract.fencing import FencedBy, HostFenced, HostFenceFailed, HostFenceNeeded
from vmsched_contract.messages import HostStatus
from vmsched_domain.fencing import FencePolicy, LostHost, LostHostAction, decide, retry_delay
from vmsched_domain.vm_changes import Change
from vmsched_gateway.host_store import HostStore
from vmsched_pg.fences import FenceStore
from vmsched_redis.snapshot import Snapshot
from vmsched_runtime.logs import get_logger

log = get_logger(__name__)

_OUTPUT_KEPT = 500  # characters of the command's output kept in the failure's detail


@dataclass(frozen=True, slots=True)
class FenceOutcome:
    fenced: bool
    exit_code: int | None  # None: it timed out or could not start
    detail: str


@dataclass(frozen=True, slots=True)
class FenceCommand:
    """VMSCHED_FENCE_COMMAND: run with the host id and its labels (JSON) as its last two arguments;
    after a failure, again once :meth:`retry_after` has passed."""

    command: str
    timeout: float  # VMSCHED_FENCE_TIMEOUT
    retry_delay: float  # VMSCHED_FENCE_RETRY_DELAY
    retry_max_delay: float  # VMSCHED_FENCE_RETRY_MAX_DELAY

    def retry_after(self, attempt: int) -> float:
        """Seconds from the ``attempt``-th failure to the next try."""
        return retry_delay(attempt, first=self.retry_delay, most=self.retry_max_delay)

    @property
    def lease(self) -> float:
        """Seconds after a try starts when the next may start if nothing recorded its end (its
        gateway died): it was killed at ``timeout``, and the first backoff has passed too."""
        return self.timeout + self.retry_delay

    def argv(self, host: LostHost) -> list[str]:
        return [*shlex.split(self.command), host.host_id, json.dumps(host.labels, sort_keys=True)]

    async def run(self, host: LostHost) -> FenceOutcome:
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv(host), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
            )
        except OSError as error:
            return FenceOutcome(False, None, f"fence command did not start: {error}")
        try:
            output, _ = await asyncio.wait_for(process.communicate(), self.timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
            return FenceOutcome(False, None, f"fence command still running after {self.timeout:g} s: killed")
        text = output.decode(errors="replace").strip()[-_OUTPUT_KEPT:]
        if process.returncode == 0:
            return FenceOutcome(True, 0, text)
        return FenceOutcome(False, process.returncode, f"fence command exited {process.returncode}: {text}")


@dataclass
class LostHosts:
    hosts: HostStore
    fences: FenceStore
    snapshot: Snapshot
    publisher: Publisher
    policy: FencePolicy
    command: FenceCommand | None
    running: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # the fence commands running, by host

    async def handle(self, lost_after: float, *, exclude_for: float) -> list[Change]:
        """Act on every lost host as :func:`decide` says; the VMs failed now (those of hosts whose VMs
        may restart unfenced). The fence commands started here fence their hosts later, in the
        background; the health check then fails their VMs."""
        restartable = []
        for host in await self.hosts.lost_hosts(lost_after):
            action = decide(self.policy, host)
            if action is LostHostAction.FAIL_VMS:
                restartable.append(host.host_id)
            elif action is LostHostAction.RUN_FENCE:
                await self._start_fence(host)
            elif action is LostHostAction.ANNOUNCE_FENCE_NEEDED and await self.fences.claim_try(host.host_id):
                detail = (
                    f"host {host.host_id} is lost; no fence command is set and VMSCHED_RESTART_UNFENCED is false: "
                    f"its VMs stay unknown until it is fenced (POST /v1/hosts/{host.host_id}/fence) or back"
                )
                log.error("lost host needs fencing", host=host.host_id)
                await self.publisher.publish(
                    events.HOST_FENCE_NEEDED, HostFenceNeeded(host_id=host.host_id, detail=detail)
                )
        return await self.hosts.lose(lost_after, hosts=restartable, exclude_for=exclude_for)

    async def _start_fence(self, host: LostHost) -> None:
        assert self.command is not None  # decide() runs a fence only when a command is set
        if host.host_id in self.running:  # still running here (a retry is due only once it must have ended)
            return
        attempt = await self.fences.claim_try(host.host_id, lease=self.command.lease)
        if attempt is None:  # another replica took this try
            return
        task = asyncio.create_task(self._fence(self.command, host, attempt))
        self.running[host.host_id] = task
        task.add_done_callback(lambda _: self.running.pop(host.host_id, None))

    async def _fence(self, command: FenceCommand, host: LostHost, attempt: int) -> None:
        log.warning("lost host: running the fence command", host=host.host_id, attempt=attempt)
        try:
            outcome = await command.run(host)
            if not outcome.fenced:
                retry_after = command.retry_after(attempt)
                next_try = await self.fences.record_failure(
                    host.host_id, attempt, outcome.detail, retry_after=retry_after
                )
                log.error(
                    "fence command failed: the host's VMs stay unknown; it runs again later",
                    host=host.host_id,
                    attempt=attempt,
                    retry_in=retry_after,
                    detail=outcome.detail,
                )
                failure = HostFenceFailed(
                    host_id=host.host_id,
                    exit_code=outcome.exit_code,
                    detail=outcome.detail,
                    attempt=attempt,
                    next_try_at=next_try,
                )
                await self.publisher.publish(events.HOST_FENCE_FAILED, failure)
                return
            fenced = await self.fences.fence(host.host_id, FencedBy.COMMAND)
            if fenced is None:  # deleted meanwhile
                return
            await self.snapshot.set_host_fields(host.host_id, {"status": HostStatus.FENCED.value})
            log.warning("lost host fenced by the fence command", host=host.host_id)
            if fenced.newly:
                await self.publisher.publish(events.HOST_FENCED, HostFenced(host_id=host.host_id, by=FencedBy.COMMAND))
        except Exception as error:  # the claim's lease makes the next try due all the same
            log.error("fencing a lost host failed", host=host.host_id, attempt=attempt, error=repr(error))
