"""The tracked consumer against the real Kafka broker: exactly-once effect, resumption, dead letters.

Messages are produced directly (no outbox) so each test controls exactly what is on the topic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from mahjong.v1 import envelope_pb2, table_events_pb2
from mahjong_platform.envelopes import new_envelope, serialize_envelope, utc_now
from mahjong_platform.schema import consumer_positions, processed_events
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import (
    FETCH_MAX_WAIT_MS,
    FETCH_MIN_BYTES_LINGERING,
    LINGER_POLL_GRACE_PERCENT,
    MAX_POLL_RECORDS_DEFAULT,
    MessagePosition,
    TrackedConsumer,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

pytestmark = pytest.mark.integration

READ_DEADLINE_SECONDS = 30.0
ConsumerFactory = Callable[..., TrackedConsumer]


class _ConsumerKilledError(Exception):
    pass


def discard_events(stream_id: str, count: int, *, first_sequence: int = 1) -> list[envelope_pb2.Envelope]:
    return [
        new_envelope(
            table_events_pb2.TileDiscarded(seat=index % 4, tile="5D"),
            clock=utc_now,
            stream_id=stream_id,
            sequence=first_sequence + index,
        )
        for index in range(count)
    ]


@pytest.fixture
def produce(kafka_bootstrap_servers: str, kafka_topics: Topics) -> Iterator[Callable[[str, bytes], None]]:
    """`produce(key, value)`: put raw bytes on this test's table topic and wait for the ack."""
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap_servers, acks="all")

    def send(key: str, value: bytes) -> None:
        producer.send(kafka_topics.table, key=key.encode(), value=value).get(timeout=10)

    yield send
    producer.close(timeout=5)


def produce_events(produce: Callable[[str, bytes], None], events: list[envelope_pb2.Envelope]) -> None:
    for event in events:
        produce(event.stream_id, serialize_envelope(event))


def finished_message_count(engine: Engine) -> int:
    """Messages finished (applied, skipped or dead-lettered), summed over partitions."""
    total = sqlalchemy.func.coalesce(sqlalchemy.func.sum(consumer_positions.c.next_offset), 0)
    with engine.connect() as connection:
        return int(connection.execute(sqlalchemy.select(total)).scalar_one())


def read_dead_letters(
    bootstrap_servers: str, topic: str, expected_count: int
) -> list[envelope_pb2.DeadLetter]:
    """Read the dead letter topic from the beginning until `expected_count` letters arrived."""
    reader = KafkaConsumer(bootstrap_servers=bootstrap_servers, group_id=None, enable_auto_commit=False)
    try:
        deadline = time.monotonic() + READ_DEADLINE_SECONDS
        partition_numbers = reader.partitions_for_topic(topic)
        while not partition_numbers and time.monotonic() < deadline:
            time.sleep(0.1)  # The reader's metadata may not know the topic yet.
            partition_numbers = reader.partitions_for_topic(topic)
        partitions = [TopicPartition(topic, partition) for partition in partition_numbers]
        reader.assign(partitions)
        reader.seek_to_beginning(*partitions)
        letters: list[envelope_pb2.DeadLetter] = []
        while len(letters) < expected_count and time.monotonic() < deadline:
            for records in reader.poll(timeout_ms=200).values():
                letters += [envelope_pb2.DeadLetter.FromString(record.value) for record in records]
        return letters
    finally:
        reader.close(autocommit=False)


def test_a_consumer_killed_between_apply_and_storing_its_offset_applies_each_event_once_after_restart(
    sqlite_engine: Engine,
    produce: Callable[[str, bytes], None],
    unique_prefix: str,
    new_tracked_consumer: ConsumerFactory,
    poll_consumer_until: Callable[..., None],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    events = discard_events("table-1", 5)
    produce_events(produce, events)
    handled_positions: list[MessagePosition] = []

    def kill_on_the_third_message(position: MessagePosition) -> None:
        handled_positions.append(position)
        if len(handled_positions) == 3:
            raise _ConsumerKilledError

    group_id = unique_prefix + "projection"
    doomed = new_tracked_consumer(sqlite_engine, group_id=group_id, before_commit=kill_on_the_third_message)
    with pytest.raises(_ConsumerKilledError):
        poll_consumer_until(doomed, lambda: False)
    doomed.close()
    # The third event was applied inside the batch transaction that died with the consumer: that
    # whole batch is gone, and what survived is exactly what the stored positions say was read.
    survived = read_projection_event_ids(sqlite_engine)
    assert events[2].event_id not in survived
    assert survived == [event.event_id for event in events[: len(survived)]]
    assert finished_message_count(sqlite_engine) == len(survived)

    restarted = new_tracked_consumer(sqlite_engine, group_id=group_id)
    poll_consumer_until(restarted, lambda: finished_message_count(sqlite_engine) >= 5)
    assert read_projection_event_ids(sqlite_engine) == [event.event_id for event in events]


def test_a_consumer_that_keeps_polling_after_a_failed_commit_rereads_instead_of_skipping(
    sqlite_engine: Engine,
    produce: Callable[[str, bytes], None],
    unique_prefix: str,
    new_tracked_consumer: ConsumerFactory,
    poll_consumer_until: Callable[..., None],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    events = discard_events("table-1", 4)
    produce_events(produce, events)
    failures_left = [1]

    def fail_the_second_message_once(position: MessagePosition) -> None:
        if position.offset == 1 and failures_left:
            failures_left.pop()
            raise _ConsumerKilledError

    consumer = new_tracked_consumer(
        sqlite_engine, group_id=unique_prefix + "projection", before_commit=fail_the_second_message_once
    )
    with pytest.raises(_ConsumerKilledError):
        poll_consumer_until(consumer, lambda: False)
    poll_consumer_until(consumer, lambda: finished_message_count(sqlite_engine) >= 4)
    assert read_projection_event_ids(sqlite_engine) == [event.event_id for event in events]


def test_a_restarted_consumer_resumes_at_its_stored_positions(
    migrated_engine: Engine,
    produce: Callable[[str, bytes], None],
    unique_prefix: str,
    new_tracked_consumer: ConsumerFactory,
    poll_consumer_until: Callable[..., None],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    first_events = discard_events("table-1", 3) + discard_events("table-2", 3)
    produce_events(produce, first_events)
    group_id = unique_prefix + "projection"
    first = new_tracked_consumer(migrated_engine, group_id=group_id)
    poll_consumer_until(first, lambda: finished_message_count(migrated_engine) >= 6)
    first.close()

    later_events = discard_events("table-1", 2, first_sequence=4)
    produce_events(produce, later_events)
    handled_event_ids: list[str] = []

    def record_and_project(
        session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition
    ) -> None:
        handled_event_ids.append(envelope.event_id)

    second = new_tracked_consumer(migrated_engine, group_id=group_id, handler=record_and_project)
    poll_consumer_until(second, lambda: finished_message_count(migrated_engine) >= 8)
    # Only the new messages reach the handler: the stored positions, not event id dedupe, did it.
    assert handled_event_ids == [event.event_id for event in later_events]
    assert sorted(read_projection_event_ids(migrated_engine)) == sorted(
        event.event_id for event in first_events
    )


def test_a_redelivered_event_id_is_applied_once(
    sqlite_engine: Engine,
    produce: Callable[[str, bytes], None],
    unique_prefix: str,
    new_tracked_consumer: ConsumerFactory,
    poll_consumer_until: Callable[..., None],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    events = discard_events("table-1", 3)
    produce_events(produce, events + events[1:])  # The relay re-sent the last two.
    consumer = new_tracked_consumer(sqlite_engine, group_id=unique_prefix + "projection")
    poll_consumer_until(consumer, lambda: finished_message_count(sqlite_engine) >= 5)
    assert read_projection_event_ids(sqlite_engine) == [event.event_id for event in events]


def test_a_poison_message_lands_in_the_dead_letter_topic_and_later_messages_are_still_applied(
    migrated_engine: Engine,
    kafka_bootstrap_servers: str,
    kafka_topics: Topics,
    produce: Callable[[str, bytes], None],
    unique_prefix: str,
    new_tracked_consumer: ConsumerFactory,
    poll_consumer_until: Callable[..., None],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    poison = b"\xff\xfe this is not an envelope"
    events = discard_events("table-1", 3)
    produce_events(produce, events[:1])
    produce("table-1", poison)  # Same key: same partition, between valid events.
    produce_events(produce, events[1:])
    group_id = unique_prefix + "projection"
    consumer = new_tracked_consumer(migrated_engine, group_id=group_id)
    poll_consumer_until(consumer, lambda: finished_message_count(migrated_engine) >= 4)

    assert read_projection_event_ids(migrated_engine) == [event.event_id for event in events]
    [dead_letter] = read_dead_letters(kafka_bootstrap_servers, kafka_topics.dead_letter, expected_count=1)
    assert dead_letter.value == poison
    assert dead_letter.key == b"table-1"
    assert dead_letter.topic == kafka_topics.table
    assert dead_letter.offset == 1
    assert dead_letter.consumer_group == group_id
    assert dead_letter.error.startswith("undecodable envelope: ")
    assert dead_letter.failed_at.seconds > 0


def test_an_event_whose_handler_raises_is_dead_lettered_and_not_marked_processed(
    sqlite_engine: Engine,
    kafka_bootstrap_servers: str,
    kafka_topics: Topics,
    produce: Callable[[str, bytes], None],
    unique_prefix: str,
    new_tracked_consumer: ConsumerFactory,
    poll_consumer_until: Callable[..., None],
    example_projection: sqlalchemy.Table,
) -> None:
    events = discard_events("table-1", 4)
    produce_events(produce, events)
    rejected_event_id = events[2].event_id

    def reject_one_event(
        session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition
    ) -> None:
        session.execute(
            example_projection.insert().values(
                event_id=envelope.event_id,
                stream_id=envelope.stream_id,
                sequence=envelope.sequence,
                topic=position.topic,
                partition=position.partition,
                kafka_offset=position.offset,
            )
        )
        if envelope.event_id == rejected_event_id:
            raise ValueError("seat 2 cannot discard 5D now")

    group_id = unique_prefix + "projection"
    consumer = new_tracked_consumer(sqlite_engine, group_id=group_id, handler=reject_one_event)
    poll_consumer_until(consumer, lambda: finished_message_count(sqlite_engine) >= 4)

    with sqlite_engine.connect() as connection:
        projected = list(connection.execute(sqlalchemy.select(example_projection.c.event_id)).scalars())
        processed = set(connection.execute(sqlalchemy.select(processed_events.c.event_id)).scalars())
    expected_applied = [event.event_id for event in events if event.event_id != rejected_event_id]
    assert projected == expected_applied  # The failed handler's own row was rolled back.
    assert processed == set(expected_applied)
    [dead_letter] = read_dead_letters(kafka_bootstrap_servers, kafka_topics.dead_letter, expected_count=1)
    assert dead_letter.error == "handler failed: ValueError: seat 2 cannot discard 5D now"
    assert dead_letter.value == serialize_envelope(events[2])


def test_events_the_projection_does_not_want_are_skipped_and_the_wanted_applied_once_across_a_restart(
    sqlite_engine: Engine,
    produce: Callable[[str, bytes], None],
    unique_prefix: str,
    new_tracked_consumer: ConsumerFactory,
    poll_consumer_until: Callable[..., None],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    """A consumer that wants only some events (matchmaking: GameEnded, PlayerLeft) opens no
    transaction for the others; after a restart it reads them again and still applies each wanted
    event exactly once."""
    events = discard_events("table-1", 6)
    wanted_ids = {event.event_id for event in events[1::2]}

    def wants(envelope: envelope_pb2.Envelope) -> bool:
        return envelope.event_id in wanted_ids

    produce_events(produce, events[:4])
    group_id = unique_prefix + "projection"
    first = new_tracked_consumer(sqlite_engine, group_id=group_id, wants=wants)
    poll_consumer_until(first, lambda: len(read_projection_event_ids(sqlite_engine)) >= 2)
    first.close()
    produce_events(produce, events[4:])
    second = new_tracked_consumer(sqlite_engine, group_id=group_id, wants=wants)
    poll_consumer_until(second, lambda: len(read_projection_event_ids(sqlite_engine)) >= 3)
    second.poll_once(timeout_ms=300)
    assert read_projection_event_ids(sqlite_engine) == [event.event_id for event in events[1::2]]


def test_a_lingering_consumer_applies_every_event_once_in_stream_order(
    migrated_engine: Engine,
    new_tracked_consumer: ConsumerFactory,
    produce: Callable[[str, bytes], None],
    poll_consumer_until: Callable[..., None],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    """linger_ms gathers what arrives while a poll's records wait into one batch: the events of
    two streams produced in bursts, a re-sent one among them, are each applied once, in order."""
    first, second = discard_events("table-a", 12), discard_events("table-b", 12)
    consumer = new_tracked_consumer(migrated_engine, group_id="lingering", linger_ms=50)
    for start in range(0, 12, 4):
        produce_events(produce, first[start : start + 4] + second[start : start + 4])
        consumer.poll_once(timeout_ms=200)
    produce_events(produce, first[5:6])
    poll_consumer_until(consumer, lambda: finished_message_count(migrated_engine) == 25)
    applied = read_projection_event_ids(migrated_engine)
    assert sorted(applied) == sorted(event.event_id for event in first + second)
    for stream in (first, second):
        ids = [event.event_id for event in stream]
        assert [event_id for event_id in applied if event_id in ids] == ids


def _fetch_wait(consumer: TrackedConsumer) -> tuple[int, int]:
    """What the consumer's next fetch asks the broker: (min bytes, max wait ms)."""
    settings = consumer._consumer._fetcher.config
    return settings["fetch_min_bytes"], settings["fetch_max_wait_ms"]


def test_after_a_poll_that_brought_events_a_lingering_consumer_fetches_waiting_at_the_broker(
    migrated_engine: Engine,
    new_tracked_consumer: ConsumerFactory,
    produce: Callable[[str, bytes], None],
    poll_consumer_until: Callable[..., None],
) -> None:
    """``linger_ms`` is the broker's wait: after records, the next fetch asks to be held up to
    ``linger_ms`` (unless a full batch is there); after an empty poll, a fetch is answered at the
    first record again, held at most `FETCH_MAX_WAIT_MS` when nothing comes. A consumer without
    ``linger_ms`` always fetches as an idle one."""
    idle = (1, FETCH_MAX_WAIT_MS)
    lingering = new_tracked_consumer(migrated_engine, group_id="lingers", linger_ms=40)
    assert _fetch_wait(lingering) == idle
    produce_events(produce, discard_events("table-a", 3))
    poll_consumer_until(lingering, lambda: lingering._lingering)  # a poll brought records
    lingering.poll_once(timeout_ms=0)  # the fetch this poll sends waits at the broker
    assert _fetch_wait(lingering) == (FETCH_MIN_BYTES_LINGERING, 40)
    poll_consumer_until(lingering, lambda: finished_message_count(migrated_engine) == 3)
    poll_consumer_until(lingering, lambda: not lingering._lingering)  # an empty poll
    lingering.poll_once(timeout_ms=0)
    assert _fetch_wait(lingering) == idle
    plain = new_tracked_consumer(migrated_engine, group_id="does-not-linger", handler=lambda *_: None)
    for _poll in range(3):  # reads the same three events: never lingers
        plain.poll_once(timeout_ms=200)
        assert not plain._lingering
        assert _fetch_wait(plain) == idle


def test_a_lingering_poll_waits_for_its_fetch_a_little_longer_than_the_broker_holds_it(
    migrated_engine: Engine,
    new_tracked_consumer: ConsumerFactory,
    produce: Callable[[str, bytes], None],
    poll_consumer_until: Callable[..., None],
) -> None:
    """`LINGER_POLL_GRACE_PERCENT`: a lingering poll that gave up at ``linger_ms`` ended just before
    its fetch's answer came, and the next poll could lose track of it (kafka-python 3.0) and wait
    up to `FETCH_MAX_WAIT_MS` with the records buffered. An idle poll keeps its timeout."""
    consumer = new_tracked_consumer(migrated_engine, group_id="lingers-longer", linger_ms=40)
    timeouts: list[int] = []
    poll = consumer._consumer.poll

    def recording_poll(*, timeout_ms: int, max_records: int) -> Any:
        timeouts.append(timeout_ms)
        return poll(timeout_ms=timeout_ms, max_records=max_records)

    consumer._consumer.poll = recording_poll
    consumer.poll_once(timeout_ms=300)
    assert timeouts == [300] and not consumer._lingering
    produce_events(produce, discard_events("table-a", 3))
    poll_consumer_until(consumer, lambda: consumer._lingering)  # a poll brought records
    consumer.poll_once(timeout_ms=300)
    assert timeouts[-1] == 40 * (100 + LINGER_POLL_GRACE_PERCENT) // 100 == 60


def test_a_poll_hands_a_whole_fetch_of_a_few_hundred_events_to_one_batch(
    migrated_engine: Engine,
    new_tracked_consumer: ConsumerFactory,
    produce: Callable[[str, bytes], None],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    """`MAX_POLL_RECORDS_DEFAULT`: what one fetch brought (here 250 events waiting when the consumer
    starts) is applied in one batch, one transaction, not in polls of 100."""
    assert MAX_POLL_RECORDS_DEFAULT >= 250
    events = discard_events("table-a", 250)
    produce_events(produce, events)
    consumer = new_tracked_consumer(migrated_engine, group_id="whole-fetch", linger_ms=50)
    deadline = time.monotonic() + READ_DEADLINE_SECONDS
    handled = 0
    while not handled and time.monotonic() < deadline:
        handled = consumer.poll_once(timeout_ms=200)
    assert handled == 250
    assert read_projection_event_ids(migrated_engine) == [event.event_id for event in events]
