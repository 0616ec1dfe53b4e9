"""Moving the seat releases from `mahjong.table.v1` to `mahjong.seats.v1` without missing one.

Matchmaking frees seats on `GameEnded` and `PlayerLeft`. Its consumer (group `matchmaking-seats`)
used to read them from the table topic, every event of every game (~250 a game) to apply ~2; the
table's event store now also queues each of them for `mahjong.seats.v1` in the event's own
transaction (`Topics.destinations`), and the consumer reads only that topic, from its beginning
the first time (no stored position there), so it misses nothing written there.

A deployment that ran the old consumer may still have releases on the table topic only: written
after the old consumer's last stored position, or by a table engine of the old version. This
worker, run by every matchmaking process, applies them. When the group has stored positions on the
table topic and has not retired it (`retired_inputs`), it reads the table topic from those
positions, in the same group (its own Kafka group, as the seats topic's consumer has), until

1. the seats topic holds a message (a table engine of this version writes releases there), then
2. every partition is applied up to the table topic's end offsets of that moment;

then it records the table topic retired and reads it no more. A deployment that never read the
table topic (no stored position) retires it at once. Several processes may drain at once: they
share the table topic's partitions in their Kafka group, and the first to see it done retires it.

A release read on both topics (or by this worker and an older matchmaking still running) frees
its seats once: the seat-release handler is idempotent by its own keys (`projection`: a release
finishes its table's *seated* tickets, and a table id is never seated again), so the consumers of
the group are idempotent handlers (no `processed_events` rows): the second to apply a release
finds its seats free and changes nothing, where two transactions that both checked the processed
ids before either committed failed the slower one's on the processed id's key.

Every message of the table topic is a delivery here (not only the releases, which the batch
handler picks), so every poll stores its positions: (2) compares the stored positions with the
end offsets, and a partition whose backlog holds no release would otherwise never store one.

Deploy the table engine (every replica) no later than matchmaking: a release that a table engine
of the old version writes after the moment of (2) is on the table topic only, and is missed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy
from kafka import KafkaConsumer, TopicPartition
from mahjong_platform.database import create_session_factory, read_transaction, transaction, upsert_rows
from mahjong_platform.envelopes import Clock, utc_now
from mahjong_platform.schema import consumer_positions
from mahjong_platform.topic_reading import reading_consumer, topic_partitions
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import BatchHandler, Delivery, Handler, Relevance, TrackedConsumer
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from mahjong_matchmaking.models import retired_inputs

logger = logging.getLogger(__name__)

POLL_TIMEOUT_MS = 500


class TableTopicBacklog:
    """`service_runtime` worker: applies the seat releases left on the table topic (see the module
    docstring), then waits for the service to stop."""

    def __init__(
        self,
        engine: Engine,
        bootstrap_servers: str | list[str],
        topics: Topics,
        group_id: str,
        handler: Handler,
        *,
        wants: Relevance | None = None,
        clock: Clock = utc_now,
        consumer_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._engine = engine
        self._session_factory = create_session_factory(engine)
        self._bootstrap_servers = bootstrap_servers
        self._topics = topics
        self._group_id = group_id
        self._handler = handler
        self._wants = wants
        self._clock = clock
        self._consumer_options = dict(consumer_options or {})
        self._consumer: TrackedConsumer | None = None
        self._offsets: KafkaConsumer | None = None

    def run_forever(self, stop_event: threading.Event) -> None:
        self.apply_backlog(stop_event)
        stop_event.wait()

    def apply_backlog(self, stop_event: threading.Event) -> bool:
        """Read the table topic until its backlog is applied and retire it; True once it is retired
        (False: stopped before)."""
        if self.retired():
            return True
        if not self._table_positions():
            self._retire()
            return True
        logger.info("applying the seat releases left on the table topic", extra={"topic": self._topics.table})
        self._consumer = TrackedConsumer(
            self._engine,
            self._bootstrap_servers,
            self._group_id,
            [self._topics.table],
            None,
            self._topics.dead_letter,
            batch_handler=wanted_only(self._handler, self._wants),
            clock=self._clock,
            kafka_group_id=f"{self._group_id}-table-backlog",
            idempotent_handler=True,
            **self._consumer_options,
        )
        self._offsets = reading_consumer(self._bootstrap_servers)
        table = [
            TopicPartition(self._topics.table, p)
            for p in sorted(topic_partitions(self._offsets, self._topics.table))
        ]
        seats = [
            TopicPartition(self._topics.seats, p)
            for p in sorted(topic_partitions(self._offsets, self._topics.seats))
        ]
        snapshot: dict[int, tuple[int, int]] | None = None  # partition: (first offset kept, end)
        while not stop_event.is_set():
            self._consumer.poll_once(POLL_TIMEOUT_MS)
            if self.retired():
                self.close()  # another process finished the backlog: leave the Kafka group
                return True
            if snapshot is None and any(self._offsets.end_offsets(seats).values()):
                # Taken once the seats topic is written to, so that every release before is in.
                beginnings = self._offsets.beginning_offsets(table)
                snapshot = {
                    partition.partition: (beginnings[partition], end)
                    for partition, end in self._offsets.end_offsets(table).items()
                }
            if snapshot is not None and self._caught_up(snapshot):
                self._retire()
                self.close()  # read no more: leave the Kafka group, stop reporting a stall
                logger.info("the table topic's seat releases are applied; reading only the seats topic")
                return True
        return False

    def retired(self) -> bool:
        with read_transaction(self._session_factory) as session:
            return (
                session.execute(_RETIRED, {"group": self._group_id, "topic": self._topics.table}).first()
                is not None
            )

    def _table_positions(self) -> dict[int, int]:
        with read_transaction(self._session_factory) as session:
            rows = session.execute(_POSITIONS, {"group": self._group_id, "topic": self._topics.table})
            return {row.partition: int(row.next_offset) for row in rows}

    def _caught_up(self, snapshot: Mapping[int, tuple[int, int]]) -> bool:
        """Whether the group's stored positions reached the snapshot's ends (a partition it never
        stored a position of is read from its first offset kept: caught up if that is its end)."""
        stored = self._table_positions()
        return all(stored.get(partition, first) >= end for partition, (first, end) in snapshot.items())

    def _retire(self) -> None:
        with transaction(self._session_factory) as session:
            upsert_rows(
                session,
                retired_inputs,
                [
                    {
                        "consumer_group": self._group_id,
                        "topic": self._topics.table,
                        "retired_at": self._clock(),
                    }
                ],
                key=("consumer_group", "topic"),
            )

    def stalled_seconds(self) -> float:
        """The table topic consumer's (the supervisor replaces a stuck one); 0 when not reading
        (before it starts, and once the table topic is retired: `run_forever` then only waits)."""
        consumer = self._consumer  # read once: the worker thread may close it meanwhile
        return 0.0 if consumer is None else consumer.stalled_seconds()

    def close(self) -> None:
        """Close the table topic's consumer and offsets client (none once closed: idempotent)."""
        consumer, offsets = self._consumer, self._offsets
        self._consumer = self._offsets = None  # not reading from here on (`stalled_seconds` is 0)
        try:
            if consumer is not None:
                consumer.close()
        finally:
            if offsets is not None:
                offsets.close()


def wanted_only(handler: Handler, wants: Relevance | None) -> BatchHandler:
    """A batch handler that applies the events `wants` (all: None) with `handler` and reports only
    those as applied: the consumer takes every message as a delivery, and stores every poll's
    positions."""

    def apply_batch(session: Session, deliveries: Sequence[Delivery]) -> list[Delivery]:
        applied = [delivery for delivery in deliveries if wants is None or wants(delivery.envelope)]
        for delivery in applied:
            handler(session, delivery.envelope, delivery.position)
        return applied

    return apply_batch


_RETIRED = sqlalchemy.select(retired_inputs.c.topic).where(
    retired_inputs.c.consumer_group == sqlalchemy.bindparam("group"),
    retired_inputs.c.topic == sqlalchemy.bindparam("topic"),
)
_POSITIONS = sqlalchemy.select(consumer_positions.c.partition, consumer_positions.c.next_offset).where(
    consumer_positions.c.consumer_group == sqlalchemy.bindparam("group"),
    consumer_positions.c.topic == sqlalchemy.bindparam("topic"),
)
