"""Settlement lag: how long after a game ends its money has moved (issue 5 Speed).

Measured from the `GameEnded` event's time (as recorded by the table engine) to the moment the
ledger's statement of that table shows the rake transfers, the last lines of every game's
settlement: table engine → outbox → Kafka → scoring → outbox → Kafka → ledger. Observed by polling
`LedgerService.GetGameStatement` every POLL_SECONDS, so each figure is late by at most that much.
"""

from __future__ import annotations

import datetime
import statistics
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import grpc
from mahjong.v1 import ledger_service_pb2_grpc
from mahjong_rules.seats import SEAT_COUNT

from mjctl.summary import wait_for_settlement

POLL_SECONDS = 0.02
LAG_MAX_SECONDS = 120.0


class SettlementLagProbe:
    """Measures each finished game's lag in a background thread; `summary_line` reports p50/p99."""

    def __init__(self, ledger_channel: grpc.Channel, workers: int = 8) -> None:
        self._ledger = ledger_service_pb2_grpc.LedgerServiceStub(ledger_channel)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="settlement-lag")
        self._futures: list[Future[float | None]] = []
        self._lock = threading.Lock()
        self._last_settled = 0.0

    def game_ended(self, table_id: str, ended_at: datetime.datetime) -> None:
        """Start measuring `table_id`, whose `GameEnded` event occurred at `ended_at` (aware)."""
        future = self._pool.submit(self._measure, table_id, ended_at)
        with self._lock:
            self._futures.append(future)

    def _measure(self, table_id: str, ended_at: datetime.datetime) -> float | None:
        statement = wait_for_settlement(
            self._ledger, table_id, SEAT_COUNT, timeout_seconds=LAG_MAX_SECONDS, poll_seconds=POLL_SECONDS
        )
        if statement is None:
            return None
        with self._lock:
            self._last_settled = max(self._last_settled, time.monotonic())
        return (datetime.datetime.now(datetime.UTC) - ended_at).total_seconds()

    def last_settled_monotonic(self) -> float:
        """When (`time.monotonic`) the last game seen settled was seen settled; 0 before any."""
        with self._lock:
            return self._last_settled

    def lags_seconds(self) -> tuple[list[float], int]:
        """Every measured lag (sorted) and how many games were not settled within LAG_MAX_SECONDS."""
        with self._lock:
            futures = list(self._futures)
        results = [future.result() for future in futures]
        self._pool.shutdown(wait=True)
        measured = sorted(lag for lag in results if lag is not None)
        return measured, sum(lag is None for lag in results)

    def summary_line(self) -> str:
        measured, unsettled = self.lags_seconds()
        if not measured:
            return f"settlement lag: no game settled ({unsettled} unsettled after {LAG_MAX_SECONDS:.0f} s)"
        p50 = statistics.median(measured) * 1000
        p99 = measured[min(len(measured) - 1, int(len(measured) * 0.99))] * 1000
        missing = f", {unsettled} unsettled" if unsettled else ""
        return (
            f"settlement lag GameEnded → last TransferPosted over {len(measured)} games: "
            f"p50 {p50:.0f} ms, p99 {p99:.0f} ms{missing}"
        )
