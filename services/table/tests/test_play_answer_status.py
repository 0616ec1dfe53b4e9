"""The status a Play command's answer carries when its commit failed (README "Reliability"): what
Act's error mapping would answer, a lost database connection included."""

import grpc
import sqlalchemy.exc
from mahjong_platform.errors import DATABASE_UNAVAILABLE_MESSAGE, NotFoundError
from mahjong_table.servicer import _status_of


def test_a_lost_database_connection_is_unavailable_with_nothing_of_the_database_in_the_message() -> None:
    refused = sqlalchemy.exc.OperationalError(None, None, Exception("could not connect to 10.0.0.7:5432"))
    dropped = sqlalchemy.exc.OperationalError(
        "INSERT INTO stored_events ...",
        {},
        Exception("server closed the connection"),
        connection_invalidated=True,
    )
    for error in (refused, dropped):
        assert _status_of(error) == (grpc.StatusCode.UNAVAILABLE, DATABASE_UNAVAILABLE_MESSAGE)


def test_a_statement_that_failed_on_a_live_connection_is_internal_with_a_reference_only() -> None:
    error = sqlalchemy.exc.OperationalError("SELECT broken", {}, Exception("syntax error at 10.0.0.7"))
    code, message = _status_of(error)
    assert code == grpc.StatusCode.INTERNAL
    assert message.startswith("internal error (reference ") and "10.0.0.7" not in message


def test_a_service_error_keeps_its_status_and_message() -> None:
    assert _status_of(NotFoundError("no such table")) == (grpc.StatusCode.NOT_FOUND, "no such table")
