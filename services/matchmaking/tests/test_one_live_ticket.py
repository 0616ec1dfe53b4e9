"""A player holds at most one live (queued or seated) ticket, on SQLite and on the real PostgreSQL,
also when two Enqueues of theirs into two rooms run at once: each locks only its own room's queue
row, so on PostgreSQL neither saw the other's uncommitted ticket and both committed, until the
unique index `uq_tickets_live_player` (revision 0007) made the second insert wait for the first
and fail once it committed; the servicer answers that as the refusal of a player already queued."""

from __future__ import annotations

import dataclasses
import datetime
import threading
from collections.abc import Sequence
from typing import Any

import grpc
import pytest
import sqlalchemy
from mahjong.v1 import envelope_pb2
from mahjong.v1 import matchmaking_service_pb2 as messages
from mahjong_matchmaking.__main__ import DEFINITION
from mahjong_matchmaking.models import TICKET_CANCELLED, TICKET_QUEUED, TICKET_SEATED, tickets
from mahjong_platform.database import create_engine_for
from mahjong_platform.event_store import EventStore
from mahjong_platform.migrations import downgrade
from mahjong_platform.schema import stored_events
from mahjong_platform.service_runtime import migrate
from sqlalchemy.orm import Session

from .conftest import serve_matchmaking
from .test_seat_release_topics import backends_waiting_for_a_lock, wait_until

WAIT_SECONDS = 60.0
FIRST_ROOM = "sichuan-novice"
SECOND_ROOM = "sichuan-cap64"


class FirstAppendGate:
    """Holds the first append's transaction open (its ticket inserted, not yet committed) until
    `release` is set."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self.release = threading.Event()
        self._calls = 0
        self._lock = threading.Lock()

    def pass_through(self) -> None:
        with self._lock:
            self._calls += 1
            first = self._calls == 1
        if first:
            self.held.set()
            assert self.release.wait(WAIT_SECONDS)


@dataclasses.dataclass(frozen=True)
class HeldFirstAppend(EventStore):
    """The event store, its first append held by `gate`."""

    gate: FirstAppendGate = dataclasses.field(default_factory=FirstAppendGate)

    def append_batch(
        self,
        session: Session,
        appends: Sequence[tuple[str, int, Sequence[envelope_pb2.Envelope]]],
        *,
        savepoint: bool = True,
    ) -> None:
        self.gate.pass_through()
        EventStore.append_batch(self, session, appends, savepoint=savepoint)


def test_two_enqueues_of_one_player_into_two_rooms_at_once_leave_one_live_ticket(database_url: str) -> None:
    store = HeldFirstAppend()
    with serve_matchmaking(database_url, store) as matchmaking:
        stub = matchmaking.stub_for("alice")
        engine = create_engine_for(database_url)
        outcomes: dict[str, Any] = {}

        def enqueue(name: str, room_id: str) -> None:
            try:
                outcomes[name] = stub.Enqueue(
                    messages.EnqueueRequest(room_id=room_id, idempotency_key=name), timeout=WAIT_SECONDS
                )
            except grpc.RpcError as error:
                outcomes[name] = error

        try:
            first = threading.Thread(target=enqueue, args=("first", FIRST_ROOM))
            first.start()
            assert store.gate.held.wait(WAIT_SECONDS)  # its ticket inserted, its transaction open
            second = threading.Thread(target=enqueue, args=("second", SECOND_ROOM))
            second.start()
            if engine.dialect.name == "postgresql":
                # Past both live-ticket checks (neither sees the other's ticket): the second's
                # insert waits for the first's uncommitted index entry (without the index it
                # commits its own ticket instead).
                wait_until(
                    lambda: not second.is_alive() or backends_waiting_for_a_lock(engine) == 1,
                    "the second enqueue waits for the first or ends",
                )
            store.gate.release.set()
            first.join(WAIT_SECONDS)
            second.join(WAIT_SECONDS)
            assert not first.is_alive() and not second.is_alive()

            answer = outcomes["first"]
            assert isinstance(answer, messages.EnqueueResponse), answer
            refusal = outcomes["second"]
            assert isinstance(refusal, grpc.RpcError), refusal
            assert refusal.code() == grpc.StatusCode.FAILED_PRECONDITION, refusal
            assert refusal.details() == (
                f"player 'alice' is already queued for room {FIRST_ROOM!r} (ticket {answer.ticket_id}); "
                "cancel it or finish the game first"
            )
            with engine.connect() as connection:
                rows = connection.execute(sqlalchemy.select(tickets.c.ticket_id, tickets.c.state)).all()
                events = connection.execute(sqlalchemy.select(stored_events.c.stream_id)).scalars().all()
            assert [tuple(row) for row in rows] == [(answer.ticket_id, TICKET_QUEUED)]
            assert events == [answer.ticket_id]  # the refused call wrote nothing

            # A retry of each call gets its first answer: the ticket, and the refusal again.
            retried = stub.Enqueue(messages.EnqueueRequest(room_id=FIRST_ROOM, idempotency_key="first"))
            assert retried.ticket_id == answer.ticket_id
            with pytest.raises(grpc.RpcError) as again:
                stub.Enqueue(messages.EnqueueRequest(room_id=SECOND_ROOM, idempotency_key="second"))
            assert again.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        finally:
            store.gate.release.set()
            engine.dispose()


def ticket_row(ticket_id: str, state: str) -> dict[str, Any]:
    now = datetime.datetime(2026, 5, 1, tzinfo=datetime.UTC)
    return {
        "ticket_id": ticket_id,
        "player_id": "bob",
        "room_id": FIRST_ROOM,
        "state": state,
        "queued_order": 1,
        "queued_at": now,
        "updated_at": now,
    }


def test_the_database_refuses_a_second_live_ticket_of_a_player_until_downgraded(database_url: str) -> None:
    migrate(DEFINITION, database_url)
    engine = create_engine_for(database_url)
    try:
        with engine.begin() as connection:  # any number of tickets that are not live
            for number, state in enumerate([TICKET_CANCELLED, "finished", TICKET_CANCELLED]):
                connection.execute(tickets.insert().values(ticket_row(f"old-{number}", state)))
            connection.execute(tickets.insert().values(ticket_row("queued", TICKET_QUEUED)))
        for state in (TICKET_QUEUED, TICKET_SEATED):
            with pytest.raises(sqlalchemy.exc.IntegrityError), engine.begin() as connection:
                connection.execute(tickets.insert().values(ticket_row(f"another-{state}", state)))
        downgrade(
            database_url, DEFINITION.migrations, "0006", version_table=f"alembic_version_{DEFINITION.name}"
        )
        with engine.begin() as connection:
            connection.execute(tickets.insert().values(ticket_row("another", TICKET_SEATED)))
    finally:
        engine.dispose()
