"""The Enqueue's statements run on the driver's cursor (`mahjong_platform.driver_sql`), on
SQLite and on the real PostgreSQL: the rows they write read back through SQLAlchemy as the
SQLAlchemy statements wrote them, a unique key broken is SQLAlchemy's IntegrityError (what the
servicer answers a racing retry by), and the engine's statement listeners see every statement."""

from __future__ import annotations

import datetime

import pytest
import sqlalchemy
from mahjong_matchmaking import tickets
from mahjong_matchmaking.__main__ import DEFINITION
from mahjong_matchmaking.catalog import load_catalog
from mahjong_matchmaking.models import TICKET_QUEUED, TICKET_SEATED
from mahjong_matchmaking.models import tickets as tickets_table
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.event_store import EventStore
from mahjong_platform.service_runtime import migrate

MOMENT = datetime.datetime(2026, 12, 4, 14, 6, 10, 353876, tzinfo=datetime.UTC)


def test_the_enqueue_rows_read_back_through_sqlalchemy_and_a_repeated_key_is_an_integrity_error(
    database_url: str,
) -> None:
    migrate(DEFINITION, database_url)
    engine = create_engine_for(database_url)
    session_factory = create_session_factory(engine)
    room = load_catalog()["sichuan-novice"]
    seen: list[str] = []

    def listener(*arguments: object) -> None:
        seen.append(str(arguments[2]))

    sqlalchemy.event.listen(engine, "before_cursor_execute", listener)
    try:
        players = [f"p{seat}" for seat in range(4)]
        for player in players:
            with transaction(session_factory) as session:
                ticket, _events = tickets.enqueue(session, EventStore(), room, player, lambda: MOMENT, 10**9)
                tickets.remember_answer(session, player, "Enqueue", f"key-{player}", "digest", b"answer")
        with transaction(session_factory) as session:
            rows = session.execute(
                sqlalchemy.select(tickets_table).order_by(tickets_table.c.queued_order)
            ).all()
            assert [row.player_id for row in rows] == players
            assert all(row.state == TICKET_SEATED and row.table_id == rows[0].table_id for row in rows)
            assert [row.seat for row in rows] == [0, 1, 2, 3]
            assert all(row.queued_at.replace(tzinfo=datetime.UTC) == MOMENT for row in rows)
            assert all(row.updated_at.replace(tzinfo=datetime.UTC) == MOMENT for row in rows)
            assert tickets.first_answer(session, "p0", "Enqueue", "key-p0", "digest") == b"answer"
            assert tickets.load_ticket(session, rows[0].ticket_id) == tickets.Ticket(
                rows[0].ticket_id, "p0", room.room_id, TICKET_SEATED, rows[0].table_id, 0
            )
            assert len(tickets.load_tickets(session, [row.ticket_id for row in rows] + ["nobody"])) == 4
            assert tickets.live_ticket(session, "p0") is not None
        with pytest.raises(sqlalchemy.exc.IntegrityError), transaction(session_factory) as session:
            tickets.remember_answer(session, "p0", "Enqueue", "key-p0", "digest", b"again")
        with transaction(session_factory) as session:
            ticket, _events = tickets.enqueue(session, EventStore(), room, "p4", lambda: MOMENT, 10**9)
        assert ticket.state == TICKET_QUEUED
    finally:
        engine.dispose()
    assert any("INSERT INTO tickets" in statement for statement in seen)
    assert any("FROM idempotent_answers" in statement for statement in seen)
