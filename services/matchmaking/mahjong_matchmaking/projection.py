"""Matchmaking's view of the table events that free seats (`mahjong.seats.v1`, where the table's
event store copies them): a seat is live until its game ends or its player leaves."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import sqlalchemy
from mahjong.v1 import envelope_pb2
from mahjong_platform.envelopes import Clock, utc_now
from mahjong_platform.tracked_consumer import Handler, MessagePosition
from sqlalchemy.orm import Session

from mahjong_matchmaking import tickets


def seat_release_handler(
    clock: Clock = utc_now, on_released: Callable[[frozenset[str]], None] | None = None
) -> Handler:
    """Tracked-consumer handler: GameEnded frees every seat of the table, PlayerLeft frees one.

    Idempotent by its own keys: a release finishes only its table's tickets still seated, and a
    table id is never seated again, so an event applied a second time (read again, or on both
    topics) changes nothing and notifies nothing.

    `on_released` is called once the transaction that freed seats has committed, with the tables
    whose seats it freed (the Enqueue calls of this process waiting for a seat at one of them
    re-read it then)."""

    def handle(session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition) -> None:
        release = SEAT_RELEASES.get(envelope.WhichOneof("payload") or "")
        if release is None:
            return
        released = tickets.release_seat(session, envelope.stream_id, release(envelope), clock)
        if not released or on_released is None:
            return
        tables: set[str] | None = session.info.get(_RELEASED_TABLES_KEY)
        if tables is None:
            tables = session.info[_RELEASED_TABLES_KEY] = set()

            def committed(_session: Session) -> None:
                on_released(frozenset(session.info.pop(_RELEASED_TABLES_KEY, ())))

            sqlalchemy.event.listen(session, "after_commit", committed, once=True)
        tables.add(envelope.stream_id)

    return handle


_RELEASED_TABLES_KEY = "mahjong_matchmaking_released_tables"


SEAT_RELEASES: Final[dict[str, Callable[[envelope_pb2.Envelope], int | None]]] = {
    "game_ended": lambda envelope: None,  # every seat of the table
    "player_left": lambda envelope: envelope.player_left.seat,
}
"""The seat each seat-releasing event frees (None: all of the table's): exactly the events the
event registry declares `releases_seat` (`mahjong_platform.events`, tests/test_event_registry.py)."""
SEAT_RELEASING_EVENTS = frozenset(SEAT_RELEASES)


def releases_a_seat(envelope: envelope_pb2.Envelope) -> bool:
    """The only table events matchmaking applies (all the seats topic carries; while the table
    topic's backlog is applied, `table_topic_backlog`, the rest of it is skipped cheaply)."""
    return envelope.WhichOneof("payload") in SEAT_RELEASING_EVENTS
