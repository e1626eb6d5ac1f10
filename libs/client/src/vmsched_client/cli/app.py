"""The ``vmsched`` commands. Each is a thin shell: parse, call the client, show the answer; errors
become one line on stderr and an exit code of :mod:`vmsched_client.cli.exit_codes`."""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, ParamSpec, TypeVar
from uuid import UUID

import httpx
import typer
from pydantic import ValidationError
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from vmsched_client import PLACED, Client, ClientConfig, ConfigError, WaitTimeout
from vmsched_client.cli.exit_codes import ExitCode, for_status
from vmsched_client.cli.output import Format, show_list, show_one, stderr, stdout, table, to_json
from vmsched_client.cli.why import explain
from vmsched_client.errors import ApiError
from vmsched_contract.api import (
    Drain,
    DrainRequest,
    Host,
    Project,
    ProjectRequest,
    Quota,
    Reservation,
    ReservationRequest,
    ServerGroup,
    ServerGroupRequest,
    Token,
    TokenRequest,
    Vm,
    VmBatchRequest,
    VmRequest,
)
from vmsched_contract.groups import HOST_TOPOLOGY, GroupPolicy
from vmsched_contract.messages import HostSelectorTerm, SelectorOperator
from vmsched_contract.rebalance import MAX_PLANS_PER_PAGE, Goal, MoveState, PlannedMove, PlanState, RebalancePlan
from vmsched_contract.scopes import Scope
from vmsched_contract.status import DrainState, VmStatus
from vmsched_contract.strategy import Strategy
from vmsched_contract.whatif import HostCapacity, SimulatedVm, SimulationRequest

P = ParamSpec("P")
R = TypeVar("R")

app = typer.Typer(
    name="vmsched",
    help="Operate vmsched: VMs, hosts, server groups, reservations, projects, tokens, rebalancing, live events.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # a usage error is Click's plain "Error: ..." line, not a panel
)
vms = typer.Typer(
    help="Ask for VMs, list them, see why they went where they went.", no_args_is_help=True, rich_markup_mode=None
)
hosts = typer.Typer(
    help="The fleet: list hosts, cordon them for maintenance, remove them.", no_args_is_help=True, rich_markup_mode=None
)
groups = typer.Typer(help="Server groups: keep VMs apart or together.", no_args_is_help=True, rich_markup_mode=None)
reservations = typer.Typer(
    help="Reservations: room held for a project's VMs (admin makes and ends them).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
projects = typer.Typer(help="Projects and their quotas (admin).", no_args_is_help=True, rich_markup_mode=None)
tokens = typer.Typer(help="API tokens (admin).", no_args_is_help=True, rich_markup_mode=None)
strategy = typer.Typer(help="The cluster's default placement strategy.", no_args_is_help=True, rich_markup_mode=None)
rebalance = typer.Typer(
    help="Rebalance the fleet: plan moves of running VMs (spread or pack), then apply them (hosts:admin).",
    no_args_is_help=True,
    rich_markup_mode=None,
)
for sub, name in (
    (vms, "vms"),
    (hosts, "hosts"),
    (groups, "groups"),
    (reservations, "reservations"),
    (projects, "projects"),
    (tokens, "tokens"),
):
    app.add_typer(sub, name=name)
app.add_typer(strategy, name="strategy")
app.add_typer(rebalance, name="rebalance")


@dataclass
class State:
    url: str | None = None
    token: str | None = None
    output: Format = Format.TABLE
    _client: Client | None = field(default=None, repr=False)

    def client(self) -> Client:
        if self._client is None:
            self._client = Client(config=ClientConfig.load(self.url, self.token))
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


# The invocation's options, set by the callback before any command runs.
_current: ContextVar[State] = ContextVar("vmsched_cli_state")


@app.callback()
def options(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(help="the API (else VMSCHED_URL, else the config file)")] = None,
    token: Annotated[
        str | None, typer.Option(help="the bearer token (else VMSCHED_TOKEN, else the config file)", show_default=False)
    ] = None,
    output: Annotated[
        Format, typer.Option("--output", "-o", help="table for people, json for scripts, id: the ids alone")
    ] = Format.TABLE,
) -> None:
    chosen = State(url=url, token=token, output=output)
    _current.set(chosen)
    ctx.call_on_close(chosen.close)


def fail(message: str, code: ExitCode) -> typer.Exit:
    stderr().print(f"vmsched: {message}", markup=False)
    return typer.Exit(int(code))


@contextmanager
def _one_line_errors(state: State) -> Iterator[None]:
    try:
        yield
    except ApiError as error:
        raise fail(error.detail, for_status(error.status_code)) from None
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in error.errors())
        raise fail(problems, ExitCode.USAGE) from None
    except ConfigError as error:
        raise fail(str(error), ExitCode.UNREACHABLE) from None
    except httpx.TransportError as error:
        where = state._client.config.url if state._client else "the API"
        raise fail(f"cannot reach {where}: {error}", ExitCode.UNREACHABLE) from None
    except WaitTimeout as error:
        raise fail(str(error), ExitCode.NOT_PLACED) from None


OutputOption = Annotated[
    Format | None,
    typer.Option("--output", "-o", help="table for people, json for scripts, id: the ids alone", show_default=False),
]


def command(group: typer.Typer, name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Register a command whose client errors end in one line and their exit code. It takes
    ``-o``/``--output`` after its name too (``vmsched vms list -o json``), as well as before."""

    def register(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            chosen = _current.get(State())
            output = kwargs.pop("output", None)
            if isinstance(output, Format):
                chosen.output = output
            with _one_line_errors(chosen):
                return function(*args, **kwargs)

        signature = inspect.signature(function, eval_str=True)  # Typer reads __signature__ as it is
        output = inspect.Parameter("output", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=OutputOption)
        guarded.__signature__ = signature.replace(parameters=[*signature.parameters.values(), output])  # type: ignore[attr-defined]
        guarded.__annotations__ = {**function.__annotations__, "output": OutputOption}
        group.command(name)(guarded)
        return guarded

    return register


def state() -> State:
    return _current.get()


def _pairs(values: list[str], what: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, equals, text = value.partition("=")
        if not equals or not key:
            raise typer.BadParameter(f"{value!r}: expected key=value", param_hint=what)
        pairs[key] = text
    return pairs


def _utc(moment: datetime | None) -> datetime | None:
    """A time the command line gave: UTC, as the options say (Click's datetimes carry no zone;
    ``astimezone`` would take them for the machine's local time)."""
    return None if moment is None else moment.replace(tzinfo=UTC)


def _progress() -> Progress:
    # On stderr: -o json keeps stdout for the answer alone.
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=stderr(),
        transient=True,
    )


# VMs


@command(vms, "create")
def create_vm(
    name: Annotated[str, typer.Argument(help="the VM's name (with --count: the names' prefix)")],
    cpu: Annotated[int | None, typer.Option(help="vCPUs (default: the API's VMSCHED_DEFAULT_VM_CPU)")] = None,
    memory_mb: Annotated[int | None, typer.Option(help="MiB (default: VMSCHED_DEFAULT_VM_MEMORY_MB)")] = None,
    disk_gb: Annotated[int, typer.Option(help="GB of disk")] = 0,
    gpu: Annotated[int, typer.Option(help="GPUs")] = 0,
    label: Annotated[list[str], typer.Option("--label", "-l", help="key=value the host must have")] = [],  # noqa: B006
    strategy_name: Annotated[Strategy | None, typer.Option("--strategy", help="overrides the default")] = None,
    priority: Annotated[int, typer.Option(help="0..1000; may preempt VMs of lower priority")] = 0,
    wait_s: Annotated[int | None, typer.Option(help="seconds it may wait for room (status waiting)")] = None,
    server_group: Annotated[UUID | None, typer.Option(help="join this server group")] = None,
    reservation: Annotated[UUID | None, typer.Option(help="take a slot of this reservation of its project")] = None,
    count: Annotated[int, typer.Option(min=1, max=1000, help="ask for this many (NAME-1..NAME-N), in one batch")] = 1,
    all_or_nothing: Annotated[bool, typer.Option(help="with --count: place all of them or none")] = False,
    wait: Annotated[bool, typer.Option(help="wait until a scheduler has placed it (a progress bar)")] = False,
    timeout: Annotated[float, typer.Option(help="seconds --wait waits at most")] = 120.0,
) -> None:
    """Ask for a VM (or --count of them); with --wait, exit 7 unless every one is placed."""
    chosen = state()
    asked: dict[str, Any] = {"disk_gb": disk_gb, "gpu": gpu, "labels": _pairs(label, "--label"), "priority": priority}
    optional = {"cpu": cpu, "memory_mb": memory_mb, "strategy": strategy_name, "wait_s": wait_s}
    asked |= {key: value for key, value in optional.items() if value is not None}
    if server_group is not None:
        asked["server_group"] = server_group
    if reservation is not None:
        asked["reservation"] = reservation
    client = chosen.client()
    if count == 1:
        created = [client.create_vm(VmRequest(name=name, **asked))]
    else:
        batch = [VmRequest(name=f"{name}-{n}", **asked) for n in range(1, count + 1)]
        created = client.create_vms(VmBatchRequest(vms=batch, all_or_nothing=all_or_nothing))
    final = _wait_placed(client, created, timeout) if wait else created
    show_list(chosen.output, Vm, final)
    unplaced = [vm for vm in final if wait and vm.status not in PLACED]
    if unplaced:
        reasons = "; ".join(f"{vm.name} {vm.status.value}: {vm.status_reason or '-'}" for vm in unplaced[:3])
        raise fail(f"{len(unplaced)} of {len(final)} not placed ({reasons})", ExitCode.NOT_PLACED)


def _wait_placed(client: Client, created: list[Vm], timeout: float) -> list[Vm]:
    """Every VM polled until a scheduler is done with it, on a progress bar."""
    latest = {vm.id: vm for vm in created}
    with _progress() as progress:
        task = progress.add_task("scheduling", total=len(created))
        for vm in created:
            progress.update(task, description=f"scheduling {vm.name}")
            latest[vm.id] = client.wait_for_vm(vm.id, timeout=timeout)
            progress.advance(task)
    return [latest[vm.id] for vm in created]


@command(vms, "list")
def list_vms(
    status: Annotated[VmStatus | None, typer.Option(help="only VMs of this status")] = None,
    host: Annotated[str | None, typer.Option(help="only VMs on this host")] = None,
    project: Annotated[str | None, typer.Option(help="admin: only this project's VMs")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="at most this many (default: every one)")] = None,
) -> None:
    """The VMs, oldest first (every page)."""
    found: list[Vm] = []
    for vm in state().client().list_vms(status=status, hypervisor_id=host, project=project):
        if limit is not None and len(found) >= limit:
            break
        found.append(vm)
    show_list(state().output, Vm, found)


@command(vms, "show")
def show_vm(vm_id: Annotated[UUID, typer.Argument(metavar="ID")]) -> None:
    """One VM, every field."""
    show_one(state().output, state().client().get_vm(vm_id))


@command(vms, "why")
def why_vm(vm_id: Annotated[UUID, typer.Argument(metavar="ID")]) -> None:
    """Why the VM went where it went, or nowhere: the chosen host and its score, then the hosts
    rejected, grouped by rule, with the numbers."""
    client = state().client()
    placement = client.get_placement(vm_id)
    if state().output is Format.JSON:
        print(to_json(placement))
        return
    for line in explain(client.get_vm(vm_id), placement):
        stdout().print(line, markup=False)


@command(vms, "delete")
def delete_vm(
    vm_id: Annotated[UUID, typer.Argument(metavar="ID")],
    wait: Annotated[bool, typer.Option(help="wait until its agent has deleted it")] = False,
    timeout: Annotated[float, typer.Option(help="seconds --wait waits at most")] = 120.0,
) -> None:
    """Delete a VM (its agent is told; its capacity is released when done)."""
    client = state().client()
    vm = client.delete_vm(vm_id)
    if wait:
        with _progress() as progress:
            task = progress.add_task(f"deleting {vm.name}", total=1)
            vm = client.wait_for_vm(vm_id, until=lambda v: v.status is VmStatus.DELETED, timeout=timeout)
            progress.advance(task)
    show_one(state().output, vm)


def _settled(vm_id: UUID, what: str, done: Callable[[Vm], bool], timeout: float) -> Vm:
    """Wait (a progress line on stderr) until the VM's agent has done what it was asked."""
    with _progress() as progress:
        task = progress.add_task(what, total=1)
        vm = state().client().wait_for_vm(vm_id, until=lambda v: v.task is None and done(v), timeout=timeout)
        progress.advance(task)
    return vm


@command(vms, "stop")
def stop_vm(
    vm_id: Annotated[UUID, typer.Argument(metavar="ID")],
    wait: Annotated[bool, typer.Option(help="wait until its agent has stopped it")] = False,
    timeout: Annotated[float, typer.Option(help="seconds --wait waits at most")] = 120.0,
) -> None:
    """Power a running VM off; it keeps its room on its host (exit 5 when it is not running)."""
    vm = state().client().stop_vm(vm_id)
    if wait:
        vm = _settled(vm_id, f"stopping {vm.name}", lambda v: v.status is VmStatus.STOPPED, timeout)
    show_one(state().output, vm)


@command(vms, "start")
def start_vm(
    vm_id: Annotated[UUID, typer.Argument(metavar="ID")],
    wait: Annotated[bool, typer.Option(help="wait until its agent has started it")] = False,
    timeout: Annotated[float, typer.Option(help="seconds --wait waits at most")] = 120.0,
) -> None:
    """Power a stopped VM on (exit 5 when it is not stopped)."""
    vm = state().client().start_vm(vm_id)
    if wait:
        vm = _settled(vm_id, f"starting {vm.name}", lambda v: v.status is VmStatus.RUNNING, timeout)
    show_one(state().output, vm)


@command(vms, "migrate")
def migrate_vm(
    vm_id: Annotated[UUID, typer.Argument(metavar="ID")],
    to: Annotated[
        str | None, typer.Option("--to", help="target host (hosts:admin); default: the scheduler chooses")
    ] = None,
    wait: Annotated[bool, typer.Option(help="wait until the migration ended (moved or rolled back)")] = False,
    timeout: Annotated[float, typer.Option(help="seconds --wait waits at most")] = 300.0,
) -> None:
    """Move a running VM to another host, live; it runs on its source until the target runs it.
    With --wait, exit 7 when the migration was rolled back (the VM still runs on its source)."""
    vm = state().client().migrate_vm(vm_id, target_host=to)
    if wait:
        source = vm.hypervisor_id
        vm = _settled(vm_id, f"migrating {vm.name}", lambda v: v.status is not VmStatus.MIGRATING, timeout)
        if vm.hypervisor_id == source:
            show_one(state().output, vm)
            raise fail(f"VM {vm.id} was not moved: it runs on {source} still (vmsched vms why)", ExitCode.NOT_PLACED)
    show_one(state().output, vm)


@command(app, "replay")
def replay(
    vm_id: Annotated[UUID, typer.Argument(metavar="VM_ID")],
    strategy_name: Annotated[
        Strategy | None, typer.Option("--strategy", help="decide with this strategy instead of the recorded one")
    ] = None,
) -> None:
    """The VM's last decision made again on the exact inputs it saw (the decision journal): the
    recorded host and score, the replayed ones, and whether they are the same (and, for a preemption,
    the VMs it preempts). Exit 5 when the decision was not journaled or its entry was pruned."""
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


# Hosts


@command(hosts, "list")
def list_hosts() -> None:
    """Every known host, with what is allocated of its capacity."""
    show_list(state().output, Host, state().client().list_hosts())


@command(hosts, "show")
def show_host(host_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """One host, every field."""
    show_one(state().output, state().client().get_host(host_id))


@command(hosts, "info")
def host_info(host_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """The host's scheduling info as a person reads it (capacity, allocations, VMs, rules)."""
    print(state().client().scheduling_info(host_id), end="")


@command(hosts, "cordon")
def cordon_host(host_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Pause scheduling on the host (maintenance): no new VM goes there; its VMs stay."""
    show_one(state().output, state().client().pause_host(host_id))


@command(hosts, "uncordon")
def uncordon_host(host_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Resume scheduling on the host."""
    show_one(state().output, state().client().resume_host(host_id))


@command(hosts, "delete")
def delete_host(host_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Forget a host that holds no VM (its agent stopped); exit 5 while it holds some."""
    state().client().delete_host(host_id)
    stderr().print(f"host {host_id} deleted", markup=False)


def _drain_left(drain: Drain) -> int:
    return len(drain.in_flight) + len(drain.stuck) + len(drain.queued)


@command(hosts, "drain")
def drain_host(
    host_id: Annotated[str, typer.Argument(metavar="ID")],
    evacuate: Annotated[
        bool, typer.Option(help="migrate every VM away; --no-evacuate: only pause and wait for them to leave")
    ] = True,
    deadline: Annotated[int, typer.Option(help="seconds the drain tries; the VMs left then stay, running")] = 600,
    parallel: Annotated[int, typer.Option(help="migrations in flight at once")] = 4,
    wait: Annotated[bool, typer.Option(help="follow it (a progress bar) until drained or timed out")] = False,
) -> None:
    """Empty a host for maintenance: paused, and every VM migrated away. End it with `hosts undrain`.
    With --wait, exit 7 when the deadline passed with VMs left (listed as stuck, still running)."""
    client = state().client()
    drain = client.drain_host(host_id, DrainRequest(evacuate=evacuate, deadline_s=deadline, max_parallel=parallel))
    if wait:
        with _progress() as progress:
            task = progress.add_task(f"draining {host_id}", total=len(drain.moved) + _drain_left(drain))
            while drain.state is DrainState.DRAINING:
                time.sleep(1.0)
                drain = client.get_drain(host_id)
                progress.update(task, completed=len(drain.moved), total=len(drain.moved) + _drain_left(drain))
        if drain.state is DrainState.TIMED_OUT:
            show_one(state().output, drain)
            raise fail(f"host {host_id} not drained: {len(drain.stuck)} VM(s) left", ExitCode.NOT_PLACED)
    show_one(state().output, drain)


@command(hosts, "drain-status")
def drain_status(host_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """Where the host's drain stands: the VMs moved, in flight, stuck (and why), queued."""
    show_one(state().output, state().client().get_drain(host_id))


@command(hosts, "undrain")
def undrain_host(host_id: Annotated[str, typer.Argument(metavar="ID")]) -> None:
    """End the host's drain, finished or not: it takes new VMs again."""
    state().client().end_drain(host_id)
    stderr().print(f"host {host_id}: drain ended", markup=False)


# Rebalance


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


def _follow(plan: RebalancePlan, timeout: float) -> RebalancePlan:
    """Poll the plan (a progress bar on stderr) until every move is moved or skipped."""
    client = state().client()
    deadline = time.monotonic() + timeout
    with _progress() as progress:
        task = progress.add_task(f"rebalancing ({plan.goal.value})", total=len(plan.moves))
        while plan.state is not PlanState.DONE:
            if time.monotonic() >= deadline:
                _show_plan(plan)
                raise fail(
                    f"plan {plan.id} not done after {timeout:g}s (still {plan.state.value})", ExitCode.NOT_PLACED
                )
            time.sleep(1.0)
            plan = client.get_rebalance_plan(plan.id)
            ended = sum(1 for move in plan.moves if move.state in (MoveState.MOVED, MoveState.SKIPPED))
            progress.update(task, completed=ended)
    return plan


@command(rebalance, "plan")
def plan_rebalance(
    goal: Annotated[Goal, typer.Option(help="spread: even out the hosts' utilisation; pack: empty hosts")],
    max_moves: Annotated[int, typer.Option(help="moves at most")] = 50,
    label: Annotated[list[str], typer.Option("--label", "-l", help="key=value: only the hosts with it")] = [],  # noqa: B006
    apply: Annotated[bool, typer.Option(help="apply the plan at once")] = False,
    max_parallel: Annotated[int, typer.Option(help="with --apply: migrations in flight at once")] = 4,
    wait: Annotated[bool, typer.Option(help="with --apply: follow it (a progress bar) until done")] = False,
    timeout: Annotated[float, typer.Option(help="seconds --wait waits at most")] = 600.0,
) -> None:
    """Compute moves of running VMs on the live fleet (nothing moves); --apply carries them out.
    Apply it later with `rebalance apply ID`."""
    selector = [
        HostSelectorTerm(key=key, operator=SelectorOperator.IN, values=[value])
        for key, value in _pairs(label, "--label").items()
    ]
    client = state().client()
    plan = client.create_rebalance_plan(goal, max_moves=max_moves, host_selector=selector)
    if apply:
        plan = client.apply_rebalance_plan(plan.id, max_parallel=max_parallel)
        if wait:
            plan = _follow(plan, timeout)
    _show_plan(plan)


@command(rebalance, "list")
def list_rebalance(
    limit: Annotated[int, typer.Option(min=1, help="the newest this many")] = 20,
) -> None:
    """The plans, newest first, with where each one's application stands: moves made or skipped of
    all (DONE), and how many are moved, in flight, queued, skipped."""
    newest = state().client().list_rebalance_plans(page_size=min(limit, MAX_PLANS_PER_PAGE))
    plans = list(itertools.islice(newest, limit))
    show_list(state().output, RebalancePlan, plans)


@command(rebalance, "show")
def show_rebalance(plan_id: Annotated[UUID, typer.Argument(metavar="ID")]) -> None:
    """A plan, and where its application stands: each move's state (skipped: with the reason)."""
    _show_plan(state().client().get_rebalance_plan(plan_id))


@command(rebalance, "apply")
def apply_rebalance(
    plan_id: Annotated[UUID, typer.Argument(metavar="ID")],
    max_parallel: Annotated[int, typer.Option(help="migrations in flight at once")] = 4,
    wait: Annotated[bool, typer.Option(help="follow it (a progress bar) until every move is made or skipped")] = False,
    timeout: Annotated[float, typer.Option(help="seconds --wait waits at most")] = 600.0,
) -> None:
    """Carry a plan out by live migrations, in its order; a move the fleet made invalid since is
    skipped (the VM stays, running). Exit 5 when applied already; with --wait, 7 at the timeout."""
    plan = state().client().apply_rebalance_plan(plan_id, max_parallel=max_parallel)
    if wait:
        plan = _follow(plan, timeout)
    _show_plan(plan)


# Server groups


@command(groups, "list")
def list_groups() -> None:
    """The server groups (of the token's project; every one for an admin)."""
    show_list(state().output, ServerGroup, state().client().list_server_groups())


@command(groups, "show")
def show_group(group_id: Annotated[UUID, typer.Argument(metavar="ID")]) -> None:
    show_one(state().output, state().client().get_server_group(group_id))


@command(groups, "create")
def create_group(
    name: str,
    policy: Annotated[GroupPolicy, typer.Option(help="how its members are kept apart or together")],
    topology_key: Annotated[str, typer.Option(help="'host', or a host label such as zone")] = HOST_TOPOLOGY,
    max_per_domain: Annotated[int, typer.Option(help="anti-affinity: members a domain may hold")] = 1,
    max_skew: Annotated[int, typer.Option(help="spread: how uneven the domains may be")] = 1,
) -> None:
    """Create a server group; VMs join it with `vms create --server-group ID`."""
    request = ServerGroupRequest(
        name=name, policy=policy, topology_key=topology_key, max_per_domain=max_per_domain, max_skew=max_skew
    )
    show_one(state().output, state().client().create_server_group(request))


@command(groups, "delete")
def delete_group(group_id: Annotated[UUID, typer.Argument(metavar="ID")]) -> None:
    """Delete a server group without members (exit 5 while it has some)."""
    state().client().delete_server_group(group_id)
    stderr().print(f"server group {group_id} deleted", markup=False)


# Reservations


@command(reservations, "list")
def list_reservations(
    project: Annotated[str | None, typer.Option(help="admin: only this project's")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="at most this many, newest first")] = 100,
) -> None:
    """The reservations, newest first (of the token's project; every one for an admin)."""
    show_list(state().output, Reservation, state().client().list_reservations(project=project, limit=limit))


@command(reservations, "show")
def show_reservation(reservation_id: Annotated[UUID, typer.Argument(metavar="ID")]) -> None:
    """One reservation, every field (with the decision record of its placement)."""
    show_one(state().output, state().client().get_reservation(reservation_id))


@command(reservations, "create")
def create_reservation(
    project: Annotated[str, typer.Argument(help="the project whose VMs may take the room")],
    cpu: Annotated[int, typer.Option(help="vCPUs of each slot")],
    memory_mb: Annotated[int, typer.Option(help="MiB of each slot")],
    disk_gb: Annotated[int, typer.Option(help="GB of disk of each slot")] = 0,
    gpu: Annotated[int, typer.Option(help="GPUs of each slot")] = 0,
    count: Annotated[int, typer.Option(help="slots: VMs of that size the room is for")] = 1,
    label: Annotated[list[str], typer.Option("--label", "-l", help="key=value the hosts must have")] = [],  # noqa: B006
    ends_at: Annotated[
        datetime | None, typer.Option(help="when what is still held goes back (UTC); default: never")
    ] = None,
) -> None:
    """Hold room for COUNT VMs of one size (pending until a scheduler places it); the project's
    VMs take it with `vms create --reservation ID`."""
    selector = [
        HostSelectorTerm(key=key, operator=SelectorOperator.IN, values=[value])
        for key, value in _pairs(label, "--label").items()
    ]
    request = ReservationRequest(
        project=project,
        cpu=cpu,
        memory_mb=memory_mb,
        disk_gb=disk_gb,
        gpu=gpu,
        count=count,
        host_selector=selector,
        ends_at=_utc(ends_at),
    )
    show_one(state().output, state().client().create_reservation(request))


@command(reservations, "delete")
def delete_reservation(reservation_id: Annotated[UUID, typer.Argument(metavar="ID")]) -> None:
    """End a reservation (released): the room still held goes back to the hosts; VMs on its slots stay."""
    show_one(state().output, state().client().delete_reservation(reservation_id))


# Projects


@command(projects, "list")
def list_projects() -> None:
    """Every project, its usage against its quota (used/limit, '-': no limit)."""
    show_list(state().output, Project, state().client().list_projects())


@command(projects, "show")
def show_project(name: str) -> None:
    show_one(state().output, state().client().get_project(name))


@command(projects, "create")
def create_project(
    name: str,
    instances: Annotated[int | None, typer.Option(help="most VMs")] = None,
    cpu: Annotated[int | None, typer.Option(help="most vCPUs, summed")] = None,
    memory_mb: Annotated[int | None, typer.Option(help="most MiB, summed")] = None,
    disk_gb: Annotated[int | None, typer.Option(help="most GB, summed")] = None,
    gpu: Annotated[int | None, typer.Option(help="most GPUs, summed")] = None,
    max_priority: Annotated[int | None, typer.Option(help="the highest priority its VMs may ask for")] = None,
) -> None:
    """Create a project with its quota (a limit left out: none)."""
    quota = Quota(
        instances=instances, cpu=cpu, memory_mb=memory_mb, disk_gb=disk_gb, gpu=gpu, max_priority=max_priority
    )
    show_one(state().output, state().client().create_project(ProjectRequest(name=name, quota=quota)))


# Tokens


@command(tokens, "list")
def list_tokens(project: Annotated[str | None, typer.Option(help="only this project's")] = None) -> None:
    """Every token (never its secret)."""
    show_list(state().output, Token, state().client().list_tokens(project=project))


@command(tokens, "show")
def show_token(token_id: Annotated[UUID, typer.Argument(metavar="ID")]) -> None:
    show_one(state().output, state().client().get_token(token_id))


@command(tokens, "create")
def create_token(
    name: str,
    project: Annotated[str, typer.Option(help="the project whose VMs it sees and changes")],
    scope: Annotated[list[Scope], typer.Option("--scope", "-s", help="repeat for several")],
    expires_at: Annotated[datetime | None, typer.Option(help="when it stops working (UTC); default: never")] = None,
) -> None:
    """Create a token; its secret is shown this once."""
    request = TokenRequest(name=name, project=project, scopes=scope, expires_at=_utc(expires_at))
    show_one(state().output, state().client().create_token(request))


@command(tokens, "revoke")
def revoke_token(token_id: Annotated[UUID, typer.Argument(metavar="ID")]) -> None:
    """Revoke a token: it is refused from now on."""
    state().client().revoke_token(token_id)
    stderr().print(f"token {token_id} revoked", markup=False)


# Settings


@command(strategy, "show")
def show_strategy() -> None:
    """The default strategy and where it comes from."""
    show_one(state().output, state().client().get_scheduler_settings())


@command(strategy, "set")
def set_strategy(name: Strategy) -> None:
    """Change the default strategy at runtime (admin)."""
    show_one(state().output, state().client().set_default_strategy(name))


# Events


@command(app, "simulate")
def simulate(
    name: Annotated[str, typer.Argument(help="the imagined VMs' name (with --count: the names' prefix)")],
    cpu: Annotated[int | None, typer.Option(help="vCPUs (default: the API's VMSCHED_DEFAULT_VM_CPU)")] = None,
    memory_mb: Annotated[int | None, typer.Option(help="MiB (default: VMSCHED_DEFAULT_VM_MEMORY_MB)")] = None,
    disk_gb: Annotated[int, typer.Option(help="GB of disk")] = 0,
    gpu: Annotated[int, typer.Option(help="GPUs")] = 0,
    label: Annotated[list[str], typer.Option("--label", "-l", help="key=value the host must have")] = [],  # noqa: B006
    count: Annotated[int, typer.Option(min=1, max=1000, help="this many (NAME-1..NAME-N), placed in order")] = 1,
    without: Annotated[list[str], typer.Option("--without", help="leave this host out, as if gone")] = [],  # noqa: B006
    strategy_name: Annotated[Strategy | None, typer.Option("--strategy", help="instead of the default")] = None,
) -> None:
    """Where VMs would land on the fleet as it is now, and why not (POST /v1/placement/simulate);
    nothing is placed. Exit 7 when one would not fit."""
    asked: dict[str, Any] = {"disk_gb": disk_gb, "gpu": gpu, "labels": _pairs(label, "--label")}
    asked |= {key: value for key, value in {"cpu": cpu, "memory_mb": memory_mb}.items() if value is not None}
    names = [name] if count == 1 else [f"{name}-{n}" for n in range(1, count + 1)]
    request = SimulationRequest(
        vms=[VmRequest(name=each, **asked) for each in names], without_hosts=without, strategy=strategy_name
    )
    answer = state().client().simulate(request)
    if state().output is Format.JSON:
        print(to_json(answer))
    else:
        show_list(state().output, SimulatedVm, answer.placements)
    if answer.unplaced:
        raise fail(f"{answer.unplaced} of {len(names)} would not fit", ExitCode.NOT_PLACED)


@command(app, "capacity")
def capacity(
    cpu: Annotated[int | None, typer.Option(help="vCPUs (default: the API's VMSCHED_DEFAULT_VM_CPU)")] = None,
    memory_mb: Annotated[int | None, typer.Option(help="MiB (default: VMSCHED_DEFAULT_VM_MEMORY_MB)")] = None,
    disk_gb: Annotated[int, typer.Option(help="GB of disk")] = 0,
    gpu: Annotated[int, typer.Option(help="GPUs")] = 0,
) -> None:
    """How many more VMs of this shape the fleet takes now: per host, then per zone and in total."""
    answer = state().client().capacity(cpu=cpu, memory_mb=memory_mb, disk_gb=disk_gb, gpu=gpu)
    if state().output is not Format.TABLE:
        print(to_json(answer))
        return
    show_list(state().output, HostCapacity, answer.hosts)
    zones = ", ".join(f"{zone.zone or '(no zone)'} {zone.fits}" for zone in answer.zones)
    stdout().print(f"total {answer.total}" + (f" ({zones})" if zones else ""), markup=False)


@command(app, "events")
def events(
    event_type: Annotated[list[str], typer.Option("--type", "-t", help="only these types (e.g. vm.assigned)")] = [],  # noqa: B006
    project: Annotated[str | None, typer.Option(help="only this project's events")] = None,
    since: Annotated[str | None, typer.Option(help="resume after this event id")] = None,
    count: Annotated[int | None, typer.Option(min=1, help="stop after this many events")] = None,
) -> None:
    """Follow the live events (Ctrl-C stops): a line each; -o json: one JSON object a line."""
    chosen = state()
    stream = chosen.client().watch(types=event_type or None, project=project, last_event_id=since)
    try:
        for event in itertools.islice(stream, count):
            if chosen.output is Format.JSON:
                print(json.dumps({"id": event.id, "type": event.type, "data": event.data}), flush=True)
            else:
                data = event.data if isinstance(event.data, str) else json.dumps(event.data, separators=(",", ":"))
                stdout().print(f"{event.id or '-'}  {event.type}  {data}", markup=False, soft_wrap=True)
    except KeyboardInterrupt:
        raise typer.Exit(int(ExitCode.OK)) from None
    finally:
        stream.close()  # the connection, at once
