"""The ``vmsched`` CLI's exit codes, stated once (docs/cli.md shows the same table)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the API answered an error not listed below (a 5xx, a 429 after the retries)
    USAGE = 2  # the command line is wrong (unknown option, bad value), or the API refused the request (422)
    DENIED = 3  # no token, an unknown or revoked one (401), or one without the scope (403, quota included)
    NOT_FOUND = 4  # no such VM, host, group, project or token (404)
    CONFLICT = 5  # the change is refused in the thing's present state (409), or the thing is gone (410)
    UNREACHABLE = 6  # the API cannot be reached, or the configuration cannot be read
    NOT_PLACED = 7  # --wait: a VM ended without a host (unschedulable, failed), a migration rolled back, a drain
    # timed out with VMs left, or the wait timed out


BY_STATUS = {
    401: ExitCode.DENIED,
    403: ExitCode.DENIED,
    404: ExitCode.NOT_FOUND,
    409: ExitCode.CONFLICT,
    410: ExitCode.CONFLICT,
    422: ExitCode.USAGE,
}


def for_status(status_code: int) -> ExitCode:
    return BY_STATUS.get(status_code, ExitCode.FAILED)
