"""The table engine's reading of `mahjong.match.v1`: a `TableAssigned` opens the table.

The opening events are appended in the consumer's transaction, together with its Kafka position,
so a table opens exactly once however often the assignment is delivered. Once that transaction
has committed, the table's watchers in this process are told (`TableEngine.committed`): a Play
stream waiting for the table to open (`PlayOptions.wait_for_table_ms`) starts then.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy
from mahjong.v1 import envelope_pb2
from mahjong_platform.tracked_consumer import BatchHandler, Delivery, Handler, MessagePosition
from sqlalchemy.orm import Session

from mahjong_table.tables import TableEngine


def is_table_assignment(envelope: envelope_pb2.Envelope) -> bool:
    """The events of the match topic the table engine applies (its consumer's `wants`: a batch of
    queued and cancelled tickets costs no transaction)."""
    return envelope.WhichOneof("payload") == "table_assigned"


def table_opening_handler(engine: TableEngine) -> Handler:
    def handle(session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition) -> None:
        _open(engine, session, envelope, position)

    return handle


def table_openings(engine: TableEngine) -> BatchHandler:
    """`table_opening_handler` for a whole batch, as an idempotent handler: a table opens once by
    its own stream (a re-sent assignment finds it open), so the consumer keeps no
    `processed_events` rows for it; the deliveries that opened a table are returned."""

    def apply_batch(session: Session, deliveries: Sequence[Delivery]) -> list[Delivery]:
        return [
            delivery
            for delivery in deliveries
            if _open(engine, session, delivery.envelope, delivery.position)
        ]

    return apply_batch


def _open(
    engine: TableEngine, session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition
) -> bool:
    """Open the table `envelope` assigns, if it is an assignment; whether a table opened."""
    if not is_table_assignment(envelope):
        return False
    envelopes = engine.open_from_assignment(
        session,
        envelope.table_assigned,
        causation_id=envelope.event_id,
        match_partition=position.partition,
    )
    if envelopes:
        sqlalchemy.event.listen(
            session, "after_commit", lambda _session: engine.committed(envelopes), once=True
        )
    return bool(envelopes)
