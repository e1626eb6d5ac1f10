"""An agent's heartbeats carry the host's measured usage: reported by the caller, else measured by
the hypervisor, else none; a failing measurement never stops a heartbeat."""

from __future__ import annotations

from vmsched_agent import Agent
from vmsched_contract.messages import AgentCommand, Resources, Usage

CAPACITY = Resources(cpu=16, memory_mb=32768, disk_gb=100)
AMQP = "amqp://guest:guest@127.0.0.1:5672/"  # never connected to: these agents are not started


class Plain:
    async def create_vm(self, command: AgentCommand) -> None: ...

    async def delete_vm(self, command: AgentCommand) -> None: ...


class Measuring(Plain):
    def __init__(self, usage: Usage | None) -> None:
        self.measured = usage
        self.fail = False

    def usage(self) -> Usage | None:
        if self.fail:
            raise OSError("/proc/stat unreadable")
        return self.measured


def test_a_heartbeat_carries_no_usage_until_one_is_reported() -> None:
    agent = Agent("hv-u1", CAPACITY, Plain(), amqp_url=AMQP)
    assert agent.heartbeat().usage is None

    agent.report_usage(Usage(cpu_used=3.5, memory_used_mb=2048))
    assert agent.heartbeat().usage == Usage(cpu_used=3.5, memory_used_mb=2048)

    agent.report_usage(None)
    assert agent.heartbeat().usage is None


def test_a_hypervisor_that_measures_is_asked_at_every_heartbeat_unless_usage_was_reported() -> None:
    hypervisor = Measuring(Usage(cpu_used=1.0, memory_used_mb=512))
    agent = Agent("hv-u2", CAPACITY, hypervisor, amqp_url=AMQP)
    assert agent.heartbeat().usage == Usage(cpu_used=1.0, memory_used_mb=512)
    hypervisor.measured = Usage(cpu_used=9.0, memory_used_mb=4096)
    assert agent.heartbeat().usage == Usage(cpu_used=9.0, memory_used_mb=4096)

    agent.report_usage(Usage(cpu_used=2.0, memory_used_mb=1024))
    assert agent.heartbeat().usage == Usage(cpu_used=2.0, memory_used_mb=1024)
    agent.report_usage(None)
    assert agent.heartbeat().usage == Usage(cpu_used=9.0, memory_used_mb=4096)


def test_a_failing_measurement_sends_the_heartbeat_without_usage() -> None:
    hypervisor = Measuring(Usage(cpu_used=1.0, memory_used_mb=512))
    agent = Agent("hv-u3", CAPACITY, hypervisor, amqp_url=AMQP)
    hypervisor.fail = True
    beat = agent.heartbeat()
    assert (beat.agent_id, beat.usage) == ("hv-u3", None)
    hypervisor.fail = False
    assert agent.heartbeat().usage == Usage(cpu_used=1.0, memory_used_mb=512)
