"""The real Kafka broker started by the test session: clients can use it the way the platform will."""

from __future__ import annotations

import pytest
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.consumer import KafkaConsumer
from kafka.producer import KafkaProducer
from mahjong_infra import kafka as kafka_infra

# Imported from the subpackages on purpose: for mypy, the folder infra/kafka/ (pom.xml) would
# shadow the top-level `kafka` package of kafka-python when checking files under infra/.
pytestmark = pytest.mark.integration

TIMEOUT_MS = 20_000


def _create_topic(bootstrap_servers: str, name: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()


def _consume_all(
    bootstrap_servers: str, topic: str, group_id: str, expected: int
) -> list[tuple[bytes, bytes]]:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=TIMEOUT_MS,
    )
    received: list[tuple[bytes, bytes]] = []
    try:
        for record in consumer:
            received.append((record.key, record.value))
            if len(received) == expected:
                break
    finally:
        consumer.close()
    return received


def test_the_broker_reports_the_pinned_kafka_4_version(kafka_broker: kafka_infra.KafkaBroker) -> None:
    assert kafka_broker.version == kafka_infra.pinned_version()
    assert kafka_broker.version.startswith("4.")
    assert kafka_broker.host == "127.0.0.1"


def test_a_message_produced_is_consumed_with_its_key_and_value(
    kafka_bootstrap_servers: str, unique_prefix: str
) -> None:
    topic = unique_prefix + "round-trip"
    _create_topic(kafka_bootstrap_servers, topic, partitions=3)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap_servers)
    try:
        producer.send(topic, key=b"table-1", value=b"TileDiscarded").get(timeout=TIMEOUT_MS / 1000)
    finally:
        producer.close()

    assert _consume_all(kafka_bootstrap_servers, topic, unique_prefix + "group", expected=1) == [
        (b"table-1", b"TileDiscarded")
    ]


def test_the_idempotent_producer_with_acks_all_keeps_one_key_in_order(
    kafka_bootstrap_servers: str, unique_prefix: str
) -> None:
    # The outbox relay publishes this way; it needs producer ids from the broker (idempotence) and
    # every replica's acknowledgement, which a single node only gives with replication factors 1.
    topic = unique_prefix + "idempotent"
    _create_topic(kafka_bootstrap_servers, topic, partitions=6)
    producer = KafkaProducer(
        bootstrap_servers=kafka_bootstrap_servers,
        enable_idempotence=True,
        acks="all",
        max_in_flight_requests_per_connection=5,
    )
    values = [f"event-{sequence}".encode() for sequence in range(50)]
    try:
        futures = [producer.send(topic, key=b"table-7", value=value) for value in values]
        partitions = {future.get(timeout=TIMEOUT_MS / 1000).partition for future in futures}
    finally:
        producer.close()

    assert len(partitions) == 1, "one key must land in one partition"
    received = _consume_all(kafka_bootstrap_servers, topic, unique_prefix + "group", expected=len(values))
    assert [value for _key, value in received] == values


def test_topics_are_never_created_by_accident(kafka_bootstrap_servers: str, unique_prefix: str) -> None:
    # auto.create.topics.enable=false: only code that means to create a topic creates it.
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap_servers)
    try:
        consumer.partitions_for_topic(unique_prefix + "never-created")
        assert unique_prefix + "never-created" not in consumer.topics()
    finally:
        consumer.close()
