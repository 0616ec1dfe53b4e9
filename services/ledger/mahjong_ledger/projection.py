"""The tracked-consumer handler for ``mahjong.settlement.v1``: each instruction posted exactly once.

The platform's `TrackedConsumer` calls `SettlementProjection.handle` inside the transaction that
also records the event id and the Kafka position, so the postings, the balances, the
``TransferPosted`` event with its outbox message, and the position commit together. Two layers of
idempotency: the consumer skips an event id it has applied, and the repository skips an
instruction id it has posted (the scoring service may re-emit an instruction under a new event id
after a restart; the instruction id is derived from the game fact, so it does not change).

A malformed instruction (bad account, unknown reason, an instruction id reused with different
content) raises: the consumer sends it to the dead letter topic with the reason and moves on.
"""

from __future__ import annotations

import datetime
import logging

from mahjong.v1 import envelope_pb2
from mahjong_platform.tracked_consumer import MessagePosition
from sqlalchemy.orm import Session

from mahjong_ledger.messages import settlement_order_from_proto
from mahjong_ledger.repository import EventContext, LedgerRepository

logger = logging.getLogger(__name__)


class SettlementProjection:
    """Applies settlement events to the ledger through the repository."""

    def __init__(self, repository: LedgerRepository) -> None:
        self._repository = repository

    def handle(self, session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition) -> None:
        """Apply one event from the settlement topic (the `Handler` of the tracked consumer)."""
        payload = envelope.WhichOneof("payload")
        occurred_at = envelope.occurred_at.ToDatetime(tzinfo=datetime.UTC)
        if payload == "settlement_instructed":
            order = settlement_order_from_proto(envelope.settlement_instructed)
            result = self._repository.post_settlement(
                session,
                order,
                EventContext(
                    occurred_at=occurred_at,
                    correlation_id=envelope.correlation_id or envelope.event_id,
                    causation_id=envelope.event_id,
                ),
            )
            logger.info(
                "settlement instruction posted"
                if result.newly_posted
                else "settlement instruction already posted",
                extra={
                    "instruction_id": order.instruction_id,
                    "table_id": order.table_id,
                    "requested_beans": result.record.requested_beans,
                    "posted_beans": result.record.posted_beans,
                    "kafka_offset": position.offset,
                },
            )
        elif payload == "game_settled":
            settled = envelope.game_settled
            self._repository.record_game_settled(
                session,
                settled.table_id or envelope.stream_id,
                settled.room_id,
                settled.instruction_count,
                occurred_at,
            )
        else:
            # Another producer's event on this topic: not the ledger's business, and not an error.
            logger.debug("ignored event", extra={"payload": payload, "event_id": envelope.event_id})
