"""`insert_rows` (COPY on PostgreSQL, multi-row INSERTs on SQLite) stores what an INSERT would, on
both databases: rows in the given order (identity ids number them so), bytes, NULLs, aware times
and text needing escapes intact; a violated unique key is SQLAlchemy's `IntegrityError` and,
inside a savepoint, leaves the transaction usable. `upsert_rows` updates the rows whose key is
there and inserts the others."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import sqlalchemy
from mahjong_platform.database import (
    COPY_ROWS_MIN,
    SQLITE_ROWS_PER_INSERT_MAX,
    create_session_factory,
    insert_rows,
    sqlite_rows,
    transaction,
    upsert_rows,
)
from mahjong_platform.schema import outbox_messages
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

MOMENT = datetime.datetime(2026, 5, 1, 12, 30, 15, 123456, tzinfo=datetime.UTC)


def message(index: int, **overrides: object) -> dict[str, object]:
    return {
        "topic": "mahjong.table.v1",
        "message_key": f"table\t{index}\\n\"'",
        "message_value": bytes([index % 256, 0, 92, 10, 255]),
        "event_id": f"event-{index:04d}",
        "created_at": MOMENT + datetime.timedelta(seconds=index),
        "sent_at": None if index % 2 else MOMENT,
        **overrides,
    }


def stored(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as connection:
        rows = connection.execute(sqlalchemy.select(outbox_messages).order_by(outbox_messages.c.id))
        return [dict(row._mapping) for row in rows]


def aware(moment: object) -> object:
    if isinstance(moment, datetime.datetime) and moment.tzinfo is None:
        return moment.replace(tzinfo=datetime.UTC)
    return moment


ROW_COUNTS = pytest.mark.parametrize(
    "count",
    [3, COPY_ROWS_MIN + 5, 2 * SQLITE_ROWS_PER_INSERT_MAX + 37],
    ids=["few rows", "COPY", "several SQLite statements"],
)


@ROW_COUNTS
def test_rows_are_stored_in_order_with_their_values(migrated_engine: Engine, count: int) -> None:
    rows = [message((index * 37) % 1009) for index in range(count)]
    with transaction(create_session_factory(migrated_engine)) as session:
        insert_rows(session, outbox_messages, rows)
        insert_rows(session, outbox_messages, [])
    stored_rows = stored(migrated_engine)
    assert [row["event_id"] for row in stored_rows] == [row["event_id"] for row in rows]
    ids = [row["id"] for row in stored_rows]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for row, original in zip(stored_rows, rows, strict=True):
        assert bytes(row["message_value"]) == original["message_value"]
        assert row["message_key"] == original["message_key"]
        assert aware(row["created_at"]) == original["created_at"]
        assert aware(row["sent_at"]) == original["sent_at"]


@ROW_COUNTS
def test_a_violated_unique_key_is_an_integrity_error_and_a_savepoint_survives_it(
    migrated_engine: Engine, count: int
) -> None:
    with transaction(create_session_factory(migrated_engine)) as session:
        insert_rows(session, outbox_messages, [message(1)])
        clashing = [message(1000 + index) for index in range(count - 1)] + [message(1)]
        with pytest.raises(IntegrityError), session.begin_nested():
            insert_rows(session, outbox_messages, clashing)
        insert_rows(session, outbox_messages, [message(4)])
    assert [row["event_id"] for row in stored(migrated_engine)] == ["event-0001", "event-0004"]


@ROW_COUNTS
def test_rows_naming_different_columns_are_refused(migrated_engine: Engine, count: int) -> None:
    incomplete = message(count)
    del incomplete["sent_at"]
    rows = [message(index) for index in range(count - 1)] + [incomplete]
    with (
        pytest.raises((ValueError, sqlalchemy.exc.StatementError)),
        transaction(create_session_factory(migrated_engine)) as session,
    ):
        insert_rows(session, outbox_messages, rows)
    assert stored(migrated_engine) == []


def test_an_upsert_updates_the_rows_whose_key_is_there_and_inserts_the_others(
    migrated_engine: Engine,
) -> None:
    with transaction(create_session_factory(migrated_engine)) as session:
        insert_rows(session, outbox_messages, [message(index) for index in range(3)])
    first_ids = {row["event_id"]: row["id"] for row in stored(migrated_engine)}
    changed = [
        {
            key: value
            for key, value in message(index, message_value=b"new", message_key="k2").items()
            if key != "sent_at"
        }
        for index in (2, 5)
    ]
    with transaction(create_session_factory(migrated_engine)) as session:
        upsert_rows(session, outbox_messages, changed, key=("event_id", "topic"))
        upsert_rows(session, outbox_messages, [], key=("event_id", "topic"))
    by_event = {row["event_id"]: row for row in stored(migrated_engine)}
    assert sorted(by_event) == ["event-0000", "event-0001", "event-0002", "event-0005"]
    assert by_event["event-0002"]["id"] == first_ids["event-0002"]  # updated in place
    assert (bytes(by_event["event-0002"]["message_value"]), by_event["event-0002"]["message_key"]) == (
        b"new",
        "k2",
    )
    assert aware(by_event["event-0002"]["sent_at"]) == MOMENT  # a column the upsert did not name: kept
    assert bytes(by_event["event-0001"]["message_value"]) == message(1)["message_value"]
    assert bytes(by_event["event-0005"]["message_value"]) == b"new"


@pytest.mark.parametrize("count", [1, 3, 37, SQLITE_ROWS_PER_INSERT_MAX + 1])
def test_sqlite_writes_each_chunk_of_rows_in_one_statement_of_a_few_texts(
    sqlite_engine: Engine, count: int
) -> None:
    """SQLite: one INSERT per SQLITE_ROWS_PER_INSERT_MAX rows (each statement steps once, and each
    step is a wait for the GIL in a busy service), its rows padded to a power of two that its LIMIT
    cuts off, so a table has a few statement texts; chunks of power-of-two sizes took one
    statement per bit of the count (37 rows: 32 + 4 + 1)."""
    statements: list[str] = []

    def remember(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if statement.startswith("INSERT"):
            statements.append(statement)

    rows = [message(index) for index in range(count)]
    sqlalchemy.event.listen(sqlite_engine, "before_cursor_execute", remember)
    try:
        with transaction(create_session_factory(sqlite_engine)) as session:
            insert_rows(session, outbox_messages, rows)
            upsert_rows(session, outbox_messages, rows, key=("event_id", "topic"))
    finally:
        sqlalchemy.event.remove(sqlite_engine, "before_cursor_execute", remember)
    chunks = -(-count // SQLITE_ROWS_PER_INSERT_MAX)
    assert len(statements) == 2 * chunks
    assert all(" LIMIT ?" in text for text in statements)
    assert [row["event_id"] for row in stored(sqlite_engine)] == [row["event_id"] for row in rows]


def test_sqlite_row_counts_that_pad_to_the_same_power_of_two_share_one_statement_text(
    sqlite_engine: Engine,
) -> None:
    """33 and 37 rows both pad to 64: the same INSERT text, and the same upsert text (so a table
    has one text per power of two, not one per row count)."""
    statements: list[str] = []

    def remember(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if statement.startswith("INSERT"):
            statements.append(statement)

    texts: dict[int, list[str]] = {}
    sqlalchemy.event.listen(sqlite_engine, "before_cursor_execute", remember)
    try:
        for count in (33, 37):
            rows = [message(1000 * count + index) for index in range(count)]
            with transaction(create_session_factory(sqlite_engine)) as session:
                insert_rows(session, outbox_messages, rows)
                upsert_rows(session, outbox_messages, rows, key=("event_id", "topic"))
            texts[count] = statements[:]
            statements.clear()
    finally:
        sqlalchemy.event.remove(sqlite_engine, "before_cursor_execute", remember)
    assert len(texts[33]) == 2 and texts[33] == texts[37]


def test_sqlite_statements_run_through_the_driver_unless_someone_listens_for_them(
    sqlite_engine: Engine,
) -> None:
    """`sqlite_rows` (the writers' multi-row INSERTs and version checks) runs its statement on the
    driver's cursor, not through SQLAlchemy's execution (the same statements reach SQLite, with
    SQLAlchemy's errors); while a cursor-event listener is attached, through SQLAlchemy, so a
    statement audit still sees every statement; a savepoint still rolls back its rows."""
    traced: list[str] = []
    listened: list[str] = []
    sqlite_engine.dispose()
    sqlalchemy.event.listen(
        sqlite_engine, "connect", lambda connection, _record: connection.set_trace_callback(traced.append)
    )
    session_factory = create_session_factory(sqlite_engine)
    with transaction(session_factory) as session:
        insert_rows(session, outbox_messages, [message(1), message(2)])
        assert sqlite_rows(session, "SELECT event_id FROM outbox_messages ORDER BY id", ()) == [
            ("event-0001",),
            ("event-0002",),
        ]
        with pytest.raises(IntegrityError), session.begin_nested():
            insert_rows(session, outbox_messages, [message(3), message(1)])
            pytest.fail("the clash is in the same statement")
        with session.begin_nested():
            insert_rows(session, outbox_messages, [message(4)])
            with pytest.raises(IntegrityError), session.begin_nested():
                insert_rows(session, outbox_messages, [message(5)])
                insert_rows(session, outbox_messages, [message(2)])
    assert [row["event_id"] for row in stored(sqlite_engine)] == ["event-0001", "event-0002", "event-0004"]
    inserts = [text for text in traced if text.startswith("INSERT INTO outbox_messages")]
    assert len(inserts) == 5 and any(text.startswith("SAVEPOINT") for text in traced)

    def listen(_connection: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        listened.append(statement)

    sqlalchemy.event.listen(sqlite_engine, "before_cursor_execute", listen)
    try:
        with transaction(session_factory) as session:
            insert_rows(session, outbox_messages, [message(6)])
            assert sqlite_rows(session, "SELECT count(*) FROM outbox_messages", ()) == [(4,)]
            with pytest.raises(IntegrityError):
                insert_rows(session, outbox_messages, [message(6)])
    finally:
        sqlalchemy.event.remove(sqlite_engine, "before_cursor_execute", listen)
    assert [text.split()[0] for text in listened] == ["BEGIN", "INSERT", "SELECT", "INSERT"]
