"""Structured logging: JSON lines with bound and extra fields, or readable text."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from mahjong_platform.config import load_settings
from mahjong_platform.structured_logging import bind_log_fields, configure_logging

SECRET = "a-production-like-secret-of-at-least-32-bytes"


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def configured_stream(log_format: str, log_level: str = "INFO") -> io.StringIO:
    stream = io.StringIO()
    settings = load_settings(
        {"MAHJONG_LOG_FORMAT": log_format, "MAHJONG_LOG_LEVEL": log_level, "MAHJONG_JWT_SECRET": SECRET}
    )
    configure_logging(settings, stream=stream)
    return stream


@pytest.mark.usefixtures("restore_root_logger")
def test_json_lines_carry_the_standard_bound_and_extra_fields() -> None:
    stream = configured_stream("json")
    with bind_log_fields(table_id="table-1", correlation_id="c-9"):
        logging.getLogger("mahjong_table.engine").info("tile %s discarded", "5m", extra={"event_id": "e-3"})
    line = json.loads(stream.getvalue())
    assert line["level"] == "INFO"
    assert line["logger"] == "mahjong_table.engine"
    assert line["message"] == "tile 5m discarded"
    assert line["timestamp"].endswith("+00:00")
    assert (line["table_id"], line["correlation_id"], line["event_id"]) == ("table-1", "c-9", "e-3")


@pytest.mark.usefixtures("restore_root_logger")
def test_bound_fields_end_with_their_block() -> None:
    stream = configured_stream("json")
    with bind_log_fields(table_id="table-1"):
        pass
    logging.getLogger("test").info("after")
    assert "table_id" not in json.loads(stream.getvalue())


@pytest.mark.usefixtures("restore_root_logger")
def test_an_exception_is_one_json_line_with_its_traceback() -> None:
    stream = configured_stream("json")
    try:
        raise ValueError("broken invariant")
    except ValueError:
        logging.getLogger("test").exception("failed")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert "ValueError: broken invariant" in json.loads(lines[0])["exception"]


@pytest.mark.usefixtures("restore_root_logger")
def test_text_lines_are_readable_and_keep_the_fields() -> None:
    stream = configured_stream("text")
    logging.getLogger("mahjong_ledger").warning("low balance", extra={"account": "player:7"})
    assert " WARNING  mahjong_ledger: low balance account=player:7" in stream.getvalue()


@pytest.mark.usefixtures("restore_root_logger")
def test_configuring_twice_replaces_the_handler_and_honours_the_level() -> None:
    configured_stream("json")
    stream = configured_stream("json", log_level="WARNING")
    logging.getLogger("test").info("hidden")
    logging.getLogger("test").warning("shown")
    assert [json.loads(line)["message"] for line in stream.getvalue().splitlines()] == ["shown"]
