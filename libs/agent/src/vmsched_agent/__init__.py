"""vmsched agent SDK: what a hypervisor agent imports to heartbeat, take commands and report status.

See docs/agent-sdk.md. ``vmsched-agent simulate --count N`` runs a fleet of fake hypervisors.
"""

from vmsched_agent.agent import Agent, AgentStats, CommandObserver, ReceiveObserver
from vmsched_agent.connection import AgentConnection, AgentQueueMissing
from vmsched_agent.credentials import parse_credentials, read_credentials
from vmsched_agent.hosts import HostSpec, Profile, generate_hosts, load_hosts
from vmsched_agent.hypervisor import ControlsPower, Hypervisor, MeasuresUsage, MigratesVms
from vmsched_agent.simulator import (
    FAILABLE_STEPS,
    FakeHypervisor,
    HostFull,
    Receipt,
    SimulatedFailure,
    SimulatedFleet,
)
from vmsched_amqp.agent_identity import AgentCredentials

__all__ = [
    "FAILABLE_STEPS",
    "Agent",
    "AgentConnection",
    "AgentCredentials",
    "AgentQueueMissing",
    "AgentStats",
    "CommandObserver",
    "ControlsPower",
    "FakeHypervisor",
    "HostFull",
    "HostSpec",
    "Hypervisor",
    "MeasuresUsage",
    "MigratesVms",
    "Profile",
    "Receipt",
    "ReceiveObserver",
    "SimulatedFailure",
    "SimulatedFleet",
    "generate_hosts",
    "load_hosts",
    "parse_credentials",
    "read_credentials",
]
