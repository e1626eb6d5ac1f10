"""devtools.kustomize_render, feature by feature, on tiny kustomizations (its agreement with the
real kustomize on deploy/k8s is checked with --compare: docs/deploy.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.kustomize_render import KustomizeError, build, differences, split_image


def deployment(name: str, image: str = "app:1", replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "template": {
                "spec": {
                    "initContainers": [{"name": "init", "image": image}],
                    "containers": [{"name": name, "image": image}],
                }
            },
        },
    }


def write(directory: Path, kustomization: dict[str, Any], files: dict[str, Any] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    for name, content in (files or {}).items():
        text = content if isinstance(content, str) else yaml.safe_dump_all(content)
        (directory / name).write_text(text)
    return directory


def test_resources_load_files_and_nested_kustomizations_in_order(tmp_path: Path) -> None:
    write(tmp_path / "base", {"resources": ["a.yaml"]}, {"a.yaml": [deployment("a")]})
    overlay = write(tmp_path / "overlay", {"resources": ["../base", "b.yaml"]}, {"b.yaml": [deployment("b")]})
    assert [obj["metadata"]["name"] for obj in build(overlay)] == ["a", "b"]


def test_namespace_is_set_on_namespaced_objects_only(tmp_path: Path) -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}}
    directory = write(tmp_path, {"namespace": "ns", "resources": ["r.yaml"]}, {"r.yaml": [deployment("a"), role]})
    deployed, cluster_role = build(directory)
    assert deployed["metadata"]["namespace"] == "ns"
    assert "namespace" not in cluster_role["metadata"]


def test_replicas_set_the_named_workloads_count(tmp_path: Path) -> None:
    directory = write(
        tmp_path, {"resources": ["r.yaml"], "replicas": [{"name": "a", "count": 5}]}, {"r.yaml": [deployment("a")]}
    )
    assert build(directory)[0]["spec"]["replicas"] == 5


def test_replicas_for_no_workload_are_refused(tmp_path: Path) -> None:
    directory = write(
        tmp_path, {"resources": ["r.yaml"], "replicas": [{"name": "b", "count": 5}]}, {"r.yaml": [deployment("a")]}
    )
    with pytest.raises(KustomizeError, match="match no workload"):
        build(directory)


@pytest.mark.parametrize(
    ("image", "rule", "expected"),
    [
        ("app:1", {"name": "app", "newTag": "2"}, "app:2"),
        ("app:1", {"name": "app", "newName": "registry:5000/team/app"}, "registry:5000/team/app:1"),
        ("app", {"name": "app", "newName": "r/app", "newTag": "3"}, "r/app:3"),
        ("app:1", {"name": "app", "digest": "sha256:abc"}, "app@sha256:abc"),
        ("other:1", {"name": "app", "newTag": "2"}, "other:1"),
        ("registry:5000/app:1", {"name": "app", "newTag": "2"}, "registry:5000/app:1"),
    ],
)
def test_images_rename_and_retag_containers_and_init_containers(
    tmp_path: Path, image: str, rule: dict[str, str], expected: str
) -> None:
    directory = write(tmp_path, {"resources": ["r.yaml"], "images": [rule]}, {"r.yaml": [deployment("a", image)]})
    pod = build(directory)[0]["spec"]["template"]["spec"]
    assert [pod["initContainers"][0]["image"], pod["containers"][0]["image"]] == [expected, expected]


def test_split_image_keeps_a_registry_port_in_the_name() -> None:
    assert split_image("host:5000/app") == ("host:5000/app", "")
    assert split_image("host:5000/app:1.2") == ("host:5000/app", ":1.2")
    assert split_image("app@sha256:0") == ("app", "@sha256:0")


def test_json_patches_apply_to_their_target_before_replicas_and_images(tmp_path: Path) -> None:
    patch = [
        {"op": "replace", "path": "/spec/replicas", "value": 9},
        {"op": "add", "path": "/spec/template/spec/containers/0/image", "value": "app:7"},
    ]
    directory = write(
        tmp_path,
        {
            "resources": ["r.yaml"],
            "patches": [{"path": "p.yaml", "target": {"kind": "Deployment", "name": "a"}}],
            "images": [{"name": "app", "newTag": "8"}],
        },
        {"r.yaml": [deployment("a"), deployment("b")], "p.yaml": yaml.safe_dump(patch)},
    )
    patched, untouched = build(directory)
    assert patched["spec"]["replicas"] == 9
    assert patched["spec"]["template"]["spec"]["containers"][0]["image"] == "app:8"  # images run after patches
    assert untouched["spec"]["replicas"] == 2


@pytest.mark.parametrize(
    ("kustomization", "files", "message"),
    [
        ({"resources": ["r.yaml"], "commonLabels": {"a": "b"}}, {}, "commonLabels"),
        (
            {"resources": ["r.yaml"], "patches": [{"path": "p.yaml", "target": {"kind": "Deployment", "name": "a"}}]},
            {"p.yaml": yaml.safe_dump({"spec": {"replicas": 1}})},
            "only JSON 6902",
        ),
        (
            {"resources": ["r.yaml"], "patches": [{"patch": "[]", "target": {"kind": "Deployment", "name": "zz"}}]},
            {},
            "matches nothing",
        ),
        ({"resources": ["r.yaml", "r.yaml"]}, {}, "listed twice"),
        ({"resources": ["missing.yaml"]}, {}, "not found"),
    ],
)
def test_what_it_does_not_implement_is_refused(
    tmp_path: Path, kustomization: dict[str, Any], files: dict[str, Any], message: str
) -> None:
    directory = write(tmp_path, kustomization, {"r.yaml": [deployment("a")], **files})
    with pytest.raises(KustomizeError, match=message):
        build(directory)


def test_differences_compares_objects_by_id_and_content() -> None:
    ours = [deployment("a"), deployment("b")]
    theirs = [deployment("b", replicas=3), deployment("c")]
    assert differences(ours, theirs) == [
        "only here: ('apps/v1', 'Deployment', '', 'a')",
        "only in kustomize's output: ('apps/v1', 'Deployment', '', 'c')",
        "differs: ('apps/v1', 'Deployment', '', 'b')",
    ]
