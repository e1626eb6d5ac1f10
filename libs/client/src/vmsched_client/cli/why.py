"""``vmsched vms why``: a VM's decision record as a person reads it. Pure: lines of text."""

from __future__ import annotations

from vmsched_contract.api import Placement, Vm
from vmsched_contract.decision import PlacementRecord


def _score(score: float | None) -> str:
    return "unscored" if score is None else f"score {score:.3g}"


def _hosts(count: int) -> str:
    return f"{count} host" + ("" if count == 1 else "s")


def explain(vm: Vm, placement: Placement) -> list[str]:
    """The chosen host and its score, then the hosts rejected grouped by rule, most first, with the
    numbers of a few of them."""
    record = placement.decision
    title = f"VM {vm.name} ({vm.id}): {vm.status.value}"
    if record is None:
        reason = f" ({vm.status_reason})" if vm.status_reason else ""
        return [title + reason, "no scheduler has decided yet"]
    lines = [title, *_outcome(record)]
    lines.append(
        f"considered {_hosts(record.considered)}, {record.eligible} eligible; "
        f"decided {record.decided_at:%Y-%m-%d %H:%M:%S} in {record.decision_us:.0f} µs"
    )
    lines.extend(_rejections(record))
    if record.preferences:
        preferred = "" if record.preferred is None else f" ({_hosts(record.preferred)} without a penalty ranked)"
        soft = ", ".join(f"{rule} {count}" for rule, count in _most_first(record.preferences))
        lines.append(f"soft rules would rather not use: {soft}{preferred}")
    for refused in record.refused_claims:
        detail = f": {refused.detail}" if refused.detail else ""
        lines.append(f"claim refused on {refused.host} ({refused.stage}, {refused.outcome}){detail}")
    if record.claim_conflicts and not record.refused_claims:
        lines.append(f"claims refused before one held: {record.claim_conflicts}")
    if record.exclusions_ignored:
        lines.append("every host that fits had failed this VM before: its exclusions were set aside")
    return lines


def _outcome(record: PlacementRecord) -> list[str]:
    if record.host is not None:
        lines = [f"placed on {record.host} ({record.strategy.value}, {_score(record.score)})"]
        runners_up = [c for c in record.candidates if c.host != record.host]
        if runners_up:
            lines.append("next best: " + ", ".join(f"{c.host} ({_score(c.score)})" for c in runners_up))
        return lines
    lines = [f"no host: {record.reason or 'unknown reason'} ({record.strategy.value})"]
    if record.detail:
        lines.append(record.detail)
    return lines


def _most_first(counts: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def _rejections(record: PlacementRecord) -> list[str]:
    if not record.rejections:
        return ["no host was rejected"]
    total = sum(record.rejections.values())
    lines = [f"rejected {_hosts(total)}, by the first rule each failed:"]
    width = max(len(rule) for rule in record.rejections)
    for rule, count in _most_first(record.rejections):
        lines.append(f"  {rule:<{width}}  {_hosts(count)}")
        lines.extend(f"      {example.host}: {example.reason}" for example in record.examples.get(rule, []))
    return lines
