"""Structured logging: one JSON object per line for machines, or a readable line for humans.

Named ``structured_logging`` rather than ``logging`` so that it never hides the standard library
module from a reader (``from mahjong_platform import logging`` would shadow it in that file).

A log line carries the standard fields (timestamp, level, logger, message), the ``extra=`` fields of
the call, and the fields bound for the current context with `bind_log_fields` (say ``table_id`` and
``correlation_id`` for the whole handling of one command), so that one grep finds a table's story.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final, TextIO

from mahjong_platform.config import Settings

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD_RECORD_ATTRIBUTES: Final = frozenset(
    vars(logging.LogRecord("name", logging.INFO, "path", 0, "message", None, None))
) | {"message", "asctime", "taskName"}
_NO_FIELDS: Final[Mapping[str, Any]] = MappingProxyType({})
_BOUND_FIELDS: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "mahjong_log_fields", default=_NO_FIELDS
)
# Marks the handler configure_logging installs, so that calling it again replaces, not duplicates.
_HANDLER_MARKER: Final = "_mahjong_structured_logging"


@contextlib.contextmanager
def bind_log_fields(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to every log line written in this context (thread or task) until the block ends.

    Nested blocks add to (and may override) the outer fields; leaving a block restores them.
    """
    token = _BOUND_FIELDS.set(MappingProxyType({**_BOUND_FIELDS.get(), **fields}))
    try:
        yield
    finally:
        _BOUND_FIELDS.reset(token)


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """Bound context fields overlaid with the record's own ``extra=`` fields."""
    extra = {key: value for key, value in vars(record).items() if key not in _STANDARD_RECORD_ATTRIBUTES}
    return {**_BOUND_FIELDS.get(), **extra}


def _timestamp(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds")


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object on one line; values JSON cannot hold become strings."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "timestamp": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _record_fields(record).items():
            line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """Formats a record as ``timestamp LEVEL logger: message key=value ...`` for a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{key}={value}" for key, value in _record_fields(record).items())
        line = f"{_timestamp(record)} {record.levelname:<8} {record.name}: {record.getMessage()}"
        if fields:
            line = f"{line} {fields}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        if record.stack_info:
            line = f"{line}\n{self.formatStack(record.stack_info)}"
        return line


def configure_logging(settings: Settings, stream: TextIO | None = None) -> None:
    """Send every log record at or above ``settings.log_level`` to ``stream`` (default stderr).

    Uses JSON lines or text as ``settings.log_format`` says. Calling it again replaces the handler it
    installed before instead of adding a second one, so tests and re-configuration stay clean.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _HANDLER_MARKER, False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.log_format == "json" else TextFormatter())
    setattr(handler, _HANDLER_MARKER, True)
    root.addHandler(handler)
    root.setLevel(settings.log_level)
    if settings.jwt_secret_is_development_default:
        logging.getLogger(__name__).warning(
            "running with the public development JWT secret; set MAHJONG_JWT_SECRET outside development"
        )
