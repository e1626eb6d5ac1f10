"""Extract one served version's openAPIV3Schema from a CustomResourceDefinition, as JSON Schema.

Used to vendor the operators' CRD schemas under deploy/k8s/schemas/, so that tests/deploy validates
our custom resources offline. Usage:

    python -m devtools.vendor_crd_schema CRD.yaml SOURCE > deploy/k8s/schemas/GROUP_KIND_VERSION.json

SOURCE is the line recorded in the schema's ``$comment`` (repository, tag and path of CRD.yaml).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml


def storage_version_schema(crd: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The storage version's name and its openAPIV3Schema (the version a cluster persists)."""
    for version in crd["spec"]["versions"]:
        if version.get("storage") and version.get("served"):
            return str(version["name"]), dict(version["schema"]["openAPIV3Schema"])
    raise ValueError(f"{crd['metadata']['name']}: no served storage version")


def vendored_schema(crd: dict[str, Any], source: str) -> dict[str, Any]:
    version, schema = storage_version_schema(crd)
    group = crd["spec"]["group"]
    kind = crd["spec"]["names"]["kind"]
    header = {
        "$comment": f"openAPIV3Schema of {group}/{version} {kind}, extracted from {source}",
        "x-vmsched-api-version": f"{group}/{version}",
        "x-vmsched-kind": kind,
    }
    return header | schema


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    crd_path, source = argv
    documents = [doc for doc in yaml.safe_load_all(Path(crd_path).read_text()) if doc]
    crds = [doc for doc in documents if doc.get("kind") == "CustomResourceDefinition"]
    if len(crds) != 1:
        print(f"{crd_path}: expected one CustomResourceDefinition, found {len(crds)}", file=sys.stderr)
        return 2
    json.dump(vendored_schema(crds[0], source), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
