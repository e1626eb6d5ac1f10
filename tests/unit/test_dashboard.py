"""The Grafana dashboard charts every vmsched metric, and only metrics that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

# Importing each process's metrics registers them: the dashboard covers every service's.
import vmsched_api.fleet_metrics
import vmsched_api.request_phases  # noqa: F401
import vmsched_common.metrics  # noqa: F401
import vmsched_gateway.metrics  # noqa: F401
import vmsched_router.metrics  # noqa: F401
import vmsched_scheduler.metrics  # noqa: F401

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "vmsched-dashboard.json"


def families() -> set[str]:
    return {family.name for family in REGISTRY.collect() if family.name.startswith("vmsched_")}


def exported_names() -> set[str]:
    suffixes = ("", "_total", "_bucket", "_count", "_sum", "_created")
    return {family + suffix for family in families() for suffix in suffixes}


def test_the_dashboard_charts_every_vmsched_metric_and_no_unknown_one() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    used = {name for expr in exprs for name in re.findall(r"\bvmsched_[a-z_]+", expr)}
    unknown = used - exported_names()
    assert not unknown, f"the dashboard queries metrics nobody exports: {sorted(unknown)}"
    # A histogram or counter is charted through one of its series (_bucket, _total).
    uncharted = {family for family in families() if not any(name.startswith(family) for name in used)}
    assert not uncharted, f"metrics missing from the dashboard: {sorted(uncharted)}"
