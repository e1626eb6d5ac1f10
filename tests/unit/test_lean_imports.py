"""The client library, the agent SDK and the pure packages (the domain, the placement engine) carry none
of the services' stack: importing them (in a fresh interpreter) loads no database, Redis or broker
client, and their pyprojects say so."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The services' stack: the database, Redis, and (for the client) the broker.
DATABASE_AND_CACHE = {"sqlalchemy", "asyncpg", "alembic", "redis", "hiredis"}
BROKER = {"aio_pika", "aiormq", "faststream"}
# vmsched's packages of the servers' side: their wiring and their adapters.
SERVER_SIDE = {"vmsched_runtime", "vmsched_amqp", "vmsched_pg", "vmsched_redis"}
# The distributions of the database and Redis, and the adapters that install them.
WITH_DATABASE_OR_REDIS = {
    "sqlalchemy",
    "asyncpg",
    "alembic",
    "redis",
    "hiredis",
    "vmsched-pg",
    "vmsched-redis",
}


def loaded_after(code: str) -> set[str]:
    """The top-level modules a fresh interpreter holds after running ``code``."""
    # (a module set to None in sys.modules is one blocked from importing, not one loaded)
    probe = (
        f"{code}\nimport sys, json\n"
        "print(json.dumps(sorted({m.split('.')[0] for m, module in sys.modules.items() if module is not None})))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(done.stdout.splitlines()[-1]))


def loaded_with_blocked(modules: set[str], code: str) -> set[str]:
    """What ``code`` loads in a fresh interpreter where ``modules`` cannot be imported (as if they
    were not installed)."""
    blocked = "".join(f"sys.modules[{name!r}] = None\n" for name in sorted(modules))
    return loaded_after(f"import sys\n{blocked}{code}")


def every_module(package: str) -> str:
    """Code importing ``package`` and every module in it."""
    return (
        f"import importlib, pkgutil, {package}\n"
        f"for found in pkgutil.walk_packages({package}.__path__, '{package}.'):\n"
        "    importlib.import_module(found.name)"
    )


def dependencies(package: str) -> set[str]:
    project = tomllib.loads((ROOT / package / "pyproject.toml").read_text())["project"]
    return {requirement.split("==")[0].split("[")[0].split(";")[0].strip() for requirement in project["dependencies"]}


def workspace_folders() -> dict[str, str]:
    """Each workspace distribution's folder: ``{"vmsched-domain": "libs/domain", ...}``."""
    members = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]["members"]
    return {tomllib.loads((ROOT / m / "pyproject.toml").read_text())["project"]["name"]: m for m in members}


def installed(package: str) -> set[str]:
    """What installing ``package`` installs of its direct dependencies and, through vmsched's own
    packages, theirs."""
    folders = workspace_folders()
    found: set[str] = set()
    todo = [package]
    while todo:
        for name in dependencies(todo.pop()):
            if name not in found:
                found.add(name)
                if name in folders:
                    todo.append(folders[name])
    return found


def test_the_client_imports_neither_the_database_nor_the_broker_nor_the_cli() -> None:
    loaded = loaded_after("import vmsched_client, vmsched_client.sync, vmsched_client.aio")
    assert {"httpx", "pydantic", "vmsched_contract"} <= loaded
    # (not rich: httpx loads it for its own command line when it happens to be installed)
    assert not loaded & (DATABASE_AND_CACHE | BROKER | SERVER_SIDE | {"typer", "vmsched_domain", "fastapi"})


def test_the_client_depends_on_httpx_and_pydantic_only() -> None:
    # vmsched-contract is the API's pydantic models (next test): nothing else comes with it.
    # (and sniffio, which httpcore looks for at every request: see libs/client/pyproject.toml)
    assert dependencies("libs/client") == {"httpx", "pydantic", "sniffio", "vmsched-contract"}
    assert dependencies("libs/contract") == {"pydantic"}


def test_the_contract_imports_pydantic_only() -> None:
    loaded = loaded_after(
        "import vmsched_contract.api, vmsched_contract.messages, vmsched_contract.decision, vmsched_contract.whatif"
    )
    assert not loaded & (DATABASE_AND_CACHE | BROKER | SERVER_SIDE | {"vmsched_domain", "pydantic_settings", "httpx"})


@pytest.mark.parametrize("module", ["vmsched_agent", "vmsched_agent.cli"])
def test_the_agent_sdk_imports_no_database_nor_redis(module: str) -> None:
    loaded = loaded_after(f"import {module}")
    assert "aio_pika" in loaded
    assert not loaded & (DATABASE_AND_CACHE | {"vmsched_pg", "vmsched_redis"})


@pytest.mark.parametrize("module", ["vmsched_agent", "vmsched_agent.cli", "vmsched_agent.simulator"])
def test_the_agent_sdk_imports_without_the_database_and_redis_installed(module: str) -> None:
    loaded = loaded_with_blocked({"sqlalchemy", "asyncpg", "redis"}, f"import {module}")
    assert "vmsched_agent" in loaded


def test_the_agent_sdk_installs_no_database_nor_redis() -> None:
    assert not installed("libs/agent") & WITH_DATABASE_OR_REDIS


@pytest.mark.parametrize("package", ["vmsched_domain", "vmsched_placement"])
def test_the_domain_and_the_engine_import_without_any_server_client_installed(package: str) -> None:
    loaded = loaded_with_blocked({"sqlalchemy", "asyncpg", "redis", "aio_pika", "faststream"}, every_module(package))
    assert package in loaded
    assert not loaded & (DATABASE_AND_CACHE | BROKER | SERVER_SIDE | {"pydantic_settings", "structlog"})


def test_the_domain_and_the_engine_depend_on_the_contract_and_the_domain_only() -> None:
    assert dependencies("libs/domain") == {"vmsched-contract", "pydantic"}
    assert dependencies("libs/placement") == {"numpy", "vmsched-contract", "vmsched-domain"}
    assert installed("libs/placement") == {"numpy", "vmsched-contract", "vmsched-domain", "pydantic"}


def test_the_agent_sdk_imports_and_describes_the_libvirt_agent_without_libvirt_installed() -> None:
    # libvirt-python is an extra (vmsched-agent[libvirt]): blocked here as if it were not installed.
    blocked = "import sys; sys.modules['libvirt'] = None\n"
    loaded = loaded_after(
        blocked + "import vmsched_agent, vmsched_agent.cli, vmsched_agent.libvirt\n"
        "vmsched_agent.cli.build_parser().parse_args(['libvirt', '--uri', 'qemu:///system', '--host-id', 'hv'])"
    )
    assert "vmsched_agent" in loaded
    assert "libvirt" not in loaded
    refused = subprocess.run(
        [
            sys.executable,
            "-c",
            blocked + "import vmsched_agent.cli as cli; sys.exit(cli.main(['libvirt', '--uri', 'qemu:///system', "
            "'--host-id', 'hv-0001']))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert "libvirt-python is not installed: pip install 'vmsched-agent[libvirt]'" in refused.stderr


def test_libvirt_python_is_the_agents_extra_not_a_dependency() -> None:
    project = tomllib.loads((ROOT / "libs/agent/pyproject.toml").read_text())["project"]
    assert not any(requirement.startswith("libvirt") for requirement in project["dependencies"])
    assert project["optional-dependencies"]["libvirt"] == ["libvirt-python==12.8.0"]
