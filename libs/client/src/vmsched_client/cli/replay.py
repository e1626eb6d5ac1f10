"""``vmsched replay``: a VM's last decision made again on the exact inputs it saw (the decision journal)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

import typer

from vmsched_client.cli.command import command, state
from vmsched_client.cli.output import Format, stdout, table, to_json
from vmsched_contract.api import VictimFate
from vmsched_contract.strategy import Strategy

commands = typer.Typer()  # merged into the root app: `vmsched replay`


@command(commands, "replay")
def replay(
    vm_id: Annotated[UUID, typer.Argument(metavar="VM_ID")],
    strategy_name: Annotated[
        Strategy | None, typer.Option("--strategy", help="decide with this strategy instead of the recorded one")
    ] = None,
) -> None:
    """The VM's last decision made again on the exact inputs it saw (the decision journal): the
    recorded host and score, the replayed ones, and whether they are the same (and, for a preemption,
    the VMs it preempts; for a VM whose room was made by moving VMs off a host, those VMs and where
    they went). Exit 5 when the decision was not journaled or its entry was pruned."""
    answer = state().client().replay_placement(vm_id, strategy=strategy_name)
    if state().output is not Format.TABLE:
        print(to_json(answer))
        return

    def score(value: float | None) -> str:
        return "-" if value is None else f"{value:.6f}"

    shown = table(
        [
            ("", lambda row: row[0]),
            ("STRATEGY", lambda row: row[1]),
            ("HOST", lambda row: row[2] or "-"),
            ("SCORE", lambda row: score(row[3])),
        ],
        [
            ("recorded", answer.recorded_strategy.value, answer.decided_host, answer.decided_score),
            ("replayed", answer.strategy.value, answer.host, answer.score),
        ],
    )
    stdout().print(shown)
    stdout().print(f"same {'yes' if answer.same else 'no'} ({answer.hosts} hosts seen)", markup=False)
    if answer.usage == "approximate":
        stdout().print(
            f"measured usage approximate: {answer.strategy.value} reads usage the decision did not journal "
            "(each host's last journaled one)",
            markup=False,
        )
    if answer.victims is not None:
        stdout().print(f"preempts {', '.join(str(v) for v in answer.victims) or 'nothing'}", markup=False)
    if answer.fates:
        _victims(answer.fates)
    moved = answer.preemption
    if moved is not None:
        again = (
            "journal entry pruned"
            if moved.same is None
            else f"replayed: {moved.host or 'no host'}, same " + ("yes" if moved.same else "no")
        )
        stdout().print(f"made room by moving VMs off {moved.decided_host} ({again})", markup=False)
        _victims(moved.victims)


def _victims(fates: list[VictimFate]) -> None:
    """Each victim, what the preemption did with it, and where it is now."""
    shown = table(
        [
            ("VICTIM", lambda fate: str(fate.vm_id)),
            ("OUTCOME", lambda fate: fate.outcome.value),
            ("FROM", lambda fate: fate.from_host),
            ("STATUS", lambda fate: "gone" if fate.status is None else fate.status.value),
            ("NOW ON", lambda fate: fate.host or "-"),
        ],
        fates,
    )
    stdout().print(shown)
