"""The statuses a VM, a reservation and a host's drain can have. The changes between them are the
services' (vmsched_domain.lifecycle, vmsched_domain.reservations, vmsched_domain.drain)."""

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
    MIGRATING = "migrating"  # moving to another host: runs on its source until the target runs it
    STOPPED = "stopped"  # powered off on its host, which keeps its room (as Nova does)


class Task(StrEnum):
    """What vmsched has asked of an agent for a VM and awaits (Nova's task_state); None: nothing."""

    STOPPING = "stopping"  # stopped: its agent was told to stop it and has not confirmed
    STARTING = "starting"  # running: its agent was told to start it and has not confirmed
    CHOOSING_TARGET = "choosing_target"  # migrating: a scheduler chooses and claims the target
    PREPARING = "preparing"  # migrating: the target claimed, its agent told to prepare
    HANDING_OVER = "handing_over"  # migrating: the target prepared, the source told to hand the VM over
    FINISHING = "finishing"  # migrating: the source handed over, the target told to take the VM
    ROLLING_BACK = "rolling_back"  # running: a migration rolled back after the hand-over began; the source
    # was told to keep (or resume) the VM


class ReservationStatus(StrEnum):
    PENDING = "pending"  # accepted; no scheduler has placed it yet
    HELD = "held"  # its slots are placed: the room is held (used says how much a VM took)
    UNSCHEDULABLE = "unschedulable"  # its slots fit nowhere (all or nothing); the reason is kept
    EXPIRED = "expired"  # ends_at passed: what was still held went back to the hosts
    RELEASED = "released"  # DELETE /v1/reservations/{id}: the same, asked for


class DrainState(StrEnum):
    DRAINING = "draining"  # VMs left on the host; migrations being started
    DRAINED = "drained"  # nothing holds a share of the host: it may be patched, rebooted, removed
    TIMED_OUT = "timed_out"  # the deadline passed with VMs left (listed as stuck); nothing new starts
