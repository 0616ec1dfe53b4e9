"""Scoring with the real Kafka broker: table events in, settlement events out on the settlement topic,
with a scoring consumer restarted mid-game and a re-sent table event; the result equals the pure fold."""

from __future__ import annotations

import pathlib
import time

import pytest
from kafka import KafkaConsumer, TopicPartition
from mahjong.v1 import envelope_pb2
from mahjong_platform.database import sqlite_url
from mahjong_platform.envelopes import parse_envelope, serialize_envelope
from mahjong_platform.event_store import EventStore
from mahjong_platform.testing import poll_until_handled, produce_envelopes, relay_until_drained
from mahjong_platform.topics import Topics, ensure_topics
from mahjong_platform.tracked_consumer import TrackedConsumer
from mahjong_scoring.game_settlement import new_game_settlement, settle_table_events
from mahjong_scoring.projection import CONSUMER_GROUP, SettlementProjection

from .conftest import migrated_engine
from .test_projection import whole_game

DEADLINE_SECONDS = 120.0


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
        produce_envelopes(kafka_bootstrap_servers, topics.table, events[:middle], client_id="scoring-test")
        with TrackedConsumer(
            engine,
            kafka_bootstrap_servers,
            unique_prefix + CONSUMER_GROUP,
            [topics.table],
            SettlementProjection(EventStore(topics)),
            topics.dead_letter,
        ) as first:
            poll_until_handled(first, middle)
        # A fresh process: nothing in memory. The last event before the restart is re-sent.
        produce_envelopes(
            kafka_bootstrap_servers,
            topics.table,
            [events[middle - 1], *events[middle:]],
            client_id="scoring-test",
        )
        with TrackedConsumer(
            engine,
            kafka_bootstrap_servers,
            unique_prefix + CONSUMER_GROUP,
            [topics.table],
            SettlementProjection(EventStore(topics)),
            topics.dead_letter,
        ) as second:
            poll_until_handled(second, len(events) - middle + 1)
        relay_until_drained(engine, kafka_bootstrap_servers)
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
