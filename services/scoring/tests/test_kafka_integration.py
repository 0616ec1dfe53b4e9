"""Scoring with the real Kafka broker: table events in, settlement events out on the settlement topic,
with a scoring consumer restarted mid-game and a re-sent table event; the result equals the pure fold."""

from __future__ import annotations

import pathlib
import time

import pytest
from kafka import KafkaConsumer, TopicPartition
from mahjong.v1 import envelope_pb2
from mahjong_platform.database import create_session_factory, sqlite_url, transaction
from mahjong_platform.envelopes import parse_envelope, serialize_envelope
from mahjong_platform.event_store import EventStore
from mahjong_platform.outbox import OutboxRelay, count_unsent_outbox_messages, create_idempotent_producer
from mahjong_platform.topics import Topics, ensure_topics
from mahjong_platform.tracked_consumer import TrackedConsumer
from mahjong_scoring.game_settlement import new_game_settlement, settle_table_events
from mahjong_scoring.projection import CONSUMER_GROUP, SettlementProjection
from sqlalchemy.engine import Engine

from .conftest import migrated_engine
from .test_projection import whole_game

DEADLINE_SECONDS = 120.0
# The first consumer group on a fresh broker makes it create `__consumer_offsets` (50 partitions),
# which on a loaded machine takes minutes; the group's first assignment gets this long.
FIRST_ASSIGNMENT_DEADLINE_SECONDS = 300.0


def produce(bootstrap_servers: str, topic: str, events: list[envelope_pb2.Envelope]) -> None:
    producer = create_idempotent_producer(
        bootstrap_servers, client_id="scoring-test", delivery_timeout_ms=30_000
    )
    try:
        for envelope in events:
            producer.send(topic, key=envelope.stream_id.encode(), value=serialize_envelope(envelope))
        producer.flush(timeout=30)
    finally:
        producer.close()


def consume_until(consumer: TrackedConsumer, handled_count: int) -> None:
    deadline = time.monotonic() + FIRST_ASSIGNMENT_DEADLINE_SECONDS
    handled = 0
    while handled < handled_count:
        assert time.monotonic() < deadline, f"handled {handled} of {handled_count} table events in time"
        handled += consumer.poll_once(timeout_ms=200)


def relay_all(engine: Engine, bootstrap_servers: str) -> None:
    session_factory = create_session_factory(engine)
    with OutboxRelay(engine, bootstrap_servers) as relay:
        while True:
            relay.run_once()
            with transaction(session_factory) as session:
                if count_unsent_outbox_messages(session) == 0:
                    return


def read_topic(bootstrap_servers: str, topic: str, count: int) -> list[envelope_pb2.Envelope]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False, group_id=None)
    try:
        partitions = [
            TopicPartition(topic, partition) for partition in sorted(consumer.partitions_for_topic(topic))
        ]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        envelopes: list[envelope_pb2.Envelope] = []
        deadline = time.monotonic() + DEADLINE_SECONDS
        while len(envelopes) < count:
            assert time.monotonic() < deadline, f"read {len(envelopes)} of {count} settlement events in time"
            for records in consumer.poll(timeout_ms=200).values():
                envelopes.extend(parse_envelope(record.value) for record in records)
        return envelopes
    finally:
        consumer.close(autocommit=False)


@pytest.mark.integration
def test_table_events_become_settlement_events_and_a_restart_mid_game_changes_nothing(
    kafka_bootstrap_servers: str, unique_prefix: str, tmp_path: pathlib.Path
) -> None:
    topics = Topics.with_prefix(unique_prefix)
    ensure_topics(kafka_bootstrap_servers, topics.all_names(), partitions=1)
    events = whole_game().events
    _, expected = settle_table_events(new_game_settlement(), events)
    engine = migrated_engine(sqlite_url(tmp_path / "data", "scoring"))
    middle = len(events) // 2
    try:
        produce(kafka_bootstrap_servers, topics.table, events[:middle])
        with TrackedConsumer(
            engine,
            kafka_bootstrap_servers,
            unique_prefix + CONSUMER_GROUP,
            [topics.table],
            SettlementProjection(EventStore(topics)),
            topics.dead_letter,
        ) as first:
            consume_until(first, middle)
        # A fresh process: nothing in memory. The last event before the restart is re-sent.
        produce(kafka_bootstrap_servers, topics.table, [events[middle - 1], *events[middle:]])
        with TrackedConsumer(
            engine,
            kafka_bootstrap_servers,
            unique_prefix + CONSUMER_GROUP,
            [topics.table],
            SettlementProjection(EventStore(topics)),
            topics.dead_letter,
        ) as second:
            consume_until(second, len(events) - middle + 1)
        relay_all(engine, kafka_bootstrap_servers)
        published = read_topic(kafka_bootstrap_servers, topics.settlement, len(expected.envelopes))
    finally:
        engine.dispose()
    assert [serialize_envelope(envelope) for envelope in published] == [
        serialize_envelope(envelope) for envelope in _numbered(expected.envelopes)
    ]
    assert published[-1].WhichOneof("payload") == "game_settled"


def _numbered(envelopes: tuple[envelope_pb2.Envelope, ...]) -> list[envelope_pb2.Envelope]:
    """The expected envelopes as the event store numbers them (sequence 1, 2, … in the stream)."""
    numbered = []
    for sequence, envelope in enumerate(envelopes, start=1):
        copy = envelope_pb2.Envelope()
        copy.CopyFrom(envelope)
        copy.sequence = sequence
        numbered.append(copy)
    return numbered
