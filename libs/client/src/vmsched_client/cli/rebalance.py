"""``vmsched rebalance``: plan moves of running VMs (spread or pack), apply them, follow them."""

from __future__ import annotations

import itertools
import time
from contextlib import nullcontext
from typing import Annotated

import typer

from vmsched_client.cli.command import command, fail, state, sub_app
from vmsched_client.cli.exit_codes import ExitCode
from vmsched_client.cli.options import IdArgument, TimeoutOption, host_selector
from vmsched_client.cli.output import Format, progress, show_list, show_one, stderr, stdout
from vmsched_contract.rebalance import MAX_PLANS_PER_PAGE, Goal, MoveState, PlannedMove, PlanState, RebalancePlan

commands = sub_app("Rebalance the fleet: plan moves of running VMs (spread or pack), then apply them (hosts:admin).")


def _show_plan(plan: RebalancePlan) -> None:
    """The plan's figures, then its moves, one a row (-o json: the whole answer)."""
    output = state().output
    if output is not Format.TABLE:
        show_one(output, plan)
        return
    counts = ", ".join(f"{each.value} {count}" for each, count in plan.progress.items() if count)
    stdout().print(
        f"plan {plan.id}  {plan.goal.value}  {plan.state.value}  {plan.score} "
        f"{plan.score_before:.4f} -> {plan.score_after:.4f}  moves {len(plan.moves)}"
        + (f" ({counts})" if counts else ""),
        markup=False,
    )
    if plan.moves:
        show_list(output, PlannedMove, plan.moves)


def progress_line(plan: RebalancePlan) -> str:
    """``plan 7d2e… applying: 2 of 5 moves ended (moved 2, skipped 0, in flight 1, queued 2)``."""
    counts = {each: sum(1 for move in plan.moves if move.state is each) for each in MoveState}
    ended = counts[MoveState.MOVED] + counts[MoveState.SKIPPED]
    return (
        f"plan {plan.id} {plan.state.value}: {ended} of {len(plan.moves)} moves ended (moved "
        f"{counts[MoveState.MOVED]}, skipped {counts[MoveState.SKIPPED]}, in flight {counts[MoveState.IN_FLIGHT]}, "
        f"queued {counts[MoveState.QUEUED]})"
    )


def _follow(plan: RebalancePlan, timeout: float) -> RebalancePlan:
    """Poll the plan until every move is moved or skipped: a progress bar on a terminal's stderr,
    elsewhere (a log, a CI job) a line each time it changes."""
    client = state().client()
    deadline = time.monotonic() + timeout
    on_terminal = stderr().is_terminal
    with progress() if on_terminal else nullcontext() as bar:
        task = bar.add_task(f"rebalancing ({plan.goal.value})", total=len(plan.moves)) if bar else None
        shown = ""
        while True:
            line = progress_line(plan)
            if bar is not None and task is not None:
                ended = sum(1 for move in plan.moves if move.state in (MoveState.MOVED, MoveState.SKIPPED))
                bar.update(task, completed=ended)
            elif line != shown:
                stderr().print(line, markup=False)
            shown = line
            if plan.state is PlanState.DONE:
                return plan
            if time.monotonic() >= deadline:
                _show_plan(plan)
                raise fail(
                    f"plan {plan.id} not done after {timeout:g}s (still {plan.state.value})", ExitCode.NOT_PLACED
                )
            time.sleep(1.0)
            plan = client.get_rebalance_plan(plan.id)


@command(commands, "plan")
def plan_rebalance(
    goal: Annotated[Goal, typer.Option(help="spread: even out the hosts' utilisation; pack: empty hosts")],
    max_moves: Annotated[int, typer.Option(help="moves at most")] = 50,
    label: Annotated[list[str], typer.Option("--label", "-l", help="key=value: only the hosts with it")] = [],  # noqa: B006
    apply: Annotated[bool, typer.Option(help="apply the plan at once")] = False,
    max_parallel: Annotated[int, typer.Option(help="with --apply: migrations in flight at once")] = 4,
    wait: Annotated[
        bool,
        typer.Option(help="with --apply: follow it until done (a progress bar; off a terminal, a line per change)"),
    ] = False,
    timeout: TimeoutOption = 600.0,
) -> None:
    """Compute moves of running VMs on the live fleet (nothing moves); --apply carries them out.
    Apply it later with `rebalance apply ID`."""
    selector = host_selector(label)
    client = state().client()
    plan = client.create_rebalance_plan(goal, max_moves=max_moves, host_selector=selector)
    if apply:
        plan = client.apply_rebalance_plan(plan.id, max_parallel=max_parallel)
        if wait:
            plan = _follow(plan, timeout)
    _show_plan(plan)


@command(commands, "list")
def list_rebalance(
    limit: Annotated[int, typer.Option(min=1, help="the newest this many")] = 20,
) -> None:
    """The plans, newest first, with where each one's application stands: moves made or skipped of
    all (DONE), and how many are moved, in flight, queued, skipped."""
    newest = state().client().list_rebalance_plans(page_size=min(limit, MAX_PLANS_PER_PAGE))
    plans = list(itertools.islice(newest, limit))
    show_list(state().output, RebalancePlan, plans)


@command(commands, "show")
def show_rebalance(plan_id: IdArgument) -> None:
    """A plan, and where its application stands: each move's state (skipped: with the reason)."""
    _show_plan(state().client().get_rebalance_plan(plan_id))


@command(commands, "apply")
def apply_rebalance(
    plan_id: IdArgument,
    max_parallel: Annotated[int, typer.Option(help="migrations in flight at once")] = 4,
    wait: Annotated[
        bool,
        typer.Option(
            help="follow it until every move is made or skipped (a progress bar; off a terminal, a line per change)"
        ),
    ] = False,
    timeout: TimeoutOption = 600.0,
) -> None:
    """Carry a plan out by live migrations, in its order; a move the fleet made invalid since is
    skipped (the VM stays, running). Exit 5 when applied already; with --wait, 7 at the timeout."""
    plan = state().client().apply_rebalance_plan(plan_id, max_parallel=max_parallel)
    if wait:
        plan = _follow(plan, timeout)
    _show_plan(plan)
