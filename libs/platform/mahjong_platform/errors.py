"""Typed errors that services raise, and the gRPC status code each one maps to.

ARCHITECTURE.md "Errors" fixes which status a client sees for which kind of failure. Service code
raises (or subclasses) one of the classes below with a message a client developer can act on; the
error-mapping interceptor in `mahjong_platform.grpc_server` turns it into that status and message.
Nothing else is sent to the client: an exception that is not a `ServiceError` (and is not in an
extra mapping given to the interceptor) is a bug and becomes INTERNAL with no details.

The pure rules library does not import this module (it has no gRPC dependency); a service maps the
rules' own typed errors with an extra mapping such as ``{IllegalDiscardError:
grpc.StatusCode.FAILED_PRECONDITION}``, see `status_code_for`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, ClassVar, TypeGuard

import grpc

if TYPE_CHECKING:
    import sqlalchemy.exc

_LOGGER = logging.getLogger(__name__)


class ServiceError(Exception):
    """Base of the errors whose message is meant for the client; ``status_code`` says which status."""

    status_code: ClassVar[grpc.StatusCode] = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str) -> None:
        assert message, "a ServiceError needs a message the client can act on"
        message = bounded_text(message)
        super().__init__(message)
        self.message = message


ERROR_TEXT_MAX_CHARACTERS = 500
"""An error text (and the log line carrying it) is at most this long: a message may quote the
client's input, and a megabyte field must not become a megabyte status detail or log line."""


def bounded_text(text: str, limit: int = ERROR_TEXT_MAX_CHARACTERS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    marker = f"... ({len(text) - limit} more characters)"
    return text[: max(limit - len(marker), 0)] + marker


class InvalidArgumentError(ServiceError):
    """The request is malformed whatever the state: a bad tile code, an unknown room, a negative amount."""

    status_code = grpc.StatusCode.INVALID_ARGUMENT


class FailedPreconditionError(ServiceError):
    """A well-formed request the rules forbid in the current state: not your turn, tile not in hand."""

    status_code = grpc.StatusCode.FAILED_PRECONDITION


class ConflictError(ServiceError):
    """A concurrent change won (version conflict); the client may reload and retry. Maps to ABORTED."""

    status_code = grpc.StatusCode.ABORTED


class NotFoundError(ServiceError):
    """The table, ticket, account or game the request names does not exist."""

    status_code = grpc.StatusCode.NOT_FOUND


class PermissionDeniedError(ServiceError):
    """The caller is known but may not do this: another player's seat, a method that needs ``ops``."""

    status_code = grpc.StatusCode.PERMISSION_DENIED


class UnauthenticatedError(ServiceError):
    """The caller did not prove who they are: no token, a malformed, expired or forged one."""

    status_code = grpc.StatusCode.UNAUTHENTICATED


class UnavailableError(ServiceError):
    """This process cannot serve the request now, another may (a table that moved to another
    replica); the client retries, and the retry reaches one that can."""

    status_code = grpc.StatusCode.UNAVAILABLE


class ResourceExhaustedError(ServiceError):
    """The caller holds too many open streams or concurrent calls; retry once some have finished."""

    status_code = grpc.StatusCode.RESOURCE_EXHAUSTED


ErrorMapping = Mapping[type[BaseException], grpc.StatusCode]
"""Extra exception types (for instance the rules library's) and the status code each maps to."""


def status_code_for(
    error: BaseException, extra_mapping: ErrorMapping | None = None
) -> grpc.StatusCode | None:
    """The status code ``error`` maps to, or None when it is unexpected (a bug: INTERNAL, no details).

    A `ServiceError` maps to its ``status_code``; otherwise the most specific class in
    ``extra_mapping`` that ``error`` is an instance of decides (walking the method resolution order,
    so a mapping for a base class covers its subclasses).
    """
    if isinstance(error, ServiceError):
        return error.status_code
    if extra_mapping:
        for error_class in type(error).__mro__:
            if error_class in extra_mapping:
                return extra_mapping[error_class]
    return None


DATABASE_UNAVAILABLE_MESSAGE = "the service lost its database connection; retry the same request"
"""What a client is told when the database dropped or refused the connection (nothing of the
error's text: it names hosts and statements)."""


def is_database_unavailable(error: BaseException) -> TypeGuard[sqlalchemy.exc.DBAPIError]:
    """Whether ``error`` says the database connection is gone, not that the request is wrong.

    SQLAlchemy marks a statement that failed because the connection dropped
    (`DBAPIError.connection_invalidated`: the server terminated the backend, restarted, or its
    host vanished and the socket failed) and invalidates the pooled connection, so the next
    check-out connects anew. A failure to connect at all is the same condition: an
    `OperationalError` with no statement whose driver error is a connect failure
    (`_is_connect_failure`). SQLAlchemy passes no statement for an error at COMMIT either, so
    "no statement" alone is not enough: a SQLite disk that is full or failing at COMMIT, or a
    PostgreSQL serialization failure there, is not a lost connection and must not be answered
    "retry". Other operational errors (a lock or statement timeout, a deadlock) are not mapped here.
    """
    exc = _sqlalchemy_exc()
    if exc is None or not isinstance(error, exc.DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    return (
        isinstance(error, exc.OperationalError)
        and error.statement is None
        and _is_connect_failure(error.orig)
    )


def _sqlalchemy_exc() -> ModuleType | None:
    """`sqlalchemy.exc` once SQLAlchemy is loaded, else None. An error can only be SQLAlchemy's
    once SQLAlchemy is imported, and a process with no database (`mjctl`, the bots) does not pay
    SQLAlchemy's import (about 0.3 s of CPU, half of `mahjong_platform.auth`'s) for this module."""
    return sys.modules.get("sqlalchemy.exc")


_SQLITE_CANTOPEN = 14
"""SQLite's primary result code for a database file it cannot open (``SQLITE_CANTOPEN``)."""
_POSTGRESQL_UNAVAILABLE_STATES = ("08", "57P01", "57P02", "57P03", "53300")
"""SQLSTATEs (or their class) of a server that cannot take the connection now: connection
exceptions, an administrator's or a crash's shutdown, a server still starting, too many clients."""


def _is_connect_failure(driver_error: BaseException | None) -> bool:
    """Whether the driver's error is a failure to connect: SQLite could not open the file;
    psycopg got no answer from a server (no SQLSTATE: refused, unreachable, timed out) or one that
    cannot take connections now. An error a server or SQLite raised at COMMIT carries another
    code (SQLITE_FULL, SQLITE_IOERR, 40001, ...)."""
    sqlite_code = getattr(driver_error, "sqlite_errorcode", None)
    if sqlite_code is not None:
        return bool(sqlite_code & 0xFF == _SQLITE_CANTOPEN)
    if type(driver_error).__module__.split(".")[0] == "sqlite3":
        return False  # a SQLite error with no code was not raised by SQLite's C library
    sqlstate = getattr(driver_error, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith(_POSTGRESQL_UNAVAILABLE_STATES)


def client_status(
    error: BaseException, extra_mapping: ErrorMapping | None = None
) -> tuple[grpc.StatusCode, str] | None:
    """The status and message a client gets for ``error`` (None: a bug, INTERNAL with no details).

    `status_code_for`'s mapping with its message (a `ServiceError`'s, or a mapped type's text),
    and a lost database connection (`is_database_unavailable`) as UNAVAILABLE with a fixed message:
    the call may succeed on a retry (the pool reconnects; idempotency keys make a retry of a call
    that did commit do nothing twice). The database error is logged here, since the client's
    message hides it.
    """
    if is_database_unavailable(error):
        _LOGGER.warning(
            "database connection lost during a call: answering UNAVAILABLE",
            extra={"database_error": type(error.orig).__name__, "error": bounded_text(str(error.orig), 200)},
        )
        return grpc.StatusCode.UNAVAILABLE, DATABASE_UNAVAILABLE_MESSAGE
    status_code = status_code_for(error, extra_mapping)
    if status_code is None:
        return None
    return status_code, error.message if isinstance(error, ServiceError) else bounded_text(str(error))
