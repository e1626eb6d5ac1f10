"""Fencing's part of the contract (docs/operations.md#fencing): who fenced a host, and the events
that say a host was fenced, could not be fenced, or needs an operator to fence it."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from vmsched_contract.messages import HostId, Message, utc_now


class FencedBy(StrEnum):
    OPERATOR = "operator"  # POST /v1/hosts/{id}/fence
    COMMAND = "command"  # VMSCHED_FENCE_COMMAND succeeded once the host was lost


class HostFenced(Message):
    """``host.fenced``: a host is declared down. Its VMs are failed (their restart policy applies),
    and it takes no VM until ``DELETE /v1/hosts/{id}/fence``."""

    schema_version: Literal[1] = 1
    host_id: HostId
    by: FencedBy
    at: datetime = Field(default_factory=utc_now)


class HostFenceFailed(Message):
    """``host.fence_failed``: VMSCHED_FENCE_COMMAND did not fence a lost host (exit status not 0,
    or no exit within VMSCHED_FENCE_TIMEOUT). Its VMs stay ``unknown``; the command runs again at
    ``next_try_at`` (with a backoff: VMSCHED_FENCE_RETRY_DELAY, VMSCHED_FENCE_RETRY_MAX_DELAY) until
    it succeeds, an operator fences the host (``POST /v1/hosts/{id}/fence``) or the host comes back."""

    schema_version: Literal[1] = 1
    host_id: HostId
    exit_code: int | None = Field(description="the command's exit status; null when it timed out or did not start")
    detail: str
    attempt: int = Field(default=1, ge=1, description="which try of this silence failed: 1 for the first")
    next_try_at: datetime | None = Field(
        default=None, description="when the command runs again unless the host is fenced or back first"
    )
    at: datetime = Field(default_factory=utc_now)


class HostFenceNeeded(Message):
    """``host.fence_needed``: a host is lost, no fence command is set and VMSCHED_RESTART_UNFENCED is
    false: its VMs stay ``unknown`` until an operator fences it or it comes back."""

    schema_version: Literal[1] = 1
    host_id: HostId
    detail: str
    at: datetime = Field(default_factory=utc_now)
