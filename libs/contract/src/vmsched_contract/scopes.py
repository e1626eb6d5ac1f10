"""The scopes a token may hold. What each grants is the API's (vmsched_api.identity.scopes)."""

from __future__ import annotations

from enum import StrEnum


class Scope(StrEnum):
    VMS_READ = "vms:read"  # see the project's VMs, server groups, placements; its project's quota and usage
    VMS_WRITE = "vms:write"  # create and delete the project's VMs and server groups
    HOSTS_READ = "hosts:read"  # see the fleet and the scheduler settings
    HOSTS_ADMIN = "hosts:admin"  # change and delete hosts (maintenance, labels, taints, ratios)
    ADMIN = "admin"  # everything, every project: projects, quotas, tokens, settings, the audit trail
