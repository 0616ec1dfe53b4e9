"""Dead letters: read what consumers could not apply, and re-drive one, exactly once, after a fix.

A tracked consumer that cannot decode a message or whose handler raises publishes a `DeadLetter`
to ``mahjong.dlq.v1`` (the original topic, partition, offset, key and value, the error, the
consumer group, the time) and moves on. An entry is named by its place on the dead letter topic,
``<partition>:<offset>``.

`redrive` applies one entry's event to the consumer group it came from, in that group's service
database, through the group's own handler, in one transaction that also

- skips the event when the group has applied it meanwhile (its id in `processed_events`: the
  same guard the consumer uses, so a re-drive and a live re-delivery never both apply it; a
  group whose consumer has an idempotent handler, scoring's and the ledger's, records no ids: its
  handler's own keys skip such an event and say so, `RedriveHandler`),
- records the event id as processed (so a later re-delivery of the original is skipped), and
- records the entry in `dead_letter_redrives` (primary key: the entry's dead letter topic,
  partition and offset), so re-driving the same entry again changes nothing and says when it
  was re-driven, even after retention has pruned the processed id.

Two re-drives of one entry at once: one commits, the other fails on the primary key, rolls back
and answers what the first recorded; the group's consumer applying the event meanwhile is the
same (the re-drive answers already_applied).
A handler that still raises rolls everything back and records nothing: fix it and re-drive again.
Nothing goes through Kafka, so no other consumer group sees the event a second time.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final, Literal

import sqlalchemy
from kafka import TopicPartition
from mahjong.v1 import envelope_pb2
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mahjong_platform.database import create_session_factory, transaction
from mahjong_platform.envelopes import Clock, EnvelopeDecodeError, as_utc, parse_envelope, utc_now
from mahjong_platform.schema import dead_letter_redrives, processed_events
from mahjong_platform.topic_reading import reading_consumer
from mahjong_platform.tracked_consumer import MessagePosition

READ_TIMEOUT_SECONDS: Final = 30.0

RedriveHandler = Callable[[Session, envelope_pb2.Envelope, MessagePosition], bool | None]
"""A consumer group's handler for one event (`tracked_consumer.Handler`); an idempotent one returns
False when its own keys found the event applied before (nothing written), else None or True."""

Outcome = Literal["applied", "already_applied", "not_wanted"]


@dataclasses.dataclass(frozen=True)
class DeadLetterEntry:
    """One message on the dead letter topic, decoded as far as it decodes."""

    dlq_topic: str
    dlq_partition: int
    dlq_offset: int
    dead_letter: envelope_pb2.DeadLetter
    envelope: envelope_pb2.Envelope | None
    """The dead-lettered event; None when its bytes are not an envelope (nothing to re-drive)."""

    @property
    def entry_id(self) -> str:
        return f"{self.dlq_partition}:{self.dlq_offset}"

    @property
    def event_id(self) -> str:
        return "" if self.envelope is None else self.envelope.event_id

    @property
    def event_type(self) -> str:
        payload = None if self.envelope is None else self.envelope.WhichOneof("payload")
        return payload or ""

    @property
    def source(self) -> MessagePosition:
        """Where the consumer read the message it could not apply."""
        letter = self.dead_letter
        return MessagePosition(letter.topic, letter.partition, letter.offset)

    @property
    def failed_at(self) -> datetime.datetime:
        return self.dead_letter.failed_at.ToDatetime(tzinfo=datetime.UTC)


@dataclasses.dataclass(frozen=True)
class Redrive:
    """A recorded re-drive of one entry."""

    outcome: str
    redriven_at: datetime.datetime
    newly: bool
    """True when this call re-drove it; False when it had been re-driven before (nothing changed)."""


class RedriveError(Exception):
    """The entry cannot be re-driven (undecodable, or the handler still fails); nothing changed."""


def parse_entry_id(text: str) -> tuple[int, int]:
    """``"<partition>:<offset>"`` -> (partition, offset); ValueError for anything else."""
    partition, separator, offset = text.partition(":")
    if not separator or not partition.isdigit() or not offset.isdigit():
        raise ValueError(f"a dead letter id is <partition>:<offset> (see `mjctl dlq list`), got {text!r}")
    return int(partition), int(offset)


def decode_entry(topic: str, partition: int, offset: int, value: bytes) -> DeadLetterEntry:
    """A dead letter topic message as an entry (a message that is not a DeadLetter raises)."""
    dead_letter = envelope_pb2.DeadLetter()
    dead_letter.ParseFromString(value)
    try:
        envelope: envelope_pb2.Envelope | None = parse_envelope(dead_letter.value)
    except EnvelopeDecodeError:
        envelope = None
    return DeadLetterEntry(topic, partition, offset, dead_letter, envelope)


def read_dead_letters(
    bootstrap_servers: Sequence[str],
    topic: str,
    *,
    only: Iterable[tuple[int, int]] | None = None,
    timeout_seconds: float = READ_TIMEOUT_SECONDS,
) -> list[DeadLetterEntry]:
    """Every entry on the dead letter topic (or only the given (partition, offset) ones), in
    partition and offset order. Reads each partition from its start to its end as of the call.
    `timeout_seconds` bounds reaching the broker (a broker that does not answer raises
    kafka-python's `KafkaTimeoutError` after it, not after the client's own 30 s) and, counted from
    the call, the reading of the records (`TimeoutError`); the metadata and offset requests between
    keep kafka-python's request timeout."""
    wanted = None if only is None else set(only)
    deadline = time.monotonic() + timeout_seconds
    consumer = reading_consumer(bootstrap_servers, bootstrap_timeout_seconds=timeout_seconds)
    try:
        partition_numbers = consumer.partitions_for_topic(topic) or set()
        if wanted is not None:
            partition_numbers = partition_numbers & {partition for partition, _ in wanted}
        partitions = [TopicPartition(topic, number) for number in sorted(partition_numbers)]
        if not partitions:
            return []
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        starts = consumer.beginning_offsets(partitions)
        for partition in partitions:
            first = starts[partition]
            if wanted is not None:
                offsets = [offset for number, offset in wanted if number == partition.partition]
                first = max(first, min(offsets))
            consumer.seek(partition, first)
        entries: list[DeadLetterEntry] = []
        remaining = {partition for partition in partitions if consumer.position(partition) < ends[partition]}
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} did not reach its end in {timeout_seconds:.0f} s")
            for partition, records in consumer.poll(timeout_ms=500).items():
                for record in records:
                    if record.offset < ends[partition] and (
                        wanted is None or (partition.partition, record.offset) in wanted
                    ):
                        entries.append(decode_entry(topic, partition.partition, record.offset, record.value))
            remaining = {part for part in remaining if consumer.position(part) < ends[part]}
        return sorted(entries, key=lambda entry: (entry.dlq_partition, entry.dlq_offset))
    finally:
        consumer.close()


def redrives_recorded(engine: Engine, entries: Sequence[DeadLetterEntry]) -> dict[tuple[int, int], Redrive]:
    """Which of ``entries`` this service's database has recorded as re-driven, by (partition, offset)."""
    if not entries:
        return {}
    query = sqlalchemy.select(dead_letter_redrives).where(
        dead_letter_redrives.c.dlq_topic.in_({entry.dlq_topic for entry in entries})
    )
    wanted = {(entry.dlq_topic, entry.dlq_partition, entry.dlq_offset) for entry in entries}
    with transaction(create_session_factory(engine)) as session:
        rows = session.execute(query).all()
    return {
        (row.dlq_partition, row.dlq_offset): Redrive(row.outcome, as_utc(row.redriven_at), newly=False)
        for row in rows
        if (row.dlq_topic, row.dlq_partition, row.dlq_offset) in wanted
    }


def redrive(
    engine: Engine,
    entry: DeadLetterEntry,
    handler: RedriveHandler,
    *,
    wants: Callable[[envelope_pb2.Envelope], bool] | None = None,
    clock: Clock = utc_now,
) -> Redrive:
    """Apply ``entry``'s event once to its consumer group in ``engine``'s database (module docstring).

    ``handler`` and ``wants`` are the group's own, as its service runs them. Raises `RedriveError`
    when the event cannot be applied; then nothing was written.
    """
    envelope = entry.envelope
    if envelope is None:
        raise RedriveError(
            f"dead letter {entry.entry_id} holds no decodable event ({entry.dead_letter.error}); "
            "there is nothing to re-drive"
        )
    group = entry.dead_letter.consumer_group
    session_factory = create_session_factory(engine)
    for attempt in range(2):
        try:
            with transaction(session_factory) as session:
                recorded = _recorded(session, entry)
                if recorded is not None:
                    return recorded
                outcome = _apply_once(session, group, envelope, entry.source, handler, wants, clock)
                redriven_at = clock()
                session.execute(
                    dead_letter_redrives.insert().values(
                        dlq_topic=entry.dlq_topic,
                        dlq_partition=entry.dlq_partition,
                        dlq_offset=entry.dlq_offset,
                        consumer_group=group,
                        event_id=envelope.event_id,
                        outcome=outcome,
                        redriven_at=redriven_at,
                    )
                )
            return Redrive(outcome, redriven_at, newly=True)
        except IntegrityError:
            # Another re-drive of the same entry committed first, or the group's consumer applied
            # the event meanwhile (its processed id): all was rolled back; the second attempt finds
            # the re-drive recorded, or the event applied (already_applied, recorded).
            if attempt > 0:
                raise
    raise AssertionError("unreachable")


def _recorded(session: Session, entry: DeadLetterEntry) -> Redrive | None:
    row = session.execute(
        sqlalchemy.select(dead_letter_redrives.c.outcome, dead_letter_redrives.c.redriven_at).where(
            dead_letter_redrives.c.dlq_topic == entry.dlq_topic,
            dead_letter_redrives.c.dlq_partition == entry.dlq_partition,
            dead_letter_redrives.c.dlq_offset == entry.dlq_offset,
        )
    ).first()
    return None if row is None else Redrive(row.outcome, as_utc(row.redriven_at), newly=False)


def _apply_once(
    session: Session,
    group: str,
    envelope: envelope_pb2.Envelope,
    source: MessagePosition,
    handler: RedriveHandler,
    wants: Callable[[envelope_pb2.Envelope], bool] | None,
    clock: Clock,
) -> Outcome:
    already = session.execute(
        sqlalchemy.select(processed_events.c.event_id).where(
            processed_events.c.consumer_group == group, processed_events.c.event_id == envelope.event_id
        )
    ).first()
    if already is not None:
        return "already_applied"
    if wants is not None and not wants(envelope):
        return "not_wanted"
    try:
        with session.begin_nested():
            applied = handler(session, envelope, source)
            session.flush()
    except Exception as error:  # what the consumer would dead-letter again
        raise RedriveError(f"the handler of {group} still fails: {type(error).__name__}: {error}") from error
    if applied is False:
        return "already_applied"  # an idempotent handler's own keys: nothing written
    session.execute(
        processed_events.insert().values(
            consumer_group=group, event_id=envelope.event_id, processed_at=clock()
        )
    )
    return "applied"
