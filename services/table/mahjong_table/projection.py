"""The table engine's reading of `mahjong.match.v1`: a `TableAssigned` opens the table.

The opening events are appended in the consumer's transaction, together with its Kafka position,
so a table opens exactly once however often the assignment is delivered. Once that transaction
has committed, the table's watchers in this process are told (`TableEngine.committed`): a Play
stream waiting for the table to open (`PlayOptions.wait_for_table_ms`) starts then.
"""

from __future__ import annotations

import sqlalchemy
from mahjong.v1 import envelope_pb2
from mahjong_platform.tracked_consumer import Handler, MessagePosition
from sqlalchemy.orm import Session

from mahjong_table.tables import TableEngine


def table_opening_handler(engine: TableEngine) -> Handler:
    def handle(session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition) -> None:
        if envelope.WhichOneof("payload") == "table_assigned":
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

    return handle
