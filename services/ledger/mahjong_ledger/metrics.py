"""The ledger's own metrics: postings and beans moved, and the settlement lag.

- ``mahjong_ledger_postings_total{reason}`` and ``mahjong_ledger_beans_moved_total{reason}``: from
  every committed ``TransferPosted`` (one posting per account whose balance moved; beans counted
  once, as the payer's total), by the transfer's reason (win, rake, ...; deposits and anything
  outside the settlement reasons count as ``other``, so the label set stays bounded).
- ``mahjong_settlement_lag_seconds``: from a game's ``GameEnded`` to its last ``TransferPosted``,
  observed when the ledger commits that game's ``GameSettled``. The scoring service publishes
  ``GameSettled`` after every instruction of the game on the same partition (key = table id), and
  gives it the ``GameEnded`` event's time, so by then every instruction of the game has been posted
  and its ``TransferPosted`` written; the figure is this process's clock at that commit minus the
  table engine's clock at ``GameEnded`` (the same clock on one machine; NTP-close otherwise).
"""

from __future__ import annotations

import time

from mahjong.v1 import envelope_pb2
from mahjong_platform.metrics import SETTLEMENT_LAG_BUCKETS_SECONDS, ServiceMetrics
from sqlalchemy import Engine

from mahjong_ledger.domain import SETTLEMENT_REASONS


def instrument(metrics: ServiceMetrics, engine: Engine) -> None:
    """Add the ledger's counters and lag histogram (the `ServiceDefinition.instrument` hook)."""
    postings = metrics.counter("mahjong_ledger_postings", "Postings written, by transfer reason.", ["reason"])
    beans = metrics.counter(
        "mahjong_ledger_beans_moved",
        "Beans moved by transfers (the payers' totals), by transfer reason.",
        ["reason"],
    )
    lag = metrics.histogram(
        "mahjong_settlement_lag_seconds",
        "Time from a game's GameEnded to its last TransferPosted (seen when the ledger commits its "
        "GameSettled).",
        SETTLEMENT_LAG_BUCKETS_SECONDS,
    )

    def transfer_posted(envelope: envelope_pb2.Envelope) -> None:
        if envelope.WhichOneof("payload") == "transfer_posted":
            transfer = envelope.transfer_posted
            # Deposit reasons are the caller's words: only the settlement ones become labels.
            reason = transfer.reason if transfer.reason in SETTLEMENT_REASONS else "other"
            postings.labels(reason).inc(len(transfer.postings))
            beans.labels(reason).inc(transfer.posted_beans)

    def game_settled(envelope: envelope_pb2.Envelope) -> None:
        if envelope.WhichOneof("payload") == "game_settled":
            ended_at = envelope.occurred_at.ToNanoseconds() / 1e9
            lag.observe(max(0.0, time.time() - ended_at))

    metrics.on_appended(transfer_posted)
    metrics.on_applied(game_settled)
