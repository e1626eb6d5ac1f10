"""The shares of hosts that VMs hold, as SQL: one row per (VM, host) whose allocations count the VM;
and the holdings: those shares plus the reservations' held slots, what a host's allocations add up to.

A VM holds its host's (``hypervisor_id``) in a status of
:data:`~vmsched_domain.lifecycle.HOLDS_CAPACITY`; a migrating VM holds its target's as well once a
scheduler claimed one (``migration_target``), under its target claim id. A reservation's slot still
``held`` holds its host's room under the slot's own id (:mod:`vmsched_domain.reservations`; a slot a
VM took is that VM's share, wherever the VM moves). A host's ``alloc_*`` and ``vm_count`` are the
sums of its :data:`HOLDINGS`; reconciliation restores Redis's claims from them, and the server group
guard counts members from :data:`SHARES` (a slot belongs to no group). Every statement that needs
them selects from these, inside SQLAlchemy's ``text()`` (which reads the escaped colon of the target
claim id as a colon).
"""

from __future__ import annotations

from vmsched_domain.claims import TARGET_CLAIM_SUFFIX
from vmsched_domain.lifecycle import HOLDS_CAPACITY, HOLDS_TARGET, sql_in
from vmsched_domain.reservations import SlotStatus

# The suffix as text() reads it: a colon starts a bind parameter there unless escaped.
_SUFFIX = TARGET_CLAIM_SUFFIX.replace(":", "\\:")

# Columns: vm_id, claim_id (the Redis claim that holds the share), host_id, the VM's resources
# (cpu, memory_mb, disk_gb, gpu, and extra: its named extras' map), server_group and priority.
# Conditions on host_id or server_group reach into both halves (and their indexes).
SHARES = f"""
    SELECT id AS vm_id, CAST(id AS text) AS claim_id, hypervisor_id AS host_id,
           cpu, memory_mb, disk_gb, gpu, extra, server_group, priority
      FROM vms WHERE status IN {sql_in(HOLDS_CAPACITY)} AND hypervisor_id IS NOT NULL
    UNION ALL
    SELECT id, CAST(id AS text) || '{_SUFFIX}', migration_target,
           cpu, memory_mb, disk_gb, gpu, extra, server_group, priority
      FROM vms WHERE status IN {sql_in(HOLDS_TARGET)} AND migration_target IS NOT NULL
"""

# The same columns: a held slot is its own claim (no extras, no group, no priority).
HOLDINGS = f"""
    {SHARES}
    UNION ALL
    SELECT id, CAST(id AS text), hypervisor_id, cpu, memory_mb, disk_gb, gpu, CAST('{{}}' AS jsonb),
           CAST(NULL AS uuid), CAST(NULL AS integer)
      FROM reservation_slots WHERE status = '{SlotStatus.HELD.value}'
"""
