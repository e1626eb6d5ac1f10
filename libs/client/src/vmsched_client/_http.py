"""What the sync and the asyncio client share: how a client is set up and how an answer is read."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any, TypeVar

import httpx

from vmsched_client.calls import Call
from vmsched_client.config import ClientConfig
from vmsched_client.errors import ClientError, api_error
from vmsched_contract.api import Vm
from vmsched_contract.status import VmStatus

T = TypeVar("T")

# Where a VM stops moving on its own: placed, or ended without a host. (Waiting VMs are still moving:
# they are placed as soon as room appears, or end unschedulable when their wait_s passes.)
PLACED = frozenset({VmStatus.SCHEDULED, VmStatus.RUNNING})
UNDECIDED = frozenset({VmStatus.PENDING, VmStatus.WAITING})
# How long watch() waits before connecting again when the server named no ``retry:``.
RECONNECT_S = 1.0


class WaitTimeout(ClientError):
    """A wait for a VM's status ended at its deadline."""

    def __init__(self, vm: Vm, timeout: float) -> None:
        super().__init__(f"VM {vm.id} still {vm.status.value} after {timeout:g}s")
        self.vm = vm


def decided(vm: Vm) -> bool:
    """Whether a scheduler is done with the VM: placed, or ended (unschedulable, failed, deleted...)."""
    return vm.status not in UNDECIDED


def client_version() -> str:
    try:
        return version("vmsched-client")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree without metadata
        return "0"


def http_options(config: ClientConfig, timeout: float) -> dict[str, Any]:
    headers = {"User-Agent": f"vmsched-client/{client_version()}", "Accept": "application/json"}
    if config.token:
        headers["Authorization"] = f"Bearer {config.token}"
    return {"base_url": config.url, "headers": headers, "timeout": timeout}


def request_options(call: Call[Any]) -> dict[str, Any]:
    return {"params": call.params, "json": call.body, "headers": dict(call.headers)}


def stream_timeout(timeout: float) -> httpx.Timeout:
    # A live stream may be quiet for long: no read deadline, only the connect one.
    return httpx.Timeout(timeout, read=None)


def read_answer(call: Call[T], response: httpx.Response) -> T:
    """The answer as the call's model, or the API's refusal raised as an :class:`ApiError`."""
    if response.is_success:
        return call.read(response)
    raise refusal(response)


def refusal(response: httpx.Response) -> ClientError:
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    return api_error(response.status_code, body)


def reconnect_delay(retry_ms: int | None, failures: int, cap: float) -> float:
    """Before connecting the stream again: the server's ``retry:``, doubled for each failure in a row."""
    base = RECONNECT_S if retry_ms is None else retry_ms / 1000
    return float(min(base * 2 ** max(failures - 1, 0), cap))
