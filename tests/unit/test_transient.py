"""Which errors a consumer retries in place (vmsched_amqp.failures.is_transient) rather than giving the
message back, where a quorum queue's delivery limit would dead-letter it after a few tries."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import DBAPIError

from vmsched_amqp.failures import is_transient


class DriverError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"sqlstate {sqlstate}")
        self.sqlstate = sqlstate


def database_error(sqlstate: str) -> DBAPIError:
    return DBAPIError("SELECT 1", None, DriverError(sqlstate))


@pytest.mark.parametrize(
    "sqlstate",
    [
        "40P01",  # deadlock detected
        "40001",  # serialization failure
        "57P01",  # admin shutdown
        "57P02",  # crash shutdown
        "57P03",  # cannot connect now: the server is starting or recovering
        "08006",  # connection failure
    ],
)
def test_a_database_error_of_a_busy_or_restarting_server_is_transient(sqlstate: str) -> None:
    assert is_transient(database_error(sqlstate))


@pytest.mark.parametrize("sqlstate", ["23505", "42P01", "22P02"])  # unique violation, no table, bad text
def test_a_database_error_about_the_statement_is_not(sqlstate: str) -> None:
    assert not is_transient(database_error(sqlstate))
