"""Every object of every overlay is one a cluster would accept: Kubernetes' own kinds against the
API's schemas (kubernetes-validate, strict: unknown fields are errors), the operators' kinds against
their vendored CRD schemas."""

from __future__ import annotations

import pytest
from kubernetes_validate import SchemaNotFoundError, ValidationError, validate  # type: ignore[import-untyped]

from tests.deploy.crd_schemas import custom_resource_errors, is_custom_resource, vendored
from tests.deploy.manifests import OVERLAYS, rendered

# The oldest Kubernetes these manifests are meant for, and the newest kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.30", "1.37")


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_builtin_object_matches_the_kubernetes_schema(overlay: str, version: str) -> None:
    problems = []
    for obj in rendered(overlay):
        if is_custom_resource(obj):
            continue
        name = f"{obj['kind']} {obj['metadata']['name']}"
        try:
            validate(obj, version, strict=True)
        except SchemaNotFoundError:
            problems.append(f"{name}: no schema for {obj['apiVersion']} in Kubernetes {version} (nor vendored)")
        except ValidationError as error:
            problems.append(f"{name}: {'.'.join(map(str, error.absolute_path))}: {error.message}")
    assert problems == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_custom_resource_matches_its_operators_schema(overlay: str) -> None:
    problems = [
        f"{obj['kind']} {obj['metadata']['name']}: {problem}"
        for obj in rendered(overlay)
        if is_custom_resource(obj)
        for problem in custom_resource_errors(obj)
    ]
    assert problems == []


def test_the_ha_overlay_uses_each_operator() -> None:
    kinds = {(obj["apiVersion"], obj["kind"]) for obj in rendered("ha")}
    assert set(vendored()) <= kinds


def test_the_strict_schemas_refuse_a_misspelled_field() -> None:
    deployment = next(obj for obj in rendered("ha") if obj["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"httpGet": {"path": "/", "port": 80}}
    with pytest.raises(ValidationError, match="readinesProbe"):
        validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)
    cluster = next(obj for obj in rendered("ha") if obj["kind"] == "RabbitmqCluster")
    cluster["spec"]["replica"] = 3
    assert any("replica" in problem for problem in custom_resource_errors(cluster))
