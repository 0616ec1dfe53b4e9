"""Re-driving a dead letter into a consumer group's database (SQLite; the broker side is in
tools/mjctl/tests/test_dlq.py): once, never over an event applied meanwhile, never while the handler
still fails, and what cannot be re-driven says why."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy
from mahjong.v1 import envelope_pb2, table_events_pb2
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.dead_letters import (
    DeadLetterEntry,
    RedriveError,
    decode_entry,
    parse_entry_id,
    redrive,
    redrives_recorded,
)
from mahjong_platform.envelopes import new_envelope, serialize_envelope, utc_now
from mahjong_platform.schema import platform_metadata, processed_events
from mahjong_platform.tracked_consumer import MessagePosition
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

GROUP = "example-projection"
applied = sqlalchemy.Table(
    "applied_events",
    sqlalchemy.MetaData(),
    sqlalchemy.Column("event_id", sqlalchemy.String(36), primary_key=True),
    sqlalchemy.Column("offset", sqlalchemy.Integer, nullable=False),
)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_engine_for(f"sqlite:///{tmp_path / 'dead-letters.sqlite3'}")
    platform_metadata.create_all(engine)
    applied.metadata.create_all(engine)
    yield engine
    engine.dispose()


def handler(session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition) -> None:
    session.execute(applied.insert().values(event_id=envelope.event_id, offset=position.offset))


def broken(session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition) -> None:
    handler(session, envelope, position)
    raise ValueError("the bug")


EVENT = new_envelope(table_events_pb2.TableOpened(table_id="t1"), clock=utc_now, stream_id="t1", sequence=1)


def entry(offset: int = 7, value: bytes | None = None) -> DeadLetterEntry:
    """A dead letter of EVENT (or of ``value``) at ``0:<offset>`` on the dead letter topic."""
    letter = envelope_pb2.DeadLetter(
        topic="mahjong.table.v1",
        partition=2,
        offset=41,
        key=b"t1",
        value=serialize_envelope(EVENT) if value is None else value,
        error="handler failed: ValueError: the bug",
        consumer_group=GROUP,
    )
    letter.failed_at.FromDatetime(datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC))
    return decode_entry("mahjong.dlq.v1", 0, offset, letter.SerializeToString())


def applied_offsets(engine: Engine) -> list[int]:
    with transaction(create_session_factory(engine)) as session:
        return [row.offset for row in session.execute(sqlalchemy.select(applied.c.offset))]


def test_an_entry_is_named_by_its_place_on_the_dead_letter_topic() -> None:
    dead = entry(offset=7)
    assert dead.entry_id == "0:7"
    assert parse_entry_id("0:7") == (0, 7)
    assert dead.event_type == "table_opened"
    assert dead.source == MessagePosition("mahjong.table.v1", 2, 41)
    for text in ("7", "a:1", "1:", ":1", "1:2:3"):
        with pytest.raises(ValueError, match="<partition>:<offset>"):
            parse_entry_id(text)


def test_a_handler_that_still_fails_changes_nothing(engine: Engine) -> None:
    with pytest.raises(RedriveError, match="still fails: ValueError: the bug"):
        redrive(engine, entry(), broken)
    assert applied_offsets(engine) == []
    assert redrives_recorded(engine, [entry()]) == {}


def test_after_the_fix_the_event_is_applied_once_at_its_source_position_and_recorded(engine: Engine) -> None:
    first = redrive(engine, entry(), handler)
    assert (first.outcome, first.newly) == ("applied", True)
    again = redrive(engine, entry(), handler)
    assert (again.outcome, again.newly) == ("applied", False)
    assert again.redriven_at == first.redriven_at
    assert applied_offsets(engine) == [41]
    assert redrives_recorded(engine, [entry()])[(0, 7)].outcome == "applied"


def test_an_event_the_group_applied_meanwhile_is_recorded_and_not_applied_again(engine: Engine) -> None:
    dead = entry()
    with transaction(create_session_factory(engine)) as session:
        session.execute(
            processed_events.insert().values(
                consumer_group=GROUP, event_id=dead.event_id, processed_at=utc_now()
            )
        )
    assert redrive(engine, dead, handler).outcome == "already_applied"
    assert applied_offsets(engine) == []


def test_a_second_dead_letter_of_the_same_event_is_not_applied_twice(engine: Engine) -> None:
    assert redrive(engine, entry(offset=7), handler).outcome == "applied"
    assert redrive(engine, entry(offset=8), handler).outcome == "already_applied"
    assert applied_offsets(engine) == [41]


def test_an_event_the_group_does_not_apply_is_recorded_as_not_wanted(engine: Engine) -> None:
    assert redrive(engine, entry(), handler, wants=lambda _envelope: False).outcome == "not_wanted"
    assert applied_offsets(engine) == []


def test_an_undecodable_message_cannot_be_re_driven(engine: Engine) -> None:
    garbage = entry(value=b"\xff\xffnot an envelope")
    assert garbage.envelope is None and garbage.event_id == ""
    with pytest.raises(RedriveError, match="no decodable event"):
        redrive(engine, garbage, handler)
