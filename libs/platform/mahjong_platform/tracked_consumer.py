"""A Kafka consumer that applies each event exactly once to a database projection, a batch at a time.

Kafka delivers at least once, and the outbox relay may re-send. Exactly-once *effect* comes from
the database, not from Kafka: for every poll batch, one database transaction

1. skips the events whose ids are already in `processed_events` for this consumer group (one
   query for the batch) and the repeats of an id within the batch,
2. calls the batch handler once with the remaining events, in order (it writes projection rows
   with set-based SQL), and records their ids (one multi-row insert),
3. stores each partition's next offset in `consumer_positions` (one upsert for the batch).

Kafka's committed offsets are never used (`enable_auto_commit=False`, nothing committed): on start
and on every partition assignment the consumer seeks to the positions stored in the database, or
to the beginning of a partition it has never read (from its own thread, right after the poll that
brought the assignment, never inside kafka-python's rebalance callback: see
`_SeekToStoredPositions`). A crash anywhere leaves the projection and the
positions consistent, so a batch is either fully applied once or re-read and applied once.

A message that cannot be decoded, or whose handler raises, is a poison message. An undecodable
one is dead-lettered before its batch's transaction. When the handler raises, the batch's
transaction rolls back and the batch is applied again one event per transaction, so only the
failing event is published to the dead letter topic with the error; only then is its position
stored (in a new transaction) so consumption continues past it. Publishing first means a crash in
between re-publishes the dead letter rather than losing the message; a duplicate dead letter is
harmless, a lost one is silent data loss.

A handler that skips what it applied before by its own keys (scoring: each table's event sequence
and its inbox of received events; the ledger: each instruction's idempotency key) is an
*idempotent handler* (``idempotent_handler=True``): step 1 then only drops the repeats within the
batch, and neither the look-up nor the insert of ``processed_events`` is made. Exactly once still
holds: a crash re-reads from the positions stored with the rows, and a re-sent event reaches a
handler that skips it. That is one query, one multi-row insert and one row per event less: for
scoring, which applies every table event, half the rows it wrote.

`BatchApplier` is that mechanism without Kafka: `mjctl rebuild` applies its replay through it, and
any writer that wants one transaction per batch with a one-by-one fallback can share it.

Two instances can briefly handle the same partition (one was evicted from the group but has not
noticed yet). The (group, event id) primary key of `processed_events` then fails the slower
transaction; it rolls back, and the error propagates so that instance restarts from the stored
positions. An idempotent handler's own keys do that job: the slower transaction finds the
faster one's rows (after its locks, or on a retry one event at a time) and skips them. Applied
one event at a time, an event whose handler broke a constraint is tried once more before it is
dead-lettered (`BatchApplier._apply_alone`): the other instance may have committed it meanwhile.
A poll that raises always rewinds to the stored positions first.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy
from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.structs import MemberState
from mahjong.v1 import envelope_pb2
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from sqlalchemy.orm import Session

from mahjong_platform.database import (
    PerDialect,
    SessionFactory,
    create_session_factory,
    insert_rows,
    one_of,
    transaction,
)
from mahjong_platform.driver_sql import Sql, run, timestamp
from mahjong_platform.envelopes import Clock, EnvelopeDecodeError, parse_envelope, utc_now
from mahjong_platform.errors import UnavailableError
from mahjong_platform.metrics import ConsumerMetrics, metrics_for_engine
from mahjong_platform.outbox import create_idempotent_producer
from mahjong_platform.schema import CONSUMER_GROUP_MAX_LENGTH, consumer_positions, processed_events

logger = logging.getLogger(__name__)

POLL_TIMEOUT_MS_DEFAULT = 500
MAX_POLL_RECORDS_DEFAULT = 500
"""The most records one poll hands to a batch: a whole lingering fetch (`FETCH_MIN_BYTES_LINGERING`
of table events of ~220 bytes a record is about 300). At 100 a fetch of more was applied as two
or three batches, each a transaction, a relay round and a fetch answer downstream for a handful of
events (scoring: about 85 records per fetch on average at saturation, so about half its fetches)."""
MAX_POLL_RECORDS_MAX = 10_000
LINGER_MS_MAX = 1_000
FETCH_MAX_WAIT_MS = 500
"""How long the broker holds a fetch that finds nothing new (it answers at once when something
is there): only what an idle consumer's fetch loop costs. 100 ms made each idle consumer send ten
fetches a second."""
LINGER_POLL_GRACE_PERCENT = 50
"""A lingering poll waits for its fetch's answer ``linger_ms`` and this much more (per cent of
``linger_ms``): the broker answers after ``linger_ms``, and the answer reaches the poll a little
later. A poll that gave up at ``linger_ms`` itself (as this did) ended just before nearly every
answer, so the next poll began as it landed; when it landed between that poll's read of the
buffered records and its next fetch, kafka-python 3.0 (`Fetcher.fetch_records`) dropped its
finished request from the ones the poll waits on, and the poll waited, its records buffered, for
a fetch of the other partitions: up to `FETCH_MAX_WAIT_MS`. That was scoring's 504 ms polls, about
one a run, and the settlement lag's tails over 0.5 s (a run's p99 648 ms, its slowest game's
scoring hop 631 ms)."""
FETCH_MIN_BYTES_LINGERING = 65_536
"""A lingering fetch (``linger_ms``) is answered before its wait is over once this much is there:
about 300 table events (a poll takes them all: `MAX_POLL_RECORDS_DEFAULT`), so a consumer that is
behind gets full batches at once."""
SESSION_TIMEOUT_MS_DEFAULT = 10_000
HEARTBEAT_INTERVAL_MS_DEFAULT = 1_000
METADATA_MAX_AGE_MS_DEFAULT = 30_000
TOPIC_METADATA_TIMEOUT_MS_DEFAULT = 30_000
DEAD_LETTER_PUBLISH_TIMEOUT_MS_DEFAULT = 30_000
# A dead letter carries the error text for a human; a stack-trace-sized message is plenty.
DEAD_LETTER_ERROR_MAX_CHARACTERS = 4_000
SUBSCRIBED_TOPICS_MAX = 100
BATCH_EVENTS_MAX = 10_000
"""The most events one batch transaction applies (a poll returns at most MAX_POLL_RECORDS_MAX)."""
ONE_EVENT_ATTEMPTS = 2
"""Attempts at one event whose handler broke a constraint (`BatchApplier._apply_alone`)."""


@dataclasses.dataclass(frozen=True, slots=True)
class MessagePosition:
    """Where a message sits in Kafka: its topic, partition and offset."""

    topic: str
    partition: int
    offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """One decoded event and where it was read."""

    envelope: envelope_pb2.Envelope
    position: MessagePosition


Handler = Callable[[Session, envelope_pb2.Envelope, MessagePosition], None]
"""Applies one event to the projection using the given session; raising dead-letters the message,
except `UnavailableError` (this process cannot apply it now, another may): the poll fails and the
consumer rewinds to the stored positions.

It must only write through the session (no commits, no other side effects), so a rollback undoes
everything it did.
"""

BatchHandler = Callable[[Session, Sequence[Delivery]], Sequence[Delivery] | None]
"""Applies a batch of events, in order, to the projection using the given session (set-based SQL).

The events are new to the consumer group (duplicates already removed; for an idempotent handler
only the repeats within the batch, the handler skips the rest itself). The same rules as for a
`Handler`: only write through the session. Raising rolls the batch back; the events are then
applied again one per call, and the one that still raises is dead-lettered.

An idempotent handler returns the deliveries it applied (those it skipped as applied before are
counted as duplicates and not told to the service's applied-event observers, as if the consumer
had skipped them); None means all of them.
"""

Relevance = Callable[[envelope_pb2.Envelope], bool]
"""Whether the projection applies an event at all; one that reads a few event types of a busy topic
(matchmaking wants only `GameEnded` and `PlayerLeft` of the table topic) skips the rest cheaply."""

BeforeCommitHook = Callable[[MessagePosition], None]
"""Called for each applied message after its batch is applied and the positions written, before
the commit; tests raise here to simulate a consumer killed between applying and storing offsets."""


@dataclasses.dataclass(frozen=True, slots=True)
class Assignment:
    """The partitions the group gave this member at a rebalance (possibly none), and how many
    partitions each subscribed topic has."""

    partitions: frozenset[tuple[str, int]]
    partition_counts: Mapping[str, int]


AssignmentHook = Callable[[Assignment], None]
"""Told about each new assignment on the consumer's own thread, after the poll that brought it and
before that poll's records are applied (it may use the database; the table engine claims its
partitions' tables here). Raising fails the poll: the consumer rewinds to the stored positions."""

FailureHook = Callable[[Delivery, str], None]
"""Told about an event whose handler raised even alone, with the error, before its position is
stored (the consumer publishes the dead letter here; a rebuild counts it)."""


def per_event(handler: Handler) -> BatchHandler:
    """A batch handler that calls a per-event `Handler` for each event in turn."""

    def apply_batch(session: Session, deliveries: Sequence[Delivery]) -> None:
        for delivery in deliveries:
            handler(session, delivery.envelope, delivery.position)

    return apply_batch


@dataclasses.dataclass
class BatchOutcome:
    """What a batch did: events applied, duplicates skipped, events whose handler failed."""

    applied: int = 0
    duplicates: int = 0
    failures: list[tuple[Delivery, str]] = dataclasses.field(default_factory=list)
    applied_events: list[envelope_pb2.Envelope] = dataclasses.field(default_factory=list)
    """The events applied (for the service's metrics observers, after the commit)."""

    def add(self, other: BatchOutcome) -> None:
        self.applied += other.applied
        self.duplicates += other.duplicates
        self.failures.extend(other.failures)
        self.applied_events.extend(other.applied_events)


class BatchApplier:
    """Applies batches of events exactly once for one consumer group, with their positions.

    `apply` runs the whole batch in one transaction; if the handler raises, it falls back to one
    transaction per event and reports the failing ones to `on_failure` (see the module docstring).
    Used by `TrackedConsumer` and by `mjctl rebuild`, so a rebuild takes the live code path.
    """

    def __init__(
        self,
        session_factory: SessionFactory,
        group_id: str,
        handler: BatchHandler,
        on_failure: FailureHook,
        *,
        clock: Clock = utc_now,
        before_commit: BeforeCommitHook | None = None,
        idempotent_handler: bool = False,
    ) -> None:
        if not 0 < len(group_id) <= CONSUMER_GROUP_MAX_LENGTH:
            raise ValueError(f"group id must be 1..{CONSUMER_GROUP_MAX_LENGTH} characters")
        self._idempotent_handler = idempotent_handler
        self._session_factory = session_factory
        self._group_id = group_id
        self._handler = handler
        self._on_failure = on_failure
        self._clock = clock
        self._before_commit = before_commit

    def apply(self, deliveries: Sequence[Delivery], positions: Sequence[MessagePosition]) -> BatchOutcome:
        """Apply `deliveries` once each and store `positions` (every message read, applied or not).

        `positions` includes those of the deliveries; messages left out of `deliveries` (not
        wanted, undecodable and already dead-lettered) are only marked as read.
        """
        assert len(deliveries) <= BATCH_EVENTS_MAX, len(deliveries)
        if not deliveries:
            self._store_positions_alone(positions)
            return BatchOutcome()
        try:
            with transaction(self._session_factory) as session:
                outcome = self._apply_in(session, deliveries)
                self._store_positions(session, positions)
                self._call_before_commit(deliveries)
            return outcome
        except _HandlerFailedError:
            if len(deliveries) == 1 and len(positions) == 1:
                return self._apply_one_by_one(deliveries)
            logger.info(
                "batch failed in the handler: applying it one event at a time",
                extra={"group_id": self._group_id, "events": len(deliveries)},
            )
        outcome = self._apply_one_by_one(deliveries)
        self._store_positions_alone(positions)
        return outcome

    def _apply_one_by_one(self, deliveries: Sequence[Delivery]) -> BatchOutcome:
        outcome = BatchOutcome()
        for delivery in deliveries:
            try:
                outcome.add(self._apply_alone(delivery))
            except _HandlerFailedError as failure:
                self._on_failure(delivery, failure.description)
                self._store_positions_alone([delivery.position])
                outcome.failures.append((delivery, failure.description))
        return outcome

    def _apply_alone(self, delivery: Delivery) -> BatchOutcome:
        """One event in its own transaction; a constraint violation is tried once more.

        Another consumer of the group may be applying the same event right now (one evicted
        from the group that has not noticed yet, and the partition's new owner): this transaction
        read an idempotent handler's own keys before the other one committed, so its insert
        waited for the other's row and fails on the key once that commits. That is no poison
        message: the second attempt reads the keys again and skips the event as applied. (A race
        on `processed_events`' own key is not retried here: `_record_processed` fails outside the
        handler's errors, and the consumer goes back to its stored positions, as before.) A
        message that breaks a constraint by itself fails twice and is dead-lettered. Each attempt
        is a whole transaction, rolled back when it fails, so nothing is applied twice."""
        for attempt in range(1, ONE_EVENT_ATTEMPTS + 1):
            try:
                with transaction(self._session_factory) as session:
                    outcome = self._apply_in(session, [delivery])
                    self._store_positions(session, [delivery.position])
                    self._call_before_commit([delivery])
                return outcome
            except _HandlerFailedError as failure:
                if attempt == ONE_EVENT_ATTEMPTS or not isinstance(failure.__cause__, IntegrityError):
                    raise
                logger.info(
                    "an event broke a constraint: trying it once more (another consumer may have applied it)",
                    extra={"group_id": self._group_id, "event_id": delivery.envelope.event_id},
                )
        raise AssertionError("unreachable")

    def _apply_in(self, session: Session, deliveries: Sequence[Delivery]) -> BatchOutcome:
        seen: set[str] = (
            set()
            if self._idempotent_handler
            else self._already_processed(session, {delivery.envelope.event_id for delivery in deliveries})
        )
        fresh: list[Delivery] = []
        for delivery in deliveries:
            if delivery.envelope.event_id in seen:
                continue
            seen.add(delivery.envelope.event_id)
            fresh.append(delivery)
        duplicates = len(deliveries) - len(fresh)
        if duplicates:
            logger.info(
                "skipped already processed events",
                extra={"group_id": self._group_id, "duplicates": duplicates},
            )
        if not fresh:
            return BatchOutcome(duplicates=duplicates)
        try:
            applied = self._handler(session, fresh)
            # Flush inside the try, so a constraint the handler's rows violate counts as its failure.
            session.flush()
        except (OperationalError, InterfaceError, UnavailableError):
            # The database is unreachable, or this process may not apply the event now (a table
            # engine replica whose partition was taken over): not a poison message. The batch
            # fails, nothing is stored, and whoever may apply it reads it again.
            raise
        except Exception as error:
            raise _HandlerFailedError(f"handler failed: {type(error).__name__}: {error}") from error
        if not self._idempotent_handler:
            self._record_processed(session, fresh)
        applied = fresh if applied is None else applied
        return BatchOutcome(
            applied=len(applied),
            duplicates=duplicates + len(fresh) - len(applied),
            applied_events=[delivery.envelope for delivery in applied],
        )

    def _record_processed(self, session: Session, fresh: Sequence[Delivery]) -> None:
        processed_at = self._clock()
        insert_rows(
            session,
            processed_events,
            [
                {
                    "consumer_group": self._group_id,
                    "event_id": delivery.envelope.event_id,
                    "processed_at": processed_at,
                }
                for delivery in fresh
            ],
        )

    def _already_processed(self, session: Session, event_ids: set[str]) -> set[str]:
        rows = session.execute(
            _ALREADY_PROCESSED(session), {"consumer_group": self._group_id, "event_ids": sorted(event_ids)}
        )
        return {row.event_id for row in rows}

    def _call_before_commit(self, deliveries: Sequence[Delivery]) -> None:
        if self._before_commit is not None:
            for delivery in deliveries:
                self._before_commit(delivery.position)

    def _store_positions_alone(self, positions: Sequence[MessagePosition]) -> None:
        if positions:
            with transaction(self._session_factory) as session:
                self._store_positions(session, positions)

    def _store_positions(self, session: Session, positions: Iterable[MessagePosition]) -> None:
        next_offsets: dict[tuple[str, int], int] = {}
        for position in positions:
            key = (position.topic, position.partition)
            next_offsets[key] = max(next_offsets.get(key, 0), position.offset + 1)
        if not next_offsets:
            return
        # In (topic, partition) order: two writers of overlapping partitions lock rows in one order.
        ordered = sorted(next_offsets.items())
        # One statement on the driver's cursor (`driver_sql`), on both databases: the upsert through
        # `Session.execute` (an executemany stepping once per row) cost about 300 us of CPU per
        # batch on SQLite, a tenth of a small batch, in every consumer of every service.
        connection = session.connection()
        when = timestamp(connection, self._clock())
        run(
            connection,
            _upsert_positions(len(ordered)),
            [
                value
                for (topic, partition), next_offset in ordered
                for value in (self._group_id, topic, partition, next_offset, when)
            ],
        )


class TrackedConsumer:
    """Consumes `topics` as consumer group `group_id`, applying each event once.

    Give `handler` (one event at a time, all in the poll batch's one transaction) or
    `batch_handler` (the whole poll batch in one call, for set-based SQL); `idempotent_handler`
    for one that skips re-sent events by its own keys (see the module docstring).
    Single-threaded: call `poll_once` or `run_forever` from one thread. Scale out by running
    more instances with the same group id (Kafka spreads the partitions).
    """

    def __init__(
        self,
        engine: Engine,
        bootstrap_servers: str | list[str],
        group_id: str,
        topics: Sequence[str],
        handler: Handler | None,
        dead_letter_topic: str,
        *,
        batch_handler: BatchHandler | None = None,
        max_poll_records: int = MAX_POLL_RECORDS_DEFAULT,
        session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT,
        heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS_DEFAULT,
        metadata_max_age_ms: int = METADATA_MAX_AGE_MS_DEFAULT,
        topic_metadata_timeout_ms: int = TOPIC_METADATA_TIMEOUT_MS_DEFAULT,
        dead_letter_publish_timeout_ms: int = DEAD_LETTER_PUBLISH_TIMEOUT_MS_DEFAULT,
        clock: Clock = utc_now,
        before_commit: BeforeCommitHook | None = None,
        wants: Relevance | None = None,
        on_assignment: AssignmentHook | None = None,
        linger_ms: int = 0,
        idempotent_handler: bool = False,
        kafka_group_id: str | None = None,
    ) -> None:
        if not 0 < len(group_id) <= CONSUMER_GROUP_MAX_LENGTH:
            raise ValueError(f"group id must be 1..{CONSUMER_GROUP_MAX_LENGTH} characters")
        if not 0 < len(topics) <= SUBSCRIBED_TOPICS_MAX:
            raise ValueError(f"subscribe to 1..{SUBSCRIBED_TOPICS_MAX} topics")
        if dead_letter_topic in topics:
            raise ValueError("a consumer must not consume its own dead letter topic")
        if (handler is None) == (batch_handler is None):
            raise ValueError("give exactly one of handler and batch_handler")
        assert 1 <= max_poll_records <= MAX_POLL_RECORDS_MAX, max_poll_records
        assert 0 < heartbeat_interval_ms < session_timeout_ms, (heartbeat_interval_ms, session_timeout_ms)
        assert metadata_max_age_ms > 0, metadata_max_age_ms
        assert 0 <= linger_ms <= LINGER_MS_MAX, linger_ms
        self._linger_ms = linger_ms
        self._lingering = False  # the last poll brought records: the next fetch waits for more
        self._engine = engine
        self._session_factory = create_session_factory(engine)
        self._group_id = group_id
        self._dead_letter_topic = dead_letter_topic
        self._max_poll_records = max_poll_records
        self._dead_letter_publish_timeout_ms = dead_letter_publish_timeout_ms
        self._clock = clock
        self._wants = wants
        self._on_assignment = on_assignment
        self._topics = tuple(topics)
        self._applier = BatchApplier(
            self._session_factory,
            group_id,
            batch_handler if batch_handler is not None else per_event(handler),  # type: ignore[arg-type]
            self._dead_letter_failed,
            clock=clock,
            before_commit=before_commit,
            idempotent_handler=idempotent_handler,
        )
        self._records_by_position: dict[MessagePosition, Any] = {}
        self._metrics = ConsumerMetrics(metrics_for_engine(engine), group_id)
        self._consumer = KafkaConsumer(
            bootstrap_servers=bootstrap_servers,
            # The Kafka group only shares out the partitions; positions and processed ids are
            # `group_id`'s in the database. Two consumers of different topics may share those (one
            # projection) without sharing a Kafka group, whose leader assigns only the topics it
            # subscribed to itself (kafka-python): a mixed group can leave a topic unassigned.
            group_id=kafka_group_id or group_id,
            client_id=f"mahjong-consumer-{kafka_group_id or group_id}",
            enable_auto_commit=False,
            # Only used if a seek is somehow missed; the stored positions decide where to read.
            auto_offset_reset="earliest",
            max_poll_records=max_poll_records,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            # A topic or partition the broker had not yet announced when the group formed is picked
            # up (by a rejoin) at the next metadata refresh, so keep the refresh interval short.
            metadata_max_age_ms=metadata_max_age_ms,
            fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
            fetch_min_bytes=1,
            # Nothing reads kafka-python's own sensors (the lag gauge comes from `highwater`), and
            # recording them was a few per cent of a consumer process's work on every fetch.
            metrics_enabled=False,
        )
        # The fetcher reads these two for every fetch it sends, on this thread (`poll` sends the
        # next fetch while it hands out the records of the last one): `_fetch_as` sets them.
        self._fetch_settings: dict[str, Any] = self._consumer._fetcher.config
        assert {"fetch_min_bytes", "fetch_max_wait_ms"} <= self._fetch_settings.keys()
        self._dead_letter_producer = create_idempotent_producer(
            bootstrap_servers,
            client_id=f"mahjong-dead-letters-{group_id}",
            delivery_timeout_ms=dead_letter_publish_timeout_ms,
        )
        self._wait_until_topics_are_known(topics, topic_metadata_timeout_ms)
        # Assigned partitions not yet seeked to their stored positions (see _SeekToStoredPositions).
        self._unseeked: set[TopicPartition] = set()
        self._unseeked_lock = threading.Lock()
        self._new_assignment: frozenset[TopicPartition] | None = None  # for `on_assignment`
        self._consumer.subscribe(list(topics), listener=_SeekToStoredPositions(self))
        self._last_progress = time.monotonic()

    def _wait_until_topics_are_known(self, topics: Sequence[str], timeout_ms: int) -> None:
        """Block until the client's metadata lists every topic's partitions.

        Joining the group before that makes the group leader assign nothing for a topic it has no
        partitions for, and kafka-python may not rejoin for a long time after that. A topic that
        never shows up is a deployment error (run `ensure_topics` first), reported here.
        """
        deadline = time.monotonic() + timeout_ms / 1000
        for topic in topics:
            while not self._consumer.partitions_for_topic(topic):
                if time.monotonic() > deadline:
                    self.close()
                    raise UnknownTopicError(f"topic {topic!r} has no partitions after {timeout_ms} ms")
                time.sleep(0.1)

    def poll_once(self, timeout_ms: int = POLL_TIMEOUT_MS_DEFAULT) -> int:
        """Fetch and handle at most one batch of messages; return how many were handled.

        Handled = applied, skipped as an already processed duplicate or unwanted, or
        dead-lettered. If anything else fails (database down, dead letter topic unreachable, the
        test hook), the consumer rewinds to the stored positions before raising, so a caller that
        keeps polling re-reads the unfinished messages instead of skipping them.
        """
        assert 0 <= timeout_ms <= 60_000, timeout_ms
        self._finish_a_dropped_join()
        lingering = self._lingering
        self._fetch_as(lingering=lingering)
        if lingering:
            # Not much longer than the fetch's wait (`LINGER_POLL_GRACE_PERCENT`): kafka-python's
            # poll sends another fetch (held as long) when one comes back empty before the poll's
            # timeout, and an empty answer means the burst is over: the next poll fetches as an
            # idle consumer. A late answer is not lost, the next poll takes it.
            timeout_ms = min(timeout_ms, self._linger_ms * (100 + LINGER_POLL_GRACE_PERCENT) // 100)
        batches = self._consumer.poll(timeout_ms=timeout_ms, max_records=self._max_poll_records)
        self._lingering = bool(batches) and self._linger_ms > 0
        unseeked = self._take_unseeked()
        if unseeked:
            # Records of a partition fetched before its seek start where Kafka's reset put them,
            # not at the stored position: drop them; the seek makes the next polls read from there.
            batches = {partition: batch for partition, batch in batches.items() if partition not in unseeked}
            try:
                self._seek_to_stored_positions(unseeked & set(self._consumer.assignment()))
            except BaseException:
                self._note_unseeked(unseeked)
                raise
        records = [record for partition_records in batches.values() for record in partition_records]
        try:
            self._tell_assignment()
            self._handle_batch(records)
        except BaseException:
            try:
                self._seek_to_stored_positions(self._consumer.assignment())
            except Exception:
                logger.exception("rewinding to the stored positions failed: close this consumer")
            raise
        finally:
            self._records_by_position.clear()
        self._metrics.polled(self._consumer, batches)
        self._last_progress = time.monotonic()
        return len(records)

    def _fetch_as(self, *, lingering: bool) -> None:
        """``linger_ms``, at the broker: after a poll that brought records, the next fetch asks the
        broker to hold it until ``linger_ms`` passed (or `FETCH_MIN_BYTES_LINGERING` are there), so
        one fetch brings what arrived meanwhile; after an empty poll, a fetch is answered as soon as
        anything is there (held at most `FETCH_MAX_WAIT_MS` when nothing is), so the first event
        after a quiet spell is applied at once.

        Most of a batch's cost is per batch (its transaction, about ten statements, an outbox
        relay round, a fetch), not per event, and the table writes its events a few at a time: a
        consumer that applied each fetch at once paid that cost for one or two events. The wait
        was a sleep after the poll and a second poll for what had come meanwhile: two fetches per
        batch, each a round of hand-offs between this thread and kafka-python's network thread,
        and every batch started by waiting the whole ``linger_ms``. The fetch that waits is sent
        while this thread applies the batch before it, so a batch that takes longer than
        ``linger_ms`` to apply leaves no wait at all."""
        settings = self._fetch_settings
        if lingering:
            settings["fetch_max_wait_ms"] = self._linger_ms
            settings["fetch_min_bytes"] = FETCH_MIN_BYTES_LINGERING
        else:
            settings["fetch_min_bytes"] = 1
            settings["fetch_max_wait_ms"] = FETCH_MAX_WAIT_MS

    def _handle_batch(self, records: Sequence[Any]) -> None:
        deliveries: list[Delivery] = []
        positions: list[MessagePosition] = []
        dead_lettered = False
        for record in records:
            position = MessagePosition(topic=record.topic, partition=record.partition, offset=record.offset)
            positions.append(position)
            try:
                envelope = parse_envelope(record.value or b"")
            except EnvelopeDecodeError as error:
                # Published before the batch stores its position (see the module docstring).
                self._dead_letter(record, position, f"undecodable envelope: {error}")
                dead_lettered = True
                continue
            if self._wants is not None and not self._wants(envelope):
                continue
            self._records_by_position[position] = record
            deliveries.append(Delivery(envelope, position))
        if not deliveries and not dead_lettered:
            # Nothing the projection wants: no transaction. The positions are stored with the next
            # wanted event of the partition, and after a restart these are read (and ignored) again.
            return
        outcome = self._applier.apply(deliveries, positions)
        self._metrics.handled(outcome.applied, outcome.duplicates)
        for envelope in outcome.applied_events:
            self._metrics.applied_event(envelope)

    def stalled_seconds(self) -> float:
        """Seconds since a poll last returned (the service's supervisor restarts a stuck consumer)."""
        return time.monotonic() - self._last_progress

    def run_forever(
        self, stop_event: threading.Event, poll_timeout_ms: int = POLL_TIMEOUT_MS_DEFAULT
    ) -> None:
        """Poll until `stop_event` is set. An unexpected error propagates (crash, restart, resume)."""
        while not stop_event.is_set():
            self.poll_once(poll_timeout_ms)

    def close(self) -> None:
        """Leave the consumer group and close the Kafka clients. Commits nothing to Kafka."""
        self._metrics.forget_all()
        try:
            self._consumer.close(autocommit=False)
        finally:
            self._dead_letter_producer.close(timeout=self._dead_letter_publish_timeout_ms / 1000)

    def __enter__(self) -> TrackedConsumer:
        return self

    def __exit__(self, *_exception_info: object) -> None:
        self.close()

    def stored_positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The next offset stored for each given partition this group has read before."""
        wanted = set(partitions)
        if not wanted:
            return {}
        query = sqlalchemy.select(
            consumer_positions.c.topic, consumer_positions.c.partition, consumer_positions.c.next_offset
        ).where(
            consumer_positions.c.consumer_group == self._group_id,
            consumer_positions.c.topic.in_({partition.topic for partition in wanted}),
        )
        with transaction(self._session_factory) as session:
            rows = session.execute(query).all()
        positions = {TopicPartition(row.topic, row.partition): int(row.next_offset) for row in rows}
        return {partition: offset for partition, offset in positions.items() if partition in wanted}

    def _seek_to_stored_positions(self, partitions: Iterable[TopicPartition]) -> None:
        partitions = set(partitions)
        stored = self.stored_positions(partitions)
        never_read = [partition for partition in partitions if partition not in stored]
        for partition, offset in stored.items():
            self._consumer.seek(partition, offset)
        if never_read:
            self._consumer.seek_to_beginning(*never_read)
        self._metrics.positions_reset({**stored, **dict.fromkeys(never_read, 0)})
        logger.info(
            "seeked to stored positions",
            extra={"group_id": self._group_id, "stored": len(stored), "from_beginning": len(never_read)},
        )

    def _finish_a_dropped_join(self) -> None:
        """Work around two kafka-python 3.0.12 bugs that drop a rebalance, called before each poll.

        kafka-python runs a join (JoinGroup, then SyncGroup) as a task on its network thread; a
        poll that times out first leaves the task running, heartbeats off, and the next poll's
        ``join_group_async`` waits for it again. Its result is only applied there (the member set
        stable, heartbeats back on, the assignment handed to the rebalance listener), and two
        cases never get there:

        1. The join finished between two polls: whenever the last member to join the rebalance
           sends its JoinGroup while this consumer is not polling (applying a batch, or another
           consumer polling on this thread), that completes ours. ``join_group_async`` takes the
           finished task for a stale one and sends a new JoinGroup, dropping the answer. A
           follower is answered its generation again, but a leader's JoinGroup starts another
           rebalance, which the others finish when they join again, between its polls once more:
           the leader can loop like this for good, never told its share (in CI, for 120 s, the
           first member of test_consumer_assignment_hook; on a loaded 2-core box 3 runs of that
           test in 150 looped through 41 to 69 rebalances before they got out). So a join that
           finished is applied here, as ``join_group_async`` would have (Java's client does so).
        2. The group leader starts a second rebalance at once when its first assignment saw no
           partitions yet (its metadata snapshot differs from the assignment's). When that join
           outlives the poll, the leader's new assignment snapshot makes `need_rejoin()` False,
           so no poll enters ``join_group_async`` again: the broker evicts the member one session
           timeout later while every poll returns nothing (the "consumer that joins, gets its
           assignment and stops heartbeating"). Asking for a rejoin makes the poll wait for it.
        """
        coordinator = getattr(self._consumer, "_coordinator", None)
        if coordinator is None or not coordinator.rebalance_in_progress():
            return
        join = coordinator._join_task
        if join is not None and join.succeeded():
            logger.info("applying a group join that finished between polls (kafka-python would drop it)")
            coordinator._net.run(_apply_finished_join, coordinator, join)
        elif not coordinator.need_rejoin():
            logger.info("rejoining: kafka-python would drop the rebalance in progress")
            coordinator.request_rejoin()

    def _note_unseeked(self, partitions: Iterable[TopicPartition]) -> None:
        """Called on kafka-python's network thread: no I/O here (see _SeekToStoredPositions)."""
        with self._unseeked_lock:
            self._unseeked.update(partitions)

    def _forget_unseeked(self, partitions: Iterable[TopicPartition]) -> None:
        with self._unseeked_lock:
            self._unseeked.difference_update(partitions)

    def _take_unseeked(self) -> set[TopicPartition]:
        with self._unseeked_lock:
            unseeked, self._unseeked = self._unseeked, set()
        return unseeked

    def _tell_assignment(self) -> None:
        """Hand the assignment the last rebalance made (if any, and not yet told) to `on_assignment`."""
        if self._on_assignment is None:
            return
        with self._unseeked_lock:
            assigned, self._new_assignment = self._new_assignment, None
        if assigned is None:
            return
        try:
            counts = {topic: len(self._consumer.partitions_for_topic(topic) or ()) for topic in self._topics}
            self._on_assignment(Assignment(frozenset((tp.topic, tp.partition) for tp in assigned), counts))
        except BaseException:
            with self._unseeked_lock:  # told again after the rewind, unless a newer one came
                if self._new_assignment is None:
                    self._new_assignment = assigned
            raise

    def _dead_letter_failed(self, delivery: Delivery, error: str) -> None:
        self._dead_letter(self._records_by_position[delivery.position], delivery.position, error)

    def _dead_letter(self, record: Any, position: MessagePosition, error: str) -> None:
        """Publish the dead letter and wait for the broker's ack (the caller stores the position)."""
        failed_at: datetime.datetime = self._clock()
        dead_letter = envelope_pb2.DeadLetter(
            topic=position.topic,
            partition=position.partition,
            offset=position.offset,
            key=record.key or b"",
            value=record.value or b"",
            error=error[:DEAD_LETTER_ERROR_MAX_CHARACTERS],
            consumer_group=self._group_id,
        )
        dead_letter.failed_at.FromDatetime(failed_at)
        future = self._dead_letter_producer.send(
            self._dead_letter_topic, key=record.key, value=dead_letter.SerializeToString()
        )
        future.get(timeout=self._dead_letter_publish_timeout_ms / 1000)
        self._metrics.dead_lettered()
        logger.warning(
            "dead-lettered message",
            extra={
                "group_id": self._group_id,
                "topic": position.topic,
                "partition": position.partition,
                "offset": position.offset,
                "error": error[:200],
            },
        )


# Statements built once: building and caching one per batch costs more than running it.
_ALREADY_PROCESSED = PerDialect(
    lambda dialect_name: sqlalchemy.select(processed_events.c.event_id).where(
        processed_events.c.consumer_group == sqlalchemy.bindparam("consumer_group"),
        one_of(processed_events.c.event_id, "event_ids", dialect_name),
    )
)


@functools.lru_cache(maxsize=64)
def _upsert_positions(count: int) -> Sql:
    """Insert `count` consumer positions, or overwrite the stored ones, in one statement (PostgreSQL
    and SQLite share the syntax; the keys are distinct: one row per partition)."""
    values = ", ".join(["(?, ?, ?, ?, ?)"] * count)
    return Sql.of(
        "INSERT INTO consumer_positions (consumer_group, topic, partition, next_offset, updated_at) "
        f"VALUES {values} ON CONFLICT (consumer_group, topic, partition) DO UPDATE SET "
        "next_offset = excluded.next_offset, updated_at = excluded.updated_at"
    )


async def _apply_finished_join(coordinator: Any, join: Any) -> None:
    """What kafka-python 3.0.12's ``BaseCoordinator.join_group_async`` does once its join task has
    succeeded, for a task it would drop (`TrackedConsumer._finish_a_dropped_join`); run on the
    client's network thread, as that method is."""
    if coordinator._join_task is not join or not coordinator.rebalance_in_progress():
        return  # taken or reset meanwhile: the next poll joins as kafka-python decides
    coordinator._join_task = None
    with coordinator._lock:
        coordinator.rejoining = False
        coordinator.rejoin_needed = False
        coordinator.state = MemberState.STABLE
        coordinator._enable_heartbeat()
    generation = coordinator._generation
    await coordinator._on_join_complete_async(
        generation.generation_id, generation.member_id, generation.protocol, join.value
    )


class UnknownTopicError(LookupError):
    """A subscribed topic does not exist (or the broker has not announced it yet)."""


class _HandlerFailedError(Exception):
    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


class _SeekToStoredPositions(ConsumerRebalanceListener):  # type: ignore[misc]
    """Notes the partitions assigned to this member; the consumer's own thread seeks them to the
    stored positions after the poll that assigned them (`TrackedConsumer.poll_once`).

    It must not do the seek itself: kafka-python 3 runs a synchronous rebalance listener on its
    network thread, the thread that also sends the group heartbeats and completes every request of
    the client. A listener that waits (a database read queued behind this process's SQLite writers
    or for a PostgreSQL pool connection) stops the heartbeats, so the broker evicts the member after
    ``session_timeout_ms``, and ``poll()`` does not return until the listener does: the "consumer
    that joins, gets its assignment and stops heartbeating" once seen in CI. Reproduced by holding
    the database's writer lock during a join: py-spy showed the ``kafka-io-...`` thread waiting in
    ``transaction()`` under ``on_partitions_assigned`` and the user thread in ``poll()``, and the
    broker logged "Member ... has failed, removing it from the group" one session timeout later.
    So this listener only touches a set under a lock.
    """

    def __init__(self, tracked_consumer: TrackedConsumer) -> None:
        self._tracked_consumer = tracked_consumer

    def on_partitions_revoked(self, revoked: Any) -> None:
        # Nothing to save: every position is stored in the same transaction as its message.
        self._tracked_consumer._metrics.forget(revoked)  # in memory only
        self._tracked_consumer._forget_unseeked(revoked)

    def on_partitions_assigned(self, assigned: Any) -> None:
        self._tracked_consumer._note_unseeked(assigned)
        with self._tracked_consumer._unseeked_lock:
            self._tracked_consumer._new_assignment = frozenset(assigned)
