"""Render a Kustomize directory without the kustomize binary: exactly the features deploy/k8s uses.

No kustomize runs on a fresh machine here (the PyPI build, pykustomize, needs Python 3.14; no
binary may be downloaded), so tests/deploy renders the overlays with this. It implements, with
kustomize's semantics and in kustomize's order, the fields

- ``resources``: YAML files and directories holding a kustomization, in order;
- ``patches``: RFC 6902 JSON patches (a YAML list of operations, from ``path`` or inline ``patch``)
  with a ``target`` of ``kind`` and ``name`` (and optionally ``group``, ``version``);
- ``namespace``: set on every namespaced object;
- ``replicas``: ``spec.replicas`` of the named Deployment or StatefulSet;
- ``images``: ``newName``, ``newTag``, ``digest`` for every container and init container naming it,

and refuses anything else (another field, a strategic-merge patch, a target matching nothing), so a
manifest that outgrows it fails loudly instead of rendering differently from ``kubectl kustomize``.
It is stricter than kustomize in one way: a patch or replica count that matches no object is an
error here, a silent no-op there.

    python -m devtools.kustomize_render deploy/k8s/overlays/ha            # print the YAML
    kubectl kustomize deploy/k8s/overlays/ha | python -m devtools.kustomize_render --compare deploy/k8s/overlays/ha

The second form checks this renderer against the real kustomize: same objects, same content.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

KubeObject = dict[str, Any]

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS = {"apiVersion", "kind", "resources", "patches", "namespace", "replicas", "images"}
# The kinds kustomize's namespace transformer leaves alone (the ones this project could meet).
CLUSTER_SCOPED_KINDS = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
    "IngressClass",
    "RuntimeClass",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "APIService",
}
# kustomize rewrites subjects' namespaces in these; this renderer does not, so it refuses them.
UNSUPPORTED_KINDS = {"RoleBinding", "ClusterRoleBinding"}
REPLICA_KINDS = {"Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"}
IMAGE_LISTS = ("containers", "initContainers")


class KustomizeError(Exception):
    """The kustomization uses something this renderer does not implement, or is wrong."""


def object_id(obj: KubeObject) -> tuple[str, str, str, str]:
    """apiVersion, kind, namespace, name: what kustomize calls a resource id."""
    metadata = obj.get("metadata", {})
    return (obj["apiVersion"], obj["kind"], metadata.get("namespace", ""), metadata["name"])


def build(directory: Path) -> list[KubeObject]:
    """Every object the kustomization in ``directory`` renders, in the order it lists them."""
    kustomization = _load_kustomization(directory)
    objects: list[KubeObject] = []
    for entry in kustomization.get("resources", []):
        objects.extend(_load_resource(directory, entry))
    _refuse_duplicates(objects, directory)
    # kustomize's order of built-in transformers: patches, namespace, replicas, images.
    for patch in kustomization.get("patches", []):
        _apply_patch(objects, patch, directory)
    if "namespace" in kustomization:
        _set_namespace(objects, kustomization["namespace"])
    for replicas in kustomization.get("replicas", []):
        _set_replicas(objects, replicas, directory)
    for image in kustomization.get("images", []):
        _set_image(objects, image)
    return objects


def _load_kustomization(directory: Path) -> dict[str, Any]:
    for name in KUSTOMIZATION_FILES:
        path = directory / name
        if path.is_file():
            document = yaml.safe_load(path.read_text())
            break
    else:
        raise KustomizeError(f"{directory}: no kustomization.yaml")
    if not isinstance(document, dict) or document.get("kind", "Kustomization") != "Kustomization":
        raise KustomizeError(f"{path}: not a Kustomization")
    unknown = set(document) - SUPPORTED_FIELDS
    if unknown:
        raise KustomizeError(f"{path}: fields this renderer does not implement: {', '.join(sorted(unknown))}")
    return document


def _load_resource(directory: Path, entry: str) -> Iterator[KubeObject]:
    path = directory / entry
    if path.is_dir():
        yield from build(path)
        return
    if not path.is_file():
        raise KustomizeError(f"{directory}: resource {entry} not found")
    for document in yaml.safe_load_all(path.read_text()):
        if document is None:
            continue
        if not isinstance(document, dict) or "kind" not in document or "metadata" not in document:
            raise KustomizeError(f"{path}: every document must be a Kubernetes object")
        if document["kind"] in UNSUPPORTED_KINDS:
            raise KustomizeError(f"{path}: {document['kind']} is not supported by this renderer")
        if document["kind"].endswith("List"):
            raise KustomizeError(f"{path}: List objects are not supported by this renderer")
        yield document


def _refuse_duplicates(objects: list[KubeObject], directory: Path) -> None:
    seen: set[tuple[str, str, str, str]] = set()
    for obj in objects:
        key = object_id(obj)
        if key in seen:
            raise KustomizeError(f"{directory}: {key[1]} {key[3]} is listed twice")
        seen.add(key)


def _matches(obj: KubeObject, target: dict[str, Any]) -> bool:
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    return bool(
        obj["kind"] == target["kind"]
        and obj["metadata"]["name"] == target["name"]
        and target.get("group", group) == group
        and target.get("version", version) == version
    )


def _apply_patch(objects: list[KubeObject], patch: dict[str, Any], directory: Path) -> None:
    unknown = set(patch) - {"path", "patch", "target"}
    if unknown or "target" not in patch or ("path" in patch) == ("patch" in patch):
        raise KustomizeError(f"{directory}: a patch needs a target and exactly one of path, patch")
    target = patch["target"]
    if set(target) - {"group", "version", "kind", "name"} or not {"kind", "name"} <= set(target):
        raise KustomizeError(f"{directory}: a patch target names kind and name (group, version optional)")
    text = (directory / patch["path"]).read_text() if "path" in patch else patch["patch"]
    operations = yaml.safe_load(text)
    if not isinstance(operations, list):
        raise KustomizeError(f"{directory}: only JSON 6902 patches (a list of operations) are supported")
    matched = [index for index, obj in enumerate(objects) if _matches(obj, target)]
    if not matched:
        raise KustomizeError(f"{directory}: patch target {target['kind']} {target['name']} matches nothing")
    for index in matched:
        try:
            objects[index] = jsonpatch.apply_patch(objects[index], operations)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
            raise KustomizeError(f"{directory}: patch on {target['kind']} {target['name']}: {error}") from error


def _set_namespace(objects: list[KubeObject], namespace: str) -> None:
    for obj in objects:
        if obj["kind"] not in CLUSTER_SCOPED_KINDS:
            obj["metadata"]["namespace"] = namespace


def _set_replicas(objects: list[KubeObject], replicas: dict[str, Any], directory: Path) -> None:
    targets = [obj for obj in objects if obj["kind"] in REPLICA_KINDS and obj["metadata"]["name"] == replicas["name"]]
    if not targets:
        raise KustomizeError(f"{directory}: replicas for {replicas['name']} match no workload")
    for obj in targets:
        obj["spec"]["replicas"] = replicas["count"]


def split_image(image: str) -> tuple[str, str]:
    """The image's name and what follows it (``:tag``, ``@digest`` or nothing); a registry's port
    (``host:5000/app``) is part of the name."""
    if "@" in image:
        name, _, digest = image.partition("@")
        return name, "@" + digest
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon:]
    return image, ""


def _retagged(image: str, rule: dict[str, Any]) -> str | None:
    name, suffix = split_image(image)
    if name != rule["name"]:
        return None
    new_name = str(rule.get("newName", name))
    if "digest" in rule:
        return f"{new_name}@{rule['digest']}"
    if "newTag" in rule:
        return f"{new_name}:{rule['newTag']}"
    return new_name + suffix


def _containers(node: Any) -> Iterator[dict[str, Any]]:
    """Every container and init container, at any depth (pods, templates, job templates, CRs)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in IMAGE_LISTS and isinstance(value, list):
                yield from (item for item in value if isinstance(item, dict))
            yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


def _set_image(objects: list[KubeObject], rule: dict[str, Any]) -> None:
    if set(rule) - {"name", "newName", "newTag", "digest"}:
        raise KustomizeError(f"images: unsupported fields in {rule}")
    for obj in objects:
        for container in _containers(obj):
            image = container.get("image")
            if isinstance(image, str) and (new := _retagged(image, rule)) is not None:
                container["image"] = new


def differences(ours: list[KubeObject], theirs: list[KubeObject]) -> list[str]:
    """What differs between two renderings, compared as sets of objects keyed by resource id."""
    mine = {object_id(obj): obj for obj in ours}
    other = {object_id(obj): obj for obj in theirs}
    found = [f"only here: {key}" for key in sorted(mine.keys() - other.keys())]
    found += [f"only in kustomize's output: {key}" for key in sorted(other.keys() - mine.keys())]
    found += [f"differs: {key}" for key in sorted(mine.keys() & other.keys()) if mine[key] != other[key]]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.kustomize_render", description=__doc__.split("\n")[0])
    parser.add_argument("directory", type=Path, help="a directory holding a kustomization.yaml")
    parser.add_argument(
        "--compare", action="store_true", help="read kustomize's own output on stdin and report any difference"
    )
    options = parser.parse_args(argv)
    try:
        objects = build(options.directory)
    except KustomizeError as error:
        print(f"kustomize_render: {error}", file=sys.stderr)
        return 2
    if not options.compare:
        yaml.safe_dump_all(objects, sys.stdout, sort_keys=False)
        return 0
    theirs = [doc for doc in yaml.safe_load_all(sys.stdin) if doc]
    found = differences(copy.deepcopy(objects), theirs)
    for line in found:
        print(line)
    print(f"{len(objects)} objects rendered here, {len(theirs)} by kustomize, {len(found)} differences")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
