"""How a route documents its refusals. (The HTTP API's bodies are :mod:`vmsched_contract.api`: one
definition, the client library parses the API's answers with the same models.)"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from vmsched_contract.api import ErrorDetail, QuotaRefusal

# A VM request may be refused for the token's scope, or for its project's quota.
QUOTA_REFUSAL: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorDetail | QuotaRefusal, "description": "the token lacks vms:write, or the quota is spent"}
}


def refusals(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The refusals a route documents besides its success (and 401, 403, 413, 422, 429)."""
    return {code: {"model": ErrorDetail, "description": HTTPStatus(code).phrase} for code in codes}
