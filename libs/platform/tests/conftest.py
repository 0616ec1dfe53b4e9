"""Fixtures shared by the platform tests: databases migrated with the example alembic history."""

from __future__ import annotations

import pathlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Protocol

import pytest
import sqlalchemy
from kafka import KafkaAdminClient, KafkaConsumer
from mahjong.v1.envelope_pb2 import Envelope
from mahjong_platform.database import create_engine_for, sqlite_url
from mahjong_platform.migrations import upgrade
from mahjong_platform.topics import Topics, ensure_topics
from mahjong_platform.tracked_consumer import (
    AssignmentHook,
    BeforeCommitHook,
    Handler,
    MessagePosition,
    Relevance,
    TrackedConsumer,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

ALEMBIC_EXAMPLE_DIRECTORY = pathlib.Path(__file__).parent / "alembic_example"

# Mirrors the example history's revision 0002, for queries in tests.
_example_metadata = sqlalchemy.MetaData()
EXAMPLE_PROJECTION = sqlalchemy.Table(
    "example_projection",
    _example_metadata,
    sqlalchemy.Column("id", sqlalchemy.Integer, primary_key=True, autoincrement=True),
    sqlalchemy.Column("event_id", sqlalchemy.String(36), nullable=False),
    sqlalchemy.Column("stream_id", sqlalchemy.String(200), nullable=False),
    sqlalchemy.Column("sequence", sqlalchemy.BigInteger, nullable=False),
    sqlalchemy.Column("topic", sqlalchemy.String(249), nullable=False),
    sqlalchemy.Column("partition", sqlalchemy.Integer, nullable=False),
    sqlalchemy.Column("kafka_offset", sqlalchemy.BigInteger, nullable=False),
)


@pytest.fixture
def alembic_example_directory() -> pathlib.Path:
    """The example service migration history (platform tables + one projection table)."""
    return ALEMBIC_EXAMPLE_DIRECTORY


@pytest.fixture
def example_projection() -> sqlalchemy.Table:
    """The example projection table the consumer tests write to (no unique key on event id)."""
    return EXAMPLE_PROJECTION


@pytest.fixture
def sqlite_database_url(tmp_path: pathlib.Path) -> str:
    """A SQLite file in this test's temporary data directory (not created yet)."""
    return sqlite_url(tmp_path / "data", "example")


def _migrated_engine(url: str) -> Iterator[Engine]:
    upgrade(url, ALEMBIC_EXAMPLE_DIRECTORY)
    engine = create_engine_for(url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def migrated_engine(database_url: str) -> Iterator[Engine]:
    """An engine on a database migrated to the example history's head (SQLite and PostgreSQL)."""
    yield from _migrated_engine(database_url)


@pytest.fixture
def sqlite_engine(sqlite_database_url: str) -> Iterator[Engine]:
    """An engine on a migrated SQLite database (the embedded default)."""
    yield from _migrated_engine(sqlite_database_url)


@pytest.fixture
def postgresql_engine(postgres_database_url: str) -> Iterator[Engine]:
    """An engine on a migrated, fresh database in the real PostgreSQL."""
    yield from _migrated_engine(postgres_database_url)


# --- Kafka ----------------------------------------------------------------------------------------

TEST_PARTITION_COUNT = 2
POLL_DEADLINE_SECONDS = 60.0
COORDINATOR_READY_DEADLINE_SECONDS = 120.0
WARMUP_ATTEMPT_SECONDS = 20.0


def _a_fresh_group_forms(bootstrap_servers: str, timeout_seconds: float) -> bool:
    """Whether a new consumer in a new group gets its partition within `timeout_seconds`."""
    topic = f"warmup.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap_servers, [topic], partitions=1)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        group_id=topic,
        enable_auto_commit=False,
        metadata_max_age_ms=1_000,
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_seconds
        while not consumer.assignment():
            if time.monotonic() > deadline:
                return False
            consumer.poll(timeout_ms=200)
        return True
    finally:
        consumer.close(autocommit=False)


@pytest.fixture(scope="session")
def kafka_group_coordinator_ready(kafka_bootstrap_servers: str) -> None:
    """Waits once per session until consumer groups can form on the shared broker.

    The first group on a fresh broker makes it create `__consumer_offsets`, which on a busy
    two-core machine can take longer than one test's poll deadline; until a group's partition has
    a leader, joining that group fails with NotCoordinator.
    """
    deadline = time.monotonic() + COORDINATOR_READY_DEADLINE_SECONDS
    # A fresh client per attempt: under load a kafka-python 3.0.12 consumer was seen to stall
    # forever in its first group join on a new broker, while a new client (new coordinator lookup,
    # new group) joined at once.
    while not _a_fresh_group_forms(kafka_bootstrap_servers, WARMUP_ATTEMPT_SECONDS):
        if time.monotonic() > deadline:
            pytest.fail(f"no consumer group formed within {COORDINATOR_READY_DEADLINE_SECONDS} s")
    # Each group's coordinator lives on one of the offsets topic's partitions: wait for them all.
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap_servers)
    try:
        admin.wait_for_topics(
            ["__consumer_offsets"], timeout_ms=int(COORDINATOR_READY_DEADLINE_SECONDS * 1000)
        )
    finally:
        admin.close()


@pytest.fixture
def kafka_topics(kafka_bootstrap_servers: str, unique_prefix: str) -> Topics:
    """This test's own five topics on the shared broker (unique prefix, two partitions each)."""
    topics = Topics.with_prefix(unique_prefix)
    ensure_topics(kafka_bootstrap_servers, topics.all_names(), partitions=TEST_PARTITION_COUNT)
    return topics


def project_into_example_table(session: Session, envelope: Envelope, position: MessagePosition) -> None:
    """A handler that writes one projection row per applied event (a double apply shows twice)."""
    session.execute(
        EXAMPLE_PROJECTION.insert().values(
            event_id=envelope.event_id,
            stream_id=envelope.stream_id,
            sequence=envelope.sequence,
            topic=position.topic,
            partition=position.partition,
            kafka_offset=position.offset,
        )
    )


class ConsumerFactory(Protocol):
    def __call__(
        self,
        engine: Engine,
        *,
        group_id: str,
        handler: Handler = ...,
        before_commit: BeforeCommitHook | None = None,
        wants: Relevance | None = None,
        on_assignment: AssignmentHook | None = None,
        linger_ms: int = 0,
    ) -> TrackedConsumer: ...


@pytest.fixture
def new_tracked_consumer(
    kafka_bootstrap_servers: str, kafka_topics: Topics, kafka_group_coordinator_ready: None
) -> Iterator[ConsumerFactory]:
    """Creates tracked consumers of this test's table topic with short timeouts; closes them all."""
    created: list[TrackedConsumer] = []

    def create(
        engine: Engine,
        *,
        group_id: str,
        handler: Handler = project_into_example_table,
        before_commit: BeforeCommitHook | None = None,
        wants: Relevance | None = None,
        on_assignment: AssignmentHook | None = None,
        linger_ms: int = 0,
    ) -> TrackedConsumer:
        consumer = TrackedConsumer(
            engine,
            kafka_bootstrap_servers,
            group_id,
            [kafka_topics.table],
            handler,
            kafka_topics.dead_letter,
            session_timeout_ms=6_000,
            heartbeat_interval_ms=500,
            # Bounds the stall when the group forms before the broker announces the new topic.
            metadata_max_age_ms=1_000,
            dead_letter_publish_timeout_ms=10_000,
            before_commit=before_commit,
            wants=wants,
            on_assignment=on_assignment,
            linger_ms=linger_ms,
        )
        created.append(consumer)
        return consumer

    yield create
    for consumer in created:
        consumer.close()


def poll_until(
    consumer: TrackedConsumer,
    condition: Callable[[], bool],
    *,
    deadline_seconds: float = POLL_DEADLINE_SECONDS,
) -> None:
    """Poll `consumer` until `condition()` holds; fail after `deadline_seconds` (a hang guard)."""
    deadline = time.monotonic() + deadline_seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not reached within {deadline_seconds} s")
        consumer.poll_once(timeout_ms=200)


@pytest.fixture
def poll_consumer_until() -> Callable[..., None]:
    """`poll_consumer_until(consumer, condition)`: see `poll_until`."""
    return poll_until


def projection_event_ids(engine: Engine) -> list[str]:
    """Every event id in the example projection, one entry per row (duplicates kept)."""
    with engine.connect() as connection:
        return list(connection.execute(sqlalchemy.select(EXAMPLE_PROJECTION.c.event_id)).scalars())


@pytest.fixture
def read_projection_event_ids() -> Callable[[Engine], list[str]]:
    """`read_projection_event_ids(engine)`: see `projection_event_ids`."""
    return projection_event_ids
