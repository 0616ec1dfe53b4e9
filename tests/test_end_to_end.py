"""End to end on the real broker and PostgreSQL (issue 4): four bots find a table through
matchmaking and play a full game through the table engine; the table's stream on Kafka equals its
event store, event for event."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import pytest
from kafka import KafkaConsumer, TopicPartition
from mahjong_matchmaking.__main__ import DEFINITION as MATCHMAKING
from mahjong_platform.auth import mint_token
from mahjong_platform.config import Settings, load_settings
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.envelopes import parse_envelope
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_client import open_channel
from mahjong_platform.service_runtime import RunningService, start_service
from mahjong_table.__main__ import definition as table_definition
from mjctl.bots import run_bots

pytestmark = pytest.mark.integration
SECRET = "end-to-end-secret-0123456789abcdef0123"


@pytest.fixture
def settings(
    kafka_bootstrap_servers: str, unique_prefix: str, postgres_database_factory: Callable[[str], str]
) -> Settings:
    return load_settings(
        {
            "MAHJONG_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap_servers,
            "MAHJONG_TOPIC_PREFIX": unique_prefix,
            "MAHJONG_TOPIC_PARTITIONS": "3",
            "MAHJONG_JWT_SECRET": SECRET,
            "MAHJONG_TABLE_DATABASE_URL": postgres_database_factory("table"),
            "MAHJONG_MATCHMAKING_DATABASE_URL": postgres_database_factory("matchmaking"),
        }
    )


@pytest.fixture
def services(settings: Settings) -> Iterator[dict[str, RunningService]]:
    running = {
        "table": start_service(table_definition(settings), settings, address="127.0.0.1:0"),
        "matchmaking": start_service(MATCHMAKING, settings, address="127.0.0.1:0"),
    }
    yield running
    for service in running.values():
        service.stop(0)


def table_topic_events(settings: Settings, table_id: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=list(settings.kafka_bootstrap_servers), enable_auto_commit=False, group_id=None
    )
    topic = settings.topic_prefix + "mahjong.table.v1"
    partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    found: list[bytes] = []
    for _ in range(100):
        for records in consumer.poll(timeout_ms=500).values():
            found.extend(record.value for record in records if record.key.decode() == table_id)
        if len(found) >= expected:
            break
    consumer.close()
    return found


def test_four_bots_play_a_full_game_and_kafka_carries_the_event_store(
    settings: Settings, services: dict[str, RunningService]
) -> None:
    ports = {name: service.port for name, service in services.items()}

    def channel_for(service: str, player_id: str) -> grpc.Channel:
        return open_channel(f"127.0.0.1:{ports[service]}", mint_token(SECRET, player_id))

    report = run_bots("sichuan-novice", 4, 1, channel_for, log=lambda _line: None)
    assert len(report.table_ids) == 1
    table_id = report.table_ids[0]
    database = create_engine_for(settings.database_url("table"))
    with transaction(create_session_factory(database)) as session:
        stored = EventStore().load(session, table_id)
    database.dispose()
    assert stored[-1].WhichOneof("payload") == "game_ended"
    on_kafka = [parse_envelope(value) for value in table_topic_events(settings, table_id, len(stored))]
    # The relay may re-send after a crash; consumers dedupe by event id, and so does this check.
    unique = list({envelope.event_id: envelope for envelope in on_kafka}.values())
    assert [e.SerializeToString() for e in unique] == [e.SerializeToString() for e in stored]
