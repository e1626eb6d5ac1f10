"""The rendered Kubernetes overlays, and the parts of them the deploy tests read."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from devtools.kustomize_render import KubeObject, build

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("dev", "ha")
SCHEMAS = K8S / "schemas"
# The label every vmsched workload carries (the servers' pods do not).
PART_OF_VMSCHED = ("app.kubernetes.io/part-of", "vmsched")
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}


@cache
def _rendered(overlay: str) -> tuple[KubeObject, ...]:
    return tuple(build(K8S / "overlays" / overlay))


def rendered(overlay: str) -> list[KubeObject]:
    """The overlay's objects, as ``kubectl apply -k`` would receive them (a fresh copy per call)."""
    return copy.deepcopy(list(_rendered(overlay)))


def named(objects: list[KubeObject], kind: str) -> dict[str, KubeObject]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == kind}


@dataclass(frozen=True)
class PodTemplate:
    workload: KubeObject
    labels: dict[str, str]
    spec: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.workload['kind']} {self.workload['metadata']['name']}"

    @property
    def is_vmsched(self) -> bool:
        key, value = PART_OF_VMSCHED
        return self.labels.get(key) == value

    def containers(self) -> list[dict[str, Any]]:
        return list(self.spec.get("initContainers", [])) + list(self.spec["containers"])


def pod_templates(objects: list[KubeObject]) -> Iterator[PodTemplate]:
    for obj in objects:
        if obj["kind"] in WORKLOAD_KINDS:
            template = obj["spec"]["template"]
            yield PodTemplate(obj, dict(template["metadata"].get("labels", {})), template["spec"])


def vmsched_pods(objects: list[KubeObject]) -> list[PodTemplate]:
    return [pod for pod in pod_templates(objects) if pod.is_vmsched]


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) against a set of labels."""
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


VARIABLE_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def container_environment(container: dict[str, Any], objects: list[KubeObject]) -> dict[str, str | None]:
    """Every variable the container gets: envFrom ConfigMaps' keys, then env (a Secret's value is
    None: it is only known in the cluster)."""
    config_maps = named(objects, "ConfigMap")
    environment: dict[str, str | None] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            environment.update(config_maps[source["configMapRef"]["name"]].get("data", {}))
    for variable in container.get("env", []):
        environment[variable["name"]] = variable.get("value")
    return environment
