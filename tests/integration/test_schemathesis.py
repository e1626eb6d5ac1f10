"""Schemathesis against the OpenAPI document the API serves: every operation, with requests built
from its schema (bounded: a few examples each), with an admin token and without one. No answer may
be a 5xx, and every answer must match what the document says of that operation (its status codes,
headers, content types and bodies).

The API under test runs alone on a database, a virtual host and a Redis prefix of its own: what the
fuzzer creates, pauses or changes touches no other test."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.core.result import Ok
from schemathesis.generation.case import Case
from schemathesis.generation.modes import GenerationMode
from schemathesis.schemas import APIOperation, BaseSchema
from schemathesis.specs.openapi.checks import positive_data_acceptance

from devtools.stack import Stack, bearer, free_port, wait_for
from tests.servers import Servers, copy_database, drop_database

# Examples per operation and per test: enough to go through every status an operation documents,
# few enough to keep the whole run within a minute or two.
EXAMPLES = 5
TOKEN = secrets.token_urlsafe(32)


@pytest.fixture(scope="module")
def lone_api(servers: Servers, schema_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """An API process with servers of its own: its own database (a copy of the run's migrated
    template: the API finds its schema current), virtual host and Redis prefix."""
    run = uuid.uuid4().hex[:8]
    vhost = f"vmsched-fuzz-{run}"
    servers.broker.add_vhost(vhost, urlsplit(servers.amqp_url).username or "guest")
    amqp = urlsplit(servers.amqp_url)
    database = urlsplit(servers.database_url)
    database_name = f"{database.path.lstrip('/')}_fuzz_{run}"
    copy_database(servers.database_url, schema_template, database_name)
    stack = Stack(
        env=servers.env(
            VMSCHED_AMQP_URL=urlunsplit((amqp.scheme, amqp.netloc, "/" + quote(vhost, safe=""), "", "")),
            VMSCHED_DATABASE_URL=urlunsplit((database.scheme, database.netloc, "/" + database_name, "", "")),
            VMSCHED_REDIS_KEY_PREFIX=f"vmsched-fuzz-{run}",
            VMSCHED_BOOTSTRAP_TOKEN=TOKEN,
            VMSCHED_RATE_LIMIT="0",  # the fuzzer is one token sending as fast as it can
        ),
        log_dir=Path(tmp_path_factory.mktemp("fuzzed-api")),
        api_port=free_port(),
    )
    try:
        api = stack.start_api()
        wait_for(api.is_ready, 60, "the fuzzed API to be ready")
        yield stack
    finally:
        stack.stop()
        drop_database(servers.database_url, database_name)
        servers.broker.delete_vhost(vhost)


@pytest.fixture(scope="module")
def served_schema(lone_api: Stack) -> BaseSchema:
    return schemathesis.openapi.from_url(f"{lone_api.api_url}/openapi.json")


def operations(schema: BaseSchema) -> list[APIOperation[Any, Any, Any, Any]]:
    found = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        found.append(result.ok())
    assert len(found) >= 25, [f"{o.method} {o.path}" for o in found]
    return found


# Answers that never end (server-sent events): a fuzzer reading one to its end would wait forever.
# Their refusals are fuzzed below; tests/integration/test_event_stream.py covers the rest.
ENDLESS = frozenset({"/v1/events"})

# Not checked: that every request the document allows is accepted. Some rules span fields (an Equal
# toleration needs a key) or rows (a server group must exist) and JSON Schema cannot say them.
# Derandomized: the same cases every run (a failure is reproducible, a pass is not luck).
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_with_an_admin_token_no_answer_is_a_5xx_or_off_its_schema(
    served_schema: BaseSchema, mode: GenerationMode
) -> None:
    for operation in operations(served_schema):
        if operation.path in ENDLESS:
            continue

        @FUZZ
        @given(case=operation.as_strategy(generation_mode=mode))
        def answers_within_its_schema(case: Case[Any]) -> None:
            case.call_and_validate(headers=bearer(TOKEN), timeout=30, excluded_checks=[positive_data_acceptance])

        try:
            answers_within_its_schema()
        except Unsatisfiable:
            if mode is GenerationMode.POSITIVE:
                raise
            # Nothing of it can be invalid (no parameter, no body): there is no bad request to send.


def test_without_a_token_every_v1_operation_is_a_401_within_its_schema(served_schema: BaseSchema) -> None:
    for operation in operations(served_schema):

        @FUZZ
        @given(case=operation.as_strategy())
        def refused_within_its_schema(case: Case[Any]) -> None:
            case.headers.pop("Authorization", None)  # case-insensitive
            response = case.call_and_validate(timeout=30, excluded_checks=[positive_data_acceptance])
            if case.path.startswith("/v1"):
                assert response.status_code == 401, (case.method, case.path, response.text)

        refused_within_its_schema()
