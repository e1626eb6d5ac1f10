"""The operators' CRD schemas vendored under deploy/k8s/schemas/, as strict JSON Schema validators.

A CRD's openAPIV3Schema is close to JSON Schema; the API server additionally rejects unknown fields
under ``kubectl apply``'s default strict field validation. To match that, every object schema that
lists its properties (and neither preserves unknown fields nor describes additional ones) is closed
here with ``additionalProperties: false``.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

import jsonschema

from tests.deploy.manifests import SCHEMAS


def _closed(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _closed(value) for key, value in schema.items()}
    if (
        "properties" in closed
        and "additionalProperties" not in closed
        and not closed.get("x-kubernetes-preserve-unknown-fields", False)
    ):
        closed["additionalProperties"] = False
    return closed


@cache
def vendored() -> dict[tuple[str, str], dict[str, Any]]:
    """Each vendored schema by (apiVersion, kind), as extracted (devtools/vendor_crd_schema.py)."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(SCHEMAS.glob("*.json")):
        schema = json.loads(path.read_text())
        schemas[(schema["x-vmsched-api-version"], schema["x-vmsched-kind"])] = schema
    return schemas


@cache
def _validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    schema = _closed(copy.deepcopy(vendored()[(api_version, kind)]))
    # metadata is the API server's business (ObjectMeta), not the CRD's: the CRD declares it bare.
    schema["properties"]["metadata"] = {"type": "object"}
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    validator_class.check_schema(schema)
    return validator_class(schema)


def custom_resource_errors(obj: dict[str, Any]) -> list[str]:
    """Every schema violation of a custom resource, with the path to the offending field."""
    validator = _validator(obj["apiVersion"], obj["kind"])
    return [
        f"{'.'.join(str(part) for part in error.absolute_path) or '(root)'}: {error.message}"
        for error in sorted(validator.iter_errors(obj), key=lambda error: list(map(str, error.absolute_path)))
    ]


def is_custom_resource(obj: dict[str, Any]) -> bool:
    return (obj["apiVersion"], obj["kind"]) in vendored()
