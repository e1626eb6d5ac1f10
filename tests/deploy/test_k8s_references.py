"""The overlays' cross-references hold: every setting a service needs is set under the name
settings.py reads, every Secret and ConfigMap named exists (or is one an operator or the docs
create), probes hit paths the apps serve, selectors select, and no Service name injects a setting."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.kustomize_render import KubeObject
from tests.deploy.manifests import (
    OVERLAYS,
    ROOT,
    VARIABLE_REFERENCE,
    PodTemplate,
    container_environment,
    named,
    pod_templates,
    rendered,
    selector_matches,
    vmsched_pods,
)
from tests.deploy.operator_objects import CREATED_BY_HAND, created_by_operators, uses_operators
from tests.deploy.probes import api_routes_path, metrics_server_statuses
from tests.deploy.settings_env import (
    PREFIX,
    REQUIRED_FIELDS,
    environment_names,
    prefix_missing_message,
    require_prefix,
    unprefixed_settings,
    variable_of,
)
from vmsched_runtime.settings import MANAGEMENT_PORTS

DEPLOY_DOC = ROOT / "docs" / "deploy.md"


def component(pod: PodTemplate) -> str:
    return pod.labels["app.kubernetes.io/component"]


def test_settings_are_read_with_the_vmsched_prefix() -> None:
    assert not unprefixed_settings(), prefix_missing_message()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_vmsched_container_sets_the_settings_it_needs(overlay: str) -> None:
    require_prefix()
    objects = rendered(overlay)
    missing = []
    for pod in vmsched_pods(objects):
        (container,) = pod.spec["containers"]
        environment = container_environment(container, objects)
        for field in REQUIRED_FIELDS[component(pod)]:
            if variable_of(field) not in environment:
                missing.append(f"{pod.name}: {variable_of(field)}")
    assert missing == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_prefixed_variable_names_a_setting(overlay: str) -> None:
    require_prefix()
    objects = rendered(overlay)
    known = environment_names()
    unknown = sorted(
        {
            f"{pod.name}: {name}"
            for pod in vmsched_pods(objects)
            for container in pod.containers()
            for name in container_environment(container, objects)
            if name.startswith(PREFIX) and name not in known
        }
    )
    assert unknown == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_variable_references_name_a_variable_defined_before_them(overlay: str) -> None:
    # Kubernetes expands $(NAME) only from variables defined earlier; otherwise it is left verbatim.
    problems = []
    for pod in pod_templates(rendered(overlay)):
        for container in pod.containers():
            defined: set[str] = set()
            for variable in container.get("env", []):
                for reference in VARIABLE_REFERENCE.findall(variable.get("value", "")):
                    if reference not in defined:
                        problems.append(f"{pod.name}: {variable['name']} uses $({reference}) before it is set")
                defined.add(variable["name"])
            for argument in container.get("args", []) + container.get("command", []):
                for reference in VARIABLE_REFERENCE.findall(argument):
                    if reference not in defined:
                        problems.append(f"{pod.name}: an argument uses $({reference}), which is not set")
    assert problems == []


def _references(node: Any, kind: str, keys: tuple[str, ...]) -> Iterator[tuple[str, str | None]]:
    """(name, key) of every reference to a Secret or ConfigMap under the given field names."""
    if isinstance(node, dict):
        for field, value in node.items():
            if field in keys and isinstance(value, dict) and "name" in value:
                yield value["name"], value.get("key")
            elif field == "volumes" and isinstance(value, list):
                for volume in value:
                    source = volume.get("secret" if kind == "Secret" else "configMap")
                    if source is not None:
                        yield source.get("secretName", source.get("name")), None
            yield from _references(value, kind, keys)
    elif isinstance(node, list):
        for item in node:
            yield from _references(item, kind, keys)


def _keys_of(obj: KubeObject) -> set[str]:
    return set(obj.get("data", {})) | set(obj.get("stringData", {}))


def available_secrets(objects: list[KubeObject]) -> dict[str, set[str]]:
    secrets = {name: _keys_of(obj) for name, obj in named(objects, "Secret").items()}
    for created in created_by_operators(objects):
        secrets.update(created.secrets)
    if uses_operators(objects):
        secrets.update(CREATED_BY_HAND)
    return secrets


# Field names that refer to a Secret (Kubernetes' own, and the Redis operator's `redisSecret`).
SECRET_REFERENCES = ("secretKeyRef", "secretRef", "redisSecret")
CONFIG_MAP_REFERENCES = ("configMapKeyRef", "configMapRef")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_secret_named_exists_with_the_key_named(overlay: str) -> None:
    objects = rendered(overlay)
    secrets = available_secrets(objects)
    problems = [
        f"Secret {name}" + (f" key {key}" if key else "")
        for name, key in _references(objects, "Secret", SECRET_REFERENCES)
        if name not in secrets or (key is not None and key not in secrets[name])
    ]
    assert problems == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_config_map_named_exists_with_the_key_named(overlay: str) -> None:
    objects = rendered(overlay)
    config_maps = {name: _keys_of(obj) for name, obj in named(objects, "ConfigMap").items()}
    problems = [
        f"ConfigMap {name}" + (f" key {key}" if key else "")
        for name, key in _references(objects, "ConfigMap", CONFIG_MAP_REFERENCES)
        if name not in config_maps or (key is not None and key not in config_maps[name])
    ]
    assert problems == []


def test_the_secrets_created_by_hand_are_created_in_the_deploy_guide() -> None:
    guide = DEPLOY_DOC.read_text()
    for name, keys in CREATED_BY_HAND.items():
        for key in keys:
            assert re.search(rf"create secret generic {name}\b[^\n]*--from-literal={key}=", guide), (name, key)


SECRET_WORDS = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL", re.IGNORECASE)
URL_WITH_PASSWORD = re.compile(r"://[^/@\s]*:[^/@\s]+@")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_config_map_holds_a_secret(overlay: str) -> None:
    leaks = [
        f"ConfigMap {name}: {key}"
        for name, config_map in named(rendered(overlay), "ConfigMap").items()
        for key, value in config_map.get("data", {}).items()
        if SECRET_WORDS.search(key) or URL_WITH_PASSWORD.search(str(value))
    ]
    assert leaks == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_literal_password_in_a_vmsched_container(overlay: str) -> None:
    # Passwords reach the containers through secretKeyRef only; URLs embed them as $(VARIABLE).
    objects = rendered(overlay)
    leaks = [
        f"{pod.name}: {variable['name']}"
        for pod in vmsched_pods(objects)
        for container in pod.containers()
        for variable in container.get("env", [])
        if "value" in variable
        and (SECRET_WORDS.search(variable["name"]) or URL_WITH_PASSWORD.search(variable["value"]))
        and not VARIABLE_REFERENCE.search(variable["value"])
    ]
    assert leaks == []


def service_link_variables(service: str, ports: list[dict[str, Any]]) -> set[str]:
    """The variables Kubernetes' service links inject into a pod for one Service."""
    base = service.upper().replace("-", "_")
    names = {f"{base}_SERVICE_HOST", f"{base}_SERVICE_PORT", f"{base}_PORT"}
    for port in ports:
        protocol = port.get("protocol", "TCP")
        prefix = f"{base}_PORT_{port['port']}_{protocol}"
        names |= {prefix, f"{prefix}_PROTO", f"{prefix}_PORT", f"{prefix}_ADDR"}
        if "name" in port:
            names.add(f"{base}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}")
    return names


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_service_name_collides_with_a_setting(overlay: str) -> None:
    require_prefix()
    objects = rendered(overlay)
    services = {name: obj["spec"]["ports"] for name, obj in named(objects, "Service").items()}
    for created in created_by_operators(objects):
        services.update({service: [{"port": created.client_port}] for service in created.services})
    settings = set(environment_names())
    collisions = sorted(
        f"Service {name}: {variable}"
        for name, ports in services.items()
        for variable in service_link_variables(name, ports) & settings
    )
    assert collisions == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_links_are_off_in_every_pod(overlay: str) -> None:
    # Belt and braces with the test above: no variable is injected at all.
    assert [
        pod.name for pod in pod_templates(rendered(overlay)) if pod.spec.get("enableServiceLinks") is not False
    ] == []


def _probes(container: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        if kind in container:
            yield kind, container[kind]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_long_running_vmsched_container_has_liveness_and_readiness_probes(overlay: str) -> None:
    missing = [
        f"{pod.name}: {kind}"
        for pod in vmsched_pods(rendered(overlay))
        if pod.workload["kind"] != "Job"
        for container in pod.spec["containers"]
        for kind in ("livenessProbe", "readinessProbe")
        if kind not in container
    ]
    assert missing == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_api_probe_paths_are_routes_of_the_api(overlay: str) -> None:
    paths = {
        probe["httpGet"]["path"]
        for pod in vmsched_pods(rendered(overlay))
        if component(pod) == "api"
        for container in pod.spec["containers"]
        for _, probe in _probes(container)
    }
    assert paths == {"/healthz", "/readyz"}
    assert {path: api_routes_path(path) for path in paths} == dict.fromkeys(paths, True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_scheduler_and_gateway_probe_paths_are_served_by_their_metrics_server(overlay: str) -> None:
    paths = sorted(
        {
            probe["httpGet"]["path"]
            for pod in vmsched_pods(rendered(overlay))
            if component(pod) in ("scheduler", "gateway")
            for container in pod.spec["containers"]
            for _, probe in _probes(container)
        }
    )
    assert paths == ["/healthz", "/readyz"]
    assert metrics_server_statuses([*paths, "/metrics"]) == dict.fromkeys([*paths, "/metrics"], 200)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_and_ports_agree_with_the_settings(overlay: str) -> None:
    require_prefix()
    objects = rendered(overlay)
    problems = []
    for pod in vmsched_pods(objects):
        for container in pod.spec["containers"]:
            ports = {port["name"]: port["containerPort"] for port in container.get("ports", [])}
            environment = container_environment(container, objects)
            for kind, probe in _probes(container):
                if probe["httpGet"]["port"] not in ports:
                    problems.append(f"{pod.name}: {kind} uses port {probe['httpGet']['port']}, not declared")
            # The port the process listens on is the port the container declares.
            setting = {"api": "api_port", "scheduler": "metrics_port", "gateway": "metrics_port"}.get(component(pod))
            if setting is not None:
                listened = environment.get(variable_of(setting))
                if listened is None or int(listened) not in ports.values():
                    problems.append(f"{pod.name}: {variable_of(setting)}={listened}, ports {ports}")
    assert problems == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_service_selects_pods_that_declare_its_target_ports(overlay: str) -> None:
    objects = rendered(overlay)
    templates = list(pod_templates(objects))
    problems = []
    for name, service in named(objects, "Service").items():
        selected = [
            pod for pod in templates if selector_matches({"matchLabels": service["spec"]["selector"]}, pod.labels)
        ]
        if not selected:
            problems.append(f"Service {name} selects no pod")
        for pod in selected:
            declared = {port.get("name") for container in pod.spec["containers"] for port in container.get("ports", [])}
            for port in service["spec"]["ports"]:
                if isinstance(port.get("targetPort"), str) and port["targetPort"] not in declared:
                    problems.append(f"Service {name}: {pod.name} has no port {port['targetPort']}")
    assert problems == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_disruption_budgets_and_the_autoscaler_name_real_workloads(overlay: str) -> None:
    objects = rendered(overlay)
    templates = list(pod_templates(objects))
    deployments = named(objects, "Deployment")
    budgets = named(objects, "PodDisruptionBudget")
    assert {
        name
        for name, budget in budgets.items()
        if any(selector_matches(budget["spec"]["selector"], pod.labels) for pod in templates)
    } == set(budgets)
    # Every long-running vmsched workload has a budget.
    assert {
        pod.workload["metadata"]["name"] for pod in vmsched_pods(objects) if pod.workload["kind"] == "Deployment"
    } <= set(budgets)
    (autoscaler,) = named(objects, "HorizontalPodAutoscaler").values()
    target = autoscaler["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "vmsched-scheduler")
    assert target["name"] in deployments
    assert 1 <= autoscaler["spec"]["minReplicas"] <= autoscaler["spec"]["maxReplicas"]


def test_the_service_monitor_scrapes_every_vmsched_service_on_a_port_it_has() -> None:
    objects = rendered("ha")
    (monitor,) = named(objects, "ServiceMonitor").values()
    services = [
        service
        for service in named(objects, "Service").values()
        if selector_matches(monitor["spec"]["selector"], service["metadata"].get("labels", {}))
    ]
    scraped = {
        service["metadata"]["name"]
        for service in services
        for endpoint in monitor["spec"]["endpoints"]
        if endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    }
    assert scraped == {"api", "scheduler-metrics", "gateway-metrics"}
    assert {endpoint["path"] for endpoint in monitor["spec"]["endpoints"]} == {"/metrics"}


def _servers(objects: list[KubeObject]) -> dict[str, tuple[dict[str, str], int]]:
    """Each server's pod labels and client port: the operators' in ha, the dev pods' in dev."""
    if uses_operators(objects):
        created = created_by_operators(objects)
        return {str(server.client_port): (server.pod_labels, server.client_port) for server in created}
    servers = {}
    for pod in pod_templates(objects):
        if not pod.is_vmsched:
            (container,) = pod.spec["containers"]
            port = container["ports"][0]["containerPort"]
            servers[str(port)] = (pod.labels, port)
    return servers


def _egress_allows(policies: list[KubeObject], pod: PodTemplate, labels: dict[str, str], port: int) -> bool:
    for policy in policies:
        if "Egress" not in policy["spec"].get("policyTypes", []):
            continue
        if not selector_matches(policy["spec"]["podSelector"], pod.labels):
            continue
        for rule in policy["spec"].get("egress", []):
            ports = {entry["port"] for entry in rule.get("ports", [])}
            peers = rule.get("to", [])
            if port in ports and any(
                "podSelector" in peer and selector_matches(peer["podSelector"], labels) for peer in peers
            ):
                return True
    return False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_the_gateway_may_reach_the_brokers_management_api_to_enroll_agents(overlay: str) -> None:
    objects = rendered(overlay)
    policies = list(named(objects, "NetworkPolicy").values())
    broker_labels = _servers(objects)["5672"][0]
    reach = {
        pod.name: _egress_allows(policies, pod, broker_labels, MANAGEMENT_PORTS["amqp"][1])
        for pod in vmsched_pods(objects)
    }
    assert reach == {pod.name: component(pod) == "gateway" for pod in vmsched_pods(objects)}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_let_each_service_reach_only_its_servers(overlay: str) -> None:
    objects = rendered(overlay)
    policies = list(named(objects, "NetworkPolicy").values())
    servers = _servers(objects)
    assert {port for _, port in servers.values()} == {5672, 6379, 5432}
    needs = {
        "api": {5672, 6379, 5432},
        "scheduler": {5672, 6379, 5432},
        "gateway": {5672, 6379, 5432},
        "migrate": {5432},
    }
    problems = []
    for pod in vmsched_pods(objects):
        denied = [
            policy
            for policy in policies
            if not policy["spec"].get("egress")
            and not policy["spec"].get("ingress")
            and selector_matches(policy["spec"]["podSelector"], pod.labels)
        ]
        if not denied:
            problems.append(f"{pod.name}: no default-deny policy selects it")
        for labels, port in servers.values():
            allowed = _egress_allows(policies, pod, labels, port)
            if allowed != (port in needs[component(pod)]):
                problems.append(f"{pod.name}: egress to port {port} {'allowed' if allowed else 'denied'}")
    assert problems == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_vmsched_containers_are_non_root_read_only_and_bounded(overlay: str) -> None:
    problems = []
    for pod in vmsched_pods(rendered(overlay)):
        pod_security = pod.spec.get("securityContext", {})
        if pod_security.get("runAsNonRoot") is not True or pod_security.get("runAsUser", 0) == 0:
            problems.append(f"{pod.name}: may run as root")
        if pod.spec.get("automountServiceAccountToken") is not False:
            problems.append(f"{pod.name}: mounts a service account token it does not use")
        for container in pod.containers():
            security = container.get("securityContext", {})
            if security.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{pod.name}: writable root filesystem")
            if security.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{pod.name}: privilege escalation allowed")
            if security.get("capabilities", {}).get("drop") != ["ALL"]:
                problems.append(f"{pod.name}: capabilities not dropped")
            resources = container.get("resources", {})
            for bound in ("requests", "limits"):
                if set(resources.get(bound, {})) != {"cpu", "memory"}:
                    problems.append(f"{pod.name}: {bound} must name cpu and memory")
    assert problems == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_vmsched_container_runs_the_overlays_image_and_an_entry_point_of_ours(overlay: str) -> None:
    from tests.deploy.entry_points import console_scripts, runnable_modules

    objects = rendered(overlay)
    images = {container["image"] for pod in vmsched_pods(objects) for container in pod.containers()}
    assert len(images) == 1, images
    (image,) = images
    assert ":" in image.rsplit("/", 1)[-1], f"{image}: no tag (the overlay's images entry did not apply)"
    for pod in vmsched_pods(objects):
        for container in pod.containers():
            command = container["command"]
            if command[:2] == ["python", "-m"]:
                assert command[2] in runnable_modules(), command
            else:
                assert command[0] in console_scripts(), command
