"""Which database errors are a lost connection (UNAVAILABLE, "retry") and which are not.

SQLAlchemy passes no statement both for a failure to connect and for an error at COMMIT, so the
rule looks at the driver's error: only a connect failure (or a connection SQLAlchemy invalidated)
is UNAVAILABLE. A SQLite disk that is full or failing at COMMIT is not one: a client told to retry
would retry into the same failure while the operator is told nothing is wrong. The errors here are
real where the condition can be produced here (SQLite cannot open a file; nothing listening on a
PostgreSQL port is in test_database_disconnects.py), and the drivers' own exception types with
their codes elsewhere.
"""

from __future__ import annotations

import sqlite3

import grpc
import psycopg
import pytest
import sqlalchemy
from mahjong_platform.errors import client_status, is_database_unavailable


def _at_commit(driver_error: BaseException) -> sqlalchemy.exc.OperationalError:
    """The error SQLAlchemy raises when COMMIT fails with `driver_error`: no statement."""
    return sqlalchemy.exc.OperationalError(None, None, driver_error)


def _sqlite_error(message: str, code: int) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = code  # as the sqlite3 module sets it for SQLite's own errors
    return error


def test_sqlite_cantopen_from_the_driver_is_a_connect_failure() -> None:
    with pytest.raises(sqlite3.OperationalError) as raised:
        sqlite3.connect("/proc/no-such-dir/mahjong.db")
    assert raised.value.sqlite_errorname == "SQLITE_CANTOPEN"
    assert is_database_unavailable(_at_commit(raised.value))


@pytest.mark.parametrize(
    ("message", "code"),
    [("database or disk is full", sqlite3.SQLITE_FULL), ("disk I/O error", sqlite3.SQLITE_IOERR)],
)
def test_a_sqlite_disk_failing_at_commit_is_not_a_lost_connection(message: str, code: int) -> None:
    error = _at_commit(_sqlite_error(message, code))
    assert not is_database_unavailable(error)
    assert client_status(error) is None  # INTERNAL, logged with a reference: an operator must look


def test_a_postgresql_error_at_commit_with_a_sqlstate_is_not_a_lost_connection() -> None:
    serialization_failure = psycopg.errors.SerializationFailure("could not serialize access")
    assert serialization_failure.sqlstate == "40001"
    assert not is_database_unavailable(_at_commit(serialization_failure))


@pytest.mark.parametrize("sqlstate_class", ["CannotConnectNow", "AdminShutdown", "TooManyConnections"])
def test_a_postgresql_server_that_cannot_take_connections_now_is_unavailable(sqlstate_class: str) -> None:
    error = getattr(psycopg.errors, sqlstate_class)("the server cannot take the connection now")
    assert is_database_unavailable(_at_commit(error))
    status = client_status(_at_commit(error))
    assert status is not None and status[0] == grpc.StatusCode.UNAVAILABLE


def test_a_connection_sqlalchemy_invalidated_is_unavailable_whatever_the_driver_said() -> None:
    error = sqlalchemy.exc.OperationalError(
        "SELECT 1", {}, _sqlite_error("disk I/O error", sqlite3.SQLITE_IOERR), connection_invalidated=True
    )
    assert is_database_unavailable(error)
