"""docker-compose.yml, checked without a Docker engine: against the compose-spec JSON schema
(vendored in deploy/compose/), and for the cross-references a `docker compose up` depends on."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy.entry_points import SCHEMA_UPGRADE_MODULE
from tests.deploy.manifests import ROOT
from tests.deploy.probes import api_routes_path
from tests.deploy.settings_env import PREFIX, REQUIRED_FIELDS, environment_names, require_prefix, variable_of

COMPOSE_FILE = ROOT / "docker-compose.yml"
SERVER_PORTS_FILE = ROOT / "deploy" / "compose" / "server-ports.yml"
SCHEMA = ROOT / "deploy" / "compose" / "compose-spec.json"
VMSCHED_SERVICES = {"migrate": "migrate", "api": "api", "scheduler": "scheduler", "gateway": "gateway"}
SERVERS = {"rabbitmq", "redis", "postgres"}
# Issue 17: current server versions.
MINIMUM_VERSIONS = {"rabbitmq": (3, 13), "redis": (7, 2), "postgres": (16,)}


@cache
def _load(path: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / path).read_text())
    return loaded


def compose() -> dict[str, Any]:
    return _load(str(COMPOSE_FILE.relative_to(ROOT)))


def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose()["services"]
    return found


@pytest.mark.parametrize("path", [COMPOSE_FILE, SERVER_PORTS_FILE], ids=lambda path: path.name)
def test_the_compose_files_match_the_compose_specification(path: Any) -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    errors = [
        f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(yaml.safe_load(path.read_text()))
    ]
    assert errors == []


def test_every_depends_on_names_a_service() -> None:
    names = set(services())
    dangling = [
        f"{name} -> {dependency}"
        for name, service in services().items()
        for dependency in service.get("depends_on", {})
        if dependency not in names
    ]
    assert dangling == []


def test_the_server_ports_override_names_only_servers() -> None:
    assert set(yaml.safe_load(SERVER_PORTS_FILE.read_text())["services"]) == SERVERS


def test_one_image_is_built_once_and_reused_by_every_vmsched_service() -> None:
    builders = {name: service for name, service in services().items() if "build" in service}
    assert list(builders) == ["migrate"]
    build = builders["migrate"]["build"]
    assert (ROOT / build["context"] / build["dockerfile"]).is_file()
    image = builders["migrate"]["image"]
    users = {name for name, service in services().items() if service.get("image") == image}
    assert users == {*VMSCHED_SERVICES, "agents"}


def test_servers_are_not_published_on_the_host_unless_asked() -> None:
    published = {name for name in SERVERS if services()[name].get("ports")}
    assert published == set()
    # The API is published, on loopback only.
    assert all(port.startswith("127.0.0.1:") for port in services()["api"]["ports"])


def _version(image: str) -> tuple[int, ...]:
    tag = image.rpartition(":")[2]
    match = re.match(r"(\d+)(?:\.(\d+))?", tag)
    assert match, f"{image}: pin a version, not {tag!r}"
    return tuple(int(part) for part in match.groups() if part is not None)


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_servers_run_a_current_version(server: str) -> None:
    image = services()[server]["image"]
    assert image.partition(":")[0] == server
    assert _version(image) >= MINIMUM_VERSIONS[server]


def test_the_migration_runs_once_before_the_services_start() -> None:
    migrate = services()["migrate"]
    assert migrate["command"] == ["python", "-m", SCHEMA_UPGRADE_MODULE]
    assert migrate.get("restart", "no") == "no"
    for name in ("api", "scheduler", "gateway"):
        depends_on = services()[name]["depends_on"]
        assert depends_on["migrate"] == {"condition": "service_completed_successfully"}
        assert {server: depends_on[server]["condition"] for server in SERVERS} == dict.fromkeys(
            SERVERS, "service_healthy"
        )


def test_every_server_has_a_healthcheck() -> None:
    assert [name for name in SERVERS if "test" not in services()[name].get("healthcheck", {})] == []


HEALTHCHECK_URL = re.compile(r"http://127\.0\.0\.1:(\d+)(/[a-z]+)")


@pytest.mark.parametrize("name", ["api", "scheduler", "gateway"])
def test_vmsched_services_have_a_healthcheck_on_the_port_they_listen_on(name: str) -> None:
    require_prefix()
    service = services()[name]
    match = HEALTHCHECK_URL.search(" ".join(service["healthcheck"]["test"]))
    assert match, service["healthcheck"]
    port, path = int(match[1]), match[2]
    setting = "api_port" if name == "api" else "metrics_port"
    assert int(service["environment"][variable_of(setting)]) == port
    if name == "api":
        assert api_routes_path(path)
    else:
        assert path == "/readyz"  # served by the metrics server: tests/deploy/test_k8s_references.py


@pytest.mark.parametrize("name", sorted(VMSCHED_SERVICES))
def test_every_vmsched_service_sets_the_settings_it_needs(name: str) -> None:
    require_prefix()
    environment = services()[name]["environment"]
    missing = [
        variable_of(field) for field in REQUIRED_FIELDS[VMSCHED_SERVICES[name]] if variable_of(field) not in environment
    ]
    assert missing == []


def test_every_prefixed_variable_names_a_setting() -> None:
    require_prefix()
    known = environment_names()
    unknown = sorted(
        {
            f"{name}: {variable}"
            for name, service in services().items()
            for variable in service.get("environment", {})
            if variable.startswith(PREFIX) and variable not in known
        }
    )
    assert unknown == []
