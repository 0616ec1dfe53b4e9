"""Matchmaking's view of `mahjong.table.v1`: a seat is live until its game ends or its player leaves."""

from __future__ import annotations

from mahjong.v1 import envelope_pb2
from mahjong_platform.envelopes import Clock, utc_now
from mahjong_platform.tracked_consumer import Handler, MessagePosition
from sqlalchemy.orm import Session

from mahjong_matchmaking import tickets


def seat_release_handler(clock: Clock = utc_now) -> Handler:
    """Tracked-consumer handler: GameEnded frees every seat of the table, PlayerLeft frees one."""

    def handle(session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition) -> None:
        kind = envelope.WhichOneof("payload")
        if kind == "game_ended":
            tickets.release_seat(session, envelope.stream_id, None, clock)
        elif kind == "player_left":
            tickets.release_seat(session, envelope.stream_id, envelope.player_left.seat, clock)

    return handle


SEAT_RELEASING_EVENTS = frozenset({"game_ended", "player_left"})


def releases_a_seat(envelope: envelope_pb2.Envelope) -> bool:
    """The only table events matchmaking applies; the rest of the table topic is skipped cheaply."""
    return envelope.WhichOneof("payload") in SEAT_RELEASING_EVENTS
