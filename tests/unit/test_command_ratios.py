"""The commands that put a VM on a host carry that host's allocation ratios (the operator's overcommit
counts, as it does for the scheduler); the others go as they are."""

from __future__ import annotations

import uuid

from vmsched_contract.messages import AgentCommand, CommandAction, Overcommit, Resources
from vmsched_gateway.command_ratios import TAKES_ROOM, with_ratios

OPERATORS = Overcommit(cpu=4.0)


def command(action: CommandAction, overcommit: Overcommit | None = None) -> AgentCommand:
    resources = Resources(cpu=2, memory_mb=1024, disk_gb=10)
    return AgentCommand(action=action, vm_id=uuid.uuid4(), name="vm", resources=resources, overcommit=overcommit)


def test_a_create_and_a_prepare_carry_the_hosts_ratios() -> None:
    assert {CommandAction.CREATE, CommandAction.PREPARE_MIGRATION} == TAKES_ROOM
    for action in TAKES_ROOM:
        assert with_ratios(command(action), OPERATORS).overcommit == OPERATORS


def test_commands_that_take_no_room_go_as_they_are() -> None:
    for action in set(CommandAction) - TAKES_ROOM:
        assert with_ratios(command(action), OPERATORS).overcommit is None


def test_ratios_already_carried_are_kept_and_an_unknown_host_adds_none() -> None:
    carried = command(CommandAction.CREATE, Overcommit(cpu=2.0))
    assert with_ratios(carried, OPERATORS).overcommit == Overcommit(cpu=2.0)
    assert with_ratios(command(CommandAction.CREATE), None).overcommit is None
