"""The statuses a VM and a reservation can have. The changes between them are the services'
(vmsched_common.lifecycle, vmsched_common.reservations)."""

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


class ReservationStatus(StrEnum):
    PENDING = "pending"  # accepted; no scheduler has placed it yet
    HELD = "held"  # its slots are placed: the room is held (used says how much a VM took)
    UNSCHEDULABLE = "unschedulable"  # its slots fit nowhere (all or nothing); the reason is kept
    EXPIRED = "expired"  # ends_at passed: what was still held went back to the hosts
    RELEASED = "released"  # DELETE /v1/reservations/{id}: the same, asked for
