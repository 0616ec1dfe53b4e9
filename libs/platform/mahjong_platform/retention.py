"""Retention: prune what exactly-once delivery no longer needs (`processed_events`, sent outbox rows).

`processed_events` lets a consumer skip a re-sent duplicate, and the outbox keeps each sent
message. Both would grow with every event forever. A duplicate reaches a consumer only while it
can still be re-sent: by a producer retry (seconds), or by a relay that crashed between publishing
and marking sent, when it restarts (normally seconds; after an outage, as long as the outage). A
consumer never re-reads what it applied, because its position is stored with the processed ids.
So rows older than the retention window (default 7 days, `MAHJONG_RETENTION_HOURS`) are deleted,
in bounded batches, by one worker per service. Should a relay stay down longer than the window,
the projections' own keys still refuse a duplicate: the ledger posts an instruction id once,
scoring records each table event id once, the table engine appends after an expected version.

Unsent outbox rows are never deleted, whatever their age: they still have to reach Kafka. The
event store itself (`stored_events`) is the source of truth and is never pruned.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading

import sqlalchemy
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from mahjong_platform.database import create_session_factory, transaction
from mahjong_platform.envelopes import Clock, utc_now
from mahjong_platform.schema import outbox_messages, processed_events

logger = logging.getLogger(__name__)

PRUNE_BATCH_ROWS = 5_000
PRUNE_INTERVAL_SECONDS = 3_600.0


@dataclasses.dataclass(frozen=True)
class Pruned:
    """How many rows one pass deleted."""

    processed_events: int = 0
    sent_outbox_messages: int = 0


def prune_once(session: Session, cutoff: datetime.datetime, batch_rows: int = PRUNE_BATCH_ROWS) -> Pruned:
    """Delete at most `batch_rows` processed ids and at most `batch_rows` sent outbox messages
    older than `cutoff`, in the caller's transaction."""
    processed = session.execute(
        processed_events.delete().where(
            sqlalchemy.tuple_(processed_events.c.consumer_group, processed_events.c.event_id).in_(
                sqlalchemy.select(processed_events.c.consumer_group, processed_events.c.event_id)
                .where(processed_events.c.processed_at < cutoff)
                .limit(batch_rows)
            )
        )
    )
    sent = session.execute(
        outbox_messages.delete().where(
            outbox_messages.c.id.in_(
                sqlalchemy.select(outbox_messages.c.id)
                .where(outbox_messages.c.sent_at.is_not(None), outbox_messages.c.sent_at < cutoff)
                .limit(batch_rows)
            )
        )
    )
    return Pruned(_count(processed), _count(sent))


def _count(result: object) -> int:
    return int(getattr(result, "rowcount", 0) or 0)


class RetentionWorker:
    """Prunes the service's database every `interval_seconds`, each pass in batches until nothing
    older than `retention` is left (one short transaction per batch, so writers are never held)."""

    def __init__(
        self,
        engine: Engine,
        retention: datetime.timedelta,
        *,
        interval_seconds: float = PRUNE_INTERVAL_SECONDS,
        batch_rows: int = PRUNE_BATCH_ROWS,
        clock: Clock = utc_now,
    ) -> None:
        assert retention > datetime.timedelta(0), retention
        assert interval_seconds > 0 and batch_rows > 0, (interval_seconds, batch_rows)
        self._session_factory = create_session_factory(engine)
        self._retention = retention
        self._interval_seconds = interval_seconds
        self._batch_rows = batch_rows
        self._clock = clock

    def run_once(self) -> Pruned:
        """One pass: every batch older than the retention window; the total deleted."""
        cutoff = self._clock() - self._retention
        total = Pruned()
        while True:
            with transaction(self._session_factory) as session:
                pruned = prune_once(session, cutoff, self._batch_rows)
            total = Pruned(
                total.processed_events + pruned.processed_events,
                total.sent_outbox_messages + pruned.sent_outbox_messages,
            )
            if max(pruned.processed_events, pruned.sent_outbox_messages) < self._batch_rows:
                break
        if total.processed_events or total.sent_outbox_messages:
            logger.info(
                "pruned rows older than the retention window",
                extra={
                    "processed_events": total.processed_events,
                    "sent_outbox_messages": total.sent_outbox_messages,
                    "cutoff": cutoff.isoformat(),
                },
            )
        return total

    def run_forever(self, stop_event: threading.Event) -> None:
        """Prune at start and then every interval until `stop_event` is set."""
        while not stop_event.is_set():
            self.run_once()
            stop_event.wait(self._interval_seconds)

    def close(self) -> None:
        """Nothing to release (the engine belongs to the service)."""
