"""The gateway's Prometheus metrics (served on its own /metrics, VMSCHED_METRICS_PORT)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from vmsched_contract.messages import OrphanKind

ORPHAN_VMS = Counter(
    "vmsched_orphan_vms_total",
    "VMs an agent runs that vmsched does not hold on that host, by kind (moved, gone) and what was done",
    ["kind", "action"],
)
HOSTS_SILENT = Counter("vmsched_hosts_silent_total", "Hosts that went offline (no heartbeat for AGENT_OFFLINE_TIMEOUT)")
BROKER_UNHEARD = Gauge(
    "vmsched_gateway_broker_unheard",
    "1 while the gateway hears nothing from the broker (its connection down, or neither a heartbeat nor its own "
    "probe for a few seconds): it marks no host offline and fails no VM meanwhile",
)
VMS_LOST = Counter(
    "vmsched_vms_lost_total", "VMs failed or deleted because their host was silent past AGENT_LOST_TIMEOUT"
)
VMS_RETURNED = Counter(
    "vmsched_vms_returned_total", "Unknown VMs a returning host's heartbeat settled, by the status they got", ["status"]
)
AGENT_MESSAGES_REFUSED = Counter(
    "vmsched_agent_messages_refused_total",
    "Agents' heartbeats and VM reports refused and dead-lettered, by kind (heartbeat, status) and reason "
    "(no_user, wrong_user, instance_conflict, vm_not_placed_here)",
    ["kind", "reason"],
)

for kind in OrphanKind:
    for action in ("reported", "deleted"):
        ORPHAN_VMS.labels(kind.value, action)
