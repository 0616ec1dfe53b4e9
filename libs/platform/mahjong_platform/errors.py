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

from collections.abc import Mapping
from typing import ClassVar

import grpc


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
