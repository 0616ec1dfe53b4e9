"""Builders for ledger tests and benchmarks: settlement events as the scoring service publishes them."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence
from typing import Final

from mahjong.v1 import envelope_pb2, settlement_events_pb2
from mahjong_platform.envelopes import new_envelope

FIXED_TIME: Final = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def payee(account: str, beans: int, reason: str = "") -> settlement_events_pb2.Payee:
    """One payee line (points are informational for the ledger)."""
    return settlement_events_pb2.Payee(account=account, points=beans // 100, beans=beans, reason=reason)


def instruction_envelope(
    instruction_id: str,
    payer: str,
    payees: Sequence[settlement_events_pb2.Payee],
    *,
    table_id: str = "table-1",
    reason: str = "win",
    sequence: int = 1,
    event_id: str | None = None,
    occurred_at: datetime.datetime = FIXED_TIME,
) -> envelope_pb2.Envelope:
    """A ``SettlementInstructed`` in its envelope, as the scoring service publishes it."""
    payload = settlement_events_pb2.SettlementInstructed(
        instruction_id=instruction_id,
        table_id=table_id,
        room_id="novice",
        reason=reason,
        payer_account=payer,
        payees=list(payees),
        source_event_id=str(uuid.uuid4()),
        line=sequence,
    )
    return new_envelope(
        payload,
        clock=lambda: occurred_at,
        stream_id=table_id,
        sequence=sequence,
        event_id=event_id or str(uuid.uuid4()),
    )


def game_settled_envelope(table_id: str, instruction_count: int, sequence: int) -> envelope_pb2.Envelope:
    """A ``GameSettled`` announcing how many instructions the game had."""
    payload = settlement_events_pb2.GameSettled(
        table_id=table_id, room_id="novice", instruction_count=instruction_count
    )
    return new_envelope(payload, clock=lambda: FIXED_TIME, stream_id=table_id, sequence=sequence)
