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


def seat_release_handler(clock: Clock = utc_now, on_released: Callable[[], None] | None = None) -> Handler:
    """Tracked-consumer handler: GameEnded frees every seat of the table, PlayerLeft frees one.

    `on_released` is called once the transaction that freed a seat has committed (the Enqueue
    calls of this process waiting for their player's seat re-read it then)."""

    def handle(session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition) -> None:
        release = SEAT_RELEASES.get(envelope.WhichOneof("payload") or "")
        if release is None:
            return
        released = tickets.release_seat(session, envelope.stream_id, release(envelope), clock)
        if released and on_released is not None and not session.info.get(_NOTIFIES_KEY):
            session.info[_NOTIFIES_KEY] = True
            sqlalchemy.event.listen(session, "after_commit", lambda _session: on_released(), once=True)

    return handle


_NOTIFIES_KEY = "mahjong_matchmaking_notifies_seat_release"


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
