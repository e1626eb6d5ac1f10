"""The races of several schedulers that kill nothing: they share one stack of four scheduler
replicas for this package, torn down before the fault tests that follow run stacks of their own on
the same servers (two stacks on one vhost would take each other's messages)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.stack import Stack
from tests.faults.conftest import fault_stack
from tests.servers import Servers


@pytest.fixture(scope="package")
def four_schedulers(servers: Servers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack with four scheduler replicas (starting one costs tens of seconds on a small machine),
    reconciling the snapshot with PostgreSQL every 5 s as the integration stack does."""
    with fault_stack(
        servers, Path(tmp_path_factory.mktemp("four-schedulers-logs")), schedulers=4, VMSCHED_RECONCILE_INTERVAL="5"
    ) as stack:
        yield stack
