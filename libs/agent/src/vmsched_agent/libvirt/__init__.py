"""``vmsched-agent libvirt``: an agent for a real hypervisor (KVM through libvirt). See
docs/agent-libvirt.md.

One module per job: :mod:`.settings` (``VMSCHED_LIBVIRT_*``), :mod:`.ports` (what the agent needs of a
libvirt connection, typed), :mod:`.host` (that, on libvirt-python: the only module importing it),
:mod:`.connection` (calls on worker threads, a lost connection reopened), :mod:`.template` (the domain
and volume XML), :mod:`.inventory` (capacity, GPUs, which domains are vmsched's), :mod:`.usage`
(measured usage from domain statistics), :mod:`.lifecycle` (create, delete, stop, start),
:mod:`.live_migration` (the six steps of a migration), :mod:`.hypervisor` (the SDK's protocols on those)
and :mod:`.runner` (all of it put together). Needs the ``libvirt`` extra: ``vmsched-agent[libvirt]``.
"""

from vmsched_agent.libvirt.runner import LibvirtAgent
from vmsched_agent.libvirt.settings import LibvirtAgentSettings

__all__ = ["LibvirtAgent", "LibvirtAgentSettings"]
