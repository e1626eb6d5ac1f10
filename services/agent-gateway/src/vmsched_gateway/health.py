"""The gateway's periodic duties (seed 002, Orchard's health checks):

- hosts silent for VMSCHED_AGENT_OFFLINE_TIMEOUT become offline, in PostgreSQL and in the snapshot, and
  their VMs fail ("agent lost connection"), giving their capacity back; unless no agent at all is
  heard from, which says more about the gateway's own connectivity than about the hosts;
- failed VMs with ``restart_policy: on_failure`` go back to pending after VMSCHED_RESTART_DELAY, with the
  host they failed on excluded, and are published for placement again;
- scheduled VMs whose agent has not answered for VMSCHED_RESEND_STALE_AFTER get their create command again
  (the agent is idempotent on vm_id), in case it was dead-lettered on the way; not while the
  gateway's own assignment queue has a backlog (the command may not be sent yet: a copy would only
  add to the load that made it late).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from faststream.rabbit import RabbitBroker

from vmsched_common import topology
from vmsched_common.amqp import ready_messages
from vmsched_common.logs import get_logger
from vmsched_common.outbox import publish_rows, send_command
from vmsched_common.settings import Settings
from vmsched_common.snapshot import Snapshot
from vmsched_gateway.store import GatewayStore

log = get_logger(__name__)


@dataclass
class FailureGrace:
    """When this gateway may fail the VMs of silent hosts.

    Not in the first timeout after it starts, nor in the first timeout after a spell in which no
    agent at all was heard from: either way it has not been listening long enough to tell a dead
    agent from one whose heartbeats could not reach it (Nomad resets its heartbeat timers after a
    leader election for the same reason). Without this, the first agent back after a broker outage
    would end the cut-off and every agent still reconnecting would lose its VMs.
    """

    timeout: float
    until: float

    @classmethod
    def starting(cls, now: float, timeout: float) -> FailureGrace:
        return cls(timeout=timeout, until=now + timeout)

    def allows_failing(self, now: float) -> bool:
        return now >= self.until

    def cut_off(self, now: float) -> None:
        self.until = now + self.timeout


async def check_hosts_once(
    store: GatewayStore, snapshot: Snapshot, broker: RabbitBroker, settings: Settings, grace: FailureGrace
) -> None:
    now = time.monotonic()
    check = await store.mark_offline_hosts(settings.agent_offline_timeout, fail_vms=grace.allows_failing(now))
    for host_id in check.offline:
        log.warning("host offline: no heartbeat", host=host_id, timeout=settings.agent_offline_timeout)
        await snapshot.set_host_fields(host_id, {"status": "offline"})
    if check.cut_off:
        if grace.allows_failing(now):
            log.error("no agent heard from at all: assuming this gateway is cut off; VMs are not failed")
        grace.cut_off(now)
    for vm_id, host_id in check.lost:
        log.warning("VM failed: agent lost connection", vm_id=str(vm_id), host=host_id)
        await snapshot.release(vm_id)
    restarted = await store.restart_failed(settings.restart_delay)
    if restarted:
        log.info("restarting failed VMs", count=len(restarted), vm_ids=[str(vm.id) for vm in restarted])
        await publish_rows(broker, store.engine, restarted)
    backlog = await ready_messages(broker, topology.GATEWAY_ASSIGNED_QUEUE)
    if backlog:
        # Behind on assignments: a stale VM's command may not even have been sent yet.
        log.debug("not resending create commands while assignments wait", waiting=backlog)
        return
    for vm in await store.touch_stale_scheduled(settings.resend_stale_after):
        if vm.hypervisor_id is None:
            continue
        log.warning("create command unanswered; sending it again", vm_id=str(vm.id), host=vm.hypervisor_id)
        await send_command(broker, vm.hypervisor_id, vm.create_command())


async def check_hosts_forever(
    store: GatewayStore, snapshot: Snapshot, broker: RabbitBroker, settings: Settings, interval: float = 1.0
) -> None:
    grace = FailureGrace.starting(time.monotonic(), settings.agent_offline_timeout)
    while True:
        try:
            await check_hosts_once(store, snapshot, broker, settings, grace)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a server hiccup must not end the duty; the next round retries
            log.warning("host check failed", error=repr(error))
        await asyncio.sleep(interval)
