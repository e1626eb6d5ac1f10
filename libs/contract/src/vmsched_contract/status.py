"""The statuses a VM can have. The changes between them are the services' (vmsched_common.lifecycle)."""

from __future__ import annotations

from enum import StrEnum


class VmStatus(StrEnum):
    PENDING = "pending"  # accepted; waiting for a scheduler
    SCHEDULED = "scheduled"  # placed on a host; its agent has not confirmed it yet
    RUNNING = "running"  # its agent runs it
    UNKNOWN = "unknown"  # its host is silent (offline): presumed running, capacity kept
    DELETING = "deleting"  # its agent was told to delete it
    DELETED = "deleted"
    FAILED = "failed"
    UNSCHEDULABLE = "unschedulable"  # no host could take it
    WAITING = "waiting"  # no host can take it yet; it may wait (wait_s) for room to appear
    PREEMPTED = "preempted"  # a VM of higher priority took its room; its agent is told to delete it
