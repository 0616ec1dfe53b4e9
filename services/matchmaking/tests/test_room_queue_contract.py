"""A room's queue on SQLite and on the real PostgreSQL, with writers at once: every enqueue takes
its own place (1, 2, 3, ... in the order they committed), tables are formed of four queued
tickets each, no ticket is seated twice, a refused or cancelled ticket frees nothing it did not
hold. The queue row is created, locked and advanced by one statement."""

from __future__ import annotations

import datetime
import pathlib
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy
from mahjong_matchmaking.__main__ import DEFINITION
from mahjong_matchmaking.catalog import load_catalog
from mahjong_matchmaking.models import TICKET_CANCELLED, TICKET_QUEUED, TICKET_SEATED, room_queues, tickets
from mahjong_matchmaking.tickets import cancel, enqueue
from mahjong_platform.database import create_engine_for, create_session_factory, sqlite_url, transaction
from mahjong_platform.errors import FailedPreconditionError
from mahjong_platform.event_store import EventStore
from mahjong_platform.service_runtime import migrate
from sqlalchemy.engine import Engine

WRITERS = 4
PLAYERS_PER_WRITER = 6
JOIN_SECONDS = 120.0
ROOM_ID = "sichuan-novice"


def clock() -> datetime.datetime:
    return datetime.datetime(2026, 5, 1, tzinfo=datetime.UTC)


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.integration),
    ]
)
def engine(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        url = sqlite_url(tmp_path, "matchmaking")
    else:
        url = request.getfixturevalue("postgres_database_url")
    migrate(DEFINITION, url)
    engine = create_engine_for(url)
    try:
        yield engine
    finally:
        engine.dispose()


def test_concurrent_enqueues_take_distinct_places_and_form_whole_tables(engine: Engine) -> None:
    session_factory = create_session_factory(engine)
    room = load_catalog()[ROOM_ID]
    store = EventStore()
    errors: list[BaseException] = []
    barrier = threading.Barrier(WRITERS)

    def writer(index: int) -> None:
        try:
            barrier.wait(JOIN_SECONDS)
            for number in range(PLAYERS_PER_WRITER):
                with transaction(session_factory) as session:
                    enqueue(session, store, room, f"w{index}p{number}", clock)
        except BaseException as error:  # reported by the test
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_SECONDS)
        assert not thread.is_alive()
    assert not errors, errors
    players = WRITERS * PLAYERS_PER_WRITER
    with engine.connect() as connection:
        rows = connection.execute(sqlalchemy.select(tickets).order_by(tickets.c.queued_order)).all()
        last_order = connection.execute(sqlalchemy.select(room_queues.c.last_order)).scalar_one()
    assert [row.queued_order for row in rows] == list(range(1, players + 1))
    assert last_order == players
    assert all(row.state == TICKET_SEATED for row in rows)
    tables: dict[str, list[tuple[int, int]]] = {}
    for row in rows:
        tables.setdefault(row.table_id, []).append((row.seat, row.queued_order))
    assert len(tables) == players // 4
    for seats in tables.values():
        # Four consecutive places of the queue, seated in queue order.
        assert [seat for seat, _ in seats] == [0, 1, 2, 3]
        orders = [order for _, order in seats]
        assert orders == list(range(orders[0], orders[0] + 4))


def test_a_refused_enqueue_takes_no_place_and_a_cancelled_ticket_is_not_seated(engine: Engine) -> None:
    session_factory = create_session_factory(engine)
    room = load_catalog()[ROOM_ID]
    store = EventStore()
    with transaction(session_factory) as session:
        first, _ = enqueue(session, store, room, "alice", clock)
    with pytest.raises(FailedPreconditionError), transaction(session_factory) as session:
        enqueue(session, store, room, "alice", clock)
    with transaction(session_factory) as session:
        cancel(session, store, first.ticket_id, "alice", clock)
    for player in ("bob", "carol", "dave", "erin"):
        with transaction(session_factory) as session:
            enqueue(session, store, room, player, clock)
    with engine.connect() as connection:
        rows = {row.player_id: row for row in connection.execute(sqlalchemy.select(tickets))}
    assert rows["alice"].state == TICKET_CANCELLED and rows["alice"].queued_order == 1
    assert [rows[player].queued_order for player in ("bob", "carol", "dave", "erin")] == [2, 3, 4, 5]
    assert {rows[player].state for player in ("bob", "carol", "dave", "erin")} == {TICKET_SEATED}
    assert TICKET_QUEUED not in {row.state for row in rows.values()}
