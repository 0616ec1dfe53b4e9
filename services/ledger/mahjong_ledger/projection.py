"""The tracked-consumer handler for ``mahjong.settlement.v1``: each instruction posted exactly once.

The platform's `TrackedConsumer` calls `SettlementProjection.handle_batch` with a whole poll batch
inside the transaction that also records the event ids and the Kafka positions, so the postings,
the balances, the ``TransferPosted`` events with their outbox messages, and the positions commit
together. The batch is posted with set-based SQL (`LedgerRepository.post_many`); `handle` is a
batch of one. Two layers of
idempotency: the consumer skips an event id it has applied, and the repository skips an
instruction id it has posted (the scoring service may re-emit an instruction under a new event id
after a restart; the instruction id is derived from the game fact, so it does not change).

Both layers are one now: the handler is idempotent on its own (`IDEMPOTENT_HANDLER`), so the
consumer keeps no ``processed_events`` rows for it. A re-sent ``SettlementInstructed`` finds its
instruction id posted (after the account locks) and posts nothing; a re-sent ``GameSettled`` finds
its ``ledger_games`` row (first report wins); a deposit's ``TransferPosted`` replayed by the rebuild
finds its idempotency key. A crash re-reads from the positions stored in the batch's transaction.

A malformed instruction (bad account, unknown reason, an instruction id reused with different
content) raises: the consumer sends it to the dead letter topic with the reason and moves on.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping, Sequence
from typing import Final

from mahjong.v1 import envelope_pb2
from mahjong_platform.tracked_consumer import Delivery, MessagePosition
from sqlalchemy.orm import Session

from mahjong_ledger.domain import DepositOrder, TransferKind, transfer_id_for
from mahjong_ledger.messages import settlement_order_from_proto
from mahjong_ledger.repository import (
    EventContext,
    LedgerRepository,
    PostRequest,
    deposit_request,
    settlement_request,
)

logger = logging.getLogger(__name__)

IDEMPOTENT_HANDLER: Final = True
"""The handlers skip what they posted before by its idempotency key (see the module docstring): the
tracked consumer, the rebuild and the benchmark apply them without ``processed_events``."""


class SettlementProjection:
    """Applies settlement events to the ledger through the repository."""

    def __init__(self, repository: LedgerRepository) -> None:
        self._repository = repository

    def handle(self, session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition) -> None:
        """Apply one event from the settlement topic (a batch of one)."""
        self.handle_batch(session, [Delivery(envelope, position)])

    def handle_batch(self, session: Session, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Apply a batch of settlement-topic events in order (the tracked consumer's `BatchHandler`);
        the deliveries applied: all but the instructions posted before and the games recorded
        before (re-sends, skipped by their keys)."""
        requests: dict[int, PostRequest] = {}
        games: dict[int, dict[str, object]] = {}
        for index, delivery in enumerate(deliveries):
            envelope = delivery.envelope
            payload = envelope.WhichOneof("payload")
            if payload == "settlement_instructed":
                requests[index] = settlement_request_of(envelope)
            elif payload == "game_settled":
                games[index] = game_settled_row(envelope)
            else:
                # Another producer's event on this topic: not the ledger's business, and not an error.
                logger.debug("ignored event", extra={"payload": payload, "event_id": envelope.event_id})
        applied, posted = _apply_indexed(self._repository, session, deliveries, requests, games)
        if len(requests) > posted:
            # Re-sent instructions are worth a line; the postings themselves are counted by the
            # metrics (`mahjong_ledger_postings_total`), not logged batch by batch (a line a batch
            # was about 3% of the ledger's CPU at saturation).
            logger.info(
                "settlement instructions skipped as posted before",
                extra={"posted": posted, "already_posted": len(requests) - posted},
            )
        elif requests:
            logger.debug("settlement instructions posted", extra={"posted": posted})
        return applied


def _apply_indexed(
    repository: LedgerRepository,
    session: Session,
    deliveries: Sequence[Delivery],
    requests: Mapping[int, PostRequest],
    games: Mapping[int, dict[str, object]],
) -> tuple[list[Delivery], int]:
    """Post `requests` and record `games` (keyed by their delivery's index in `deliveries`), in
    order. Answers the deliveries applied (all but the requests posted before and the games
    recorded before: re-sends, skipped by their keys; a delivery of neither is handled by ignoring
    it) and how many requests were posted now."""
    posted = {id(request) for request in repository.post_new(session, list(requests.values()))}
    recorded = set(repository.record_games_settled(session, list(games.values())))

    def applied(index: int) -> bool:
        if index in requests:
            return id(requests[index]) in posted
        if index in games:
            return games[index]["table_id"] in recorded
        return True

    return [delivery for index, delivery in enumerate(deliveries) if applied(index)], len(posted)


def settlement_request_of(envelope: envelope_pb2.Envelope) -> PostRequest:
    """The posting request of a ``SettlementInstructed`` envelope (at the event's time)."""
    order = settlement_order_from_proto(envelope.settlement_instructed)
    return settlement_request(
        order,
        EventContext(
            occurred_at=envelope.occurred_at.ToDatetime(tzinfo=datetime.UTC),
            correlation_id=envelope.correlation_id or envelope.event_id,
            causation_id=envelope.event_id,
        ),
    )


def game_settled_row(envelope: envelope_pb2.Envelope) -> dict[str, object]:
    """The ``ledger_games`` row a ``GameSettled`` envelope announces."""
    settled = envelope.game_settled
    return {
        "table_id": settled.table_id or envelope.stream_id,
        "room_id": settled.room_id,
        "instruction_count": settled.instruction_count,
        "settled_at": envelope.occurred_at.ToDatetime(tzinfo=datetime.UTC),
    }


class LedgerReplay:
    """The batch handler `mjctl rebuild ledger` replays with: the settlement topic as the live
    consumer applies it, and the deposits (which arrive over gRPC, not from a topic) from their
    ``TransferPosted`` on the ledger topic, posted again at their original time, in stream order."""

    def __init__(self, repository: LedgerRepository, ledger_topic: str) -> None:
        self._repository = repository
        self._ledger_topic = ledger_topic

    def handle_batch(self, session: Session, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Post the batch's settlements and deposits in order with set-based SQL; the deliveries
        applied, as the live `SettlementProjection.handle_batch` answers them (a re-sent event,
        skipped by its key, is a duplicate; a settlement's `TransferPosted`, rebuilt from its
        instruction, is handled by ignoring it)."""
        requests: dict[int, PostRequest] = {}
        games: dict[int, dict[str, object]] = {}
        for index, delivery in enumerate(deliveries):
            envelope = delivery.envelope
            payload = envelope.WhichOneof("payload")
            if delivery.position.topic == self._ledger_topic:
                request = deposit_request_of(envelope) if payload == "transfer_posted" else None
                if request is not None:
                    requests[index] = request
            elif payload == "settlement_instructed":
                requests[index] = settlement_request_of(envelope)
            elif payload == "game_settled":
                games[index] = game_settled_row(envelope)
        applied, _posted = _apply_indexed(self._repository, session, deliveries, requests, games)
        return applied


def deposit_request_of(envelope: envelope_pb2.Envelope) -> PostRequest | None:
    """The deposit a ``TransferPosted`` records, as a request at the event's time; None for the
    ``TransferPosted`` of a settlement (the ledger's output, rebuilt from its instruction)."""
    posted = envelope.transfer_posted
    if posted.transfer_id != transfer_id_for(TransferKind.DEPOSIT, posted.instruction_id):
        return None
    credited = [posting.account for posting in posted.postings if posting.beans > 0]
    assert len(credited) == 1, f"deposit {posted.transfer_id} credits {credited}"
    order = DepositOrder(
        account=credited[0],
        beans=posted.requested_beans,
        idempotency_key=posted.instruction_id,
        memo=posted.memo,
        reason=posted.reason,
    )
    context = EventContext(
        occurred_at=envelope.occurred_at.ToDatetime(tzinfo=datetime.UTC),
        correlation_id=envelope.correlation_id,
    )
    return deposit_request(order, context)
