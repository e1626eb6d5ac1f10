"""What the client raises: an :class:`ApiError` per refusal the API answers, one class per status."""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """Anything the client raises on purpose."""


class ConfigError(ClientError):
    """The configuration (environment, config file) cannot be used."""


class ApiError(ClientError):
    """The API refused a request: its status and what it said, in one line."""

    def __init__(self, status_code: int, detail: str, body: Any = None) -> None:
        super().__init__(f"{status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail
        self.body = body


class Unauthorized(ApiError):
    """401: no token, or one the API does not know (revoked, expired)."""


class Forbidden(ApiError):
    """403: the token lacks the scope, or the project's quota is spent."""


class NotFound(ApiError):
    """404: no such thing (or one of another project)."""


class Conflict(ApiError):
    """409: the thing is in a state that forbids the change (a host still holding VMs, a name taken)."""


class Gone(ApiError):
    """410: the thing existed and is gone for good (a decision whose journal entry was pruned)."""


class Invalid(ApiError):
    """422: the request is wrong; the detail names the field and the reason."""


class RateLimited(ApiError):
    """429, once the retries are spent."""


class Unavailable(ApiError):
    """503, once the retries are spent."""


_BY_STATUS: dict[int, type[ApiError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: RateLimited,
    503: Unavailable,
}


def describe(body: Any) -> str:
    """The API's refusal in one line: ``detail`` as a sentence, a 422's problems as ``field: reason``
    joined, a quota refusal with its numbers."""
    if isinstance(body, dict):
        detail = body.get("detail")
        if isinstance(detail, str):
            return detail
        if isinstance(detail, list):
            return "; ".join(_problem(item) for item in detail)
        if body.get("reason") == "quota_exceeded":
            return (
                f"quota exceeded: {body.get('resource')} limit {body.get('limit')}, "
                f"used {body.get('used')}, requested {body.get('requested')}"
            )
    return str(body)[:500]


def _problem(item: Any) -> str:
    if not isinstance(item, dict):
        return str(item)
    where = ".".join(str(part) for part in item.get("loc", []) if part != "body")
    return f"{where}: {item.get('msg')}" if where else str(item.get("msg"))


def api_error(status_code: int, body: Any) -> ApiError:
    return _BY_STATUS.get(status_code, ApiError)(status_code, describe(body), body)
