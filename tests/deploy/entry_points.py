"""The project's entry points: console scripts from the workspace's pyproject.toml files, and the
modules ``python -m`` runs."""

from __future__ import annotations

import importlib
import importlib.util
import tomllib
from collections.abc import Callable
from functools import cache

from tests.deploy.manifests import ROOT

# Each service's package runs as `python -m <package>`; the migration as a module of its own.
SERVICE_PACKAGES = ("vmsched_api", "vmsched_scheduler", "vmsched_gateway", "vmsched_agent", "vmsched_router")
SCHEMA_UPGRADE_MODULE = "vmsched_pg.schema_upgrade"


@cache
def console_scripts() -> dict[str, str]:
    """Script name -> ``module:function``, over every workspace member."""
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    scripts: dict[str, str] = {}
    for member in root["tool"]["uv"]["workspace"]["members"]:
        project = tomllib.loads((ROOT / member / "pyproject.toml").read_text())["project"]
        scripts.update(project.get("scripts", {}))
    return scripts


def script_function(target: str) -> Callable[..., object]:
    module, _, function = target.partition(":")
    loaded: Callable[..., object] = getattr(importlib.import_module(module), function)
    return loaded


def runnable_modules() -> set[str]:
    """Modules ``python -m`` can run: packages with a ``__main__`` and the schema upgrade."""
    runnable = {package for package in SERVICE_PACKAGES if importlib.util.find_spec(f"{package}.__main__")}
    if callable(getattr(importlib.import_module(SCHEMA_UPGRADE_MODULE), "main", None)):
        runnable.add(SCHEMA_UPGRADE_MODULE)
    return runnable
