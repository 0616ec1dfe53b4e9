"""Exactly once with the real broker and PostgreSQL, across scoring and the ledger (issue 5, Tests).

One complete game's table events go to the table topic; the real scoring projection (a tracked
consumer of the table topic, its outbox relayed to the settlement topic) and the real ledger
projection (a tracked consumer of the settlement topic) run on their own PostgreSQL databases with
a per-test topic prefix. On the way:

(a) every table event is delivered twice, and every settlement event is delivered twice too;
(b) the ledger is killed between apply and commit (the tracked consumer's `before_commit` hook
    raises), then restarted as a fresh consumer and projection;
(c) the scoring consumer is restarted mid-game as a fresh consumer and projection.

The final balances must equal a clean run: the pure pipeline (scoring's `game_settlement` and the
ledger's `Book`, which the SQL ledger is tested to equal) over the same events once each.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator, Sequence

import pytest
import sqlalchemy
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from mahjong.v1 import envelope_pb2
from mahjong_ledger.app import migrate as migrate_ledger
from mahjong_ledger.models import ledger_accounts
from mahjong_ledger.projection import SettlementProjection as LedgerProjection
from mahjong_ledger.repository import LedgerRepository
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.envelopes import parse_envelope, serialize_envelope
from mahjong_platform.event_store import EventStore
from mahjong_platform.migrations import upgrade
from mahjong_platform.outbox import OutboxRelay, count_unsent_outbox_messages
from mahjong_platform.topics import Topics, ensure_topics
from mahjong_platform.tracked_consumer import MessagePosition, TrackedConsumer
from mahjong_rules.room_rules import RoomRules
from mahjong_scoring.projection import CONSUMER_GROUP as SCORING_GROUP
from mahjong_scoring.projection import SettlementProjection as ScoringProjection
from mahjong_table.core.events import TableEvent
from mahjong_table.selfplay import random_legal_command
from mahjong_table.sichuan.decide import open_table
from mahjong_table.testing import Table
from sqlalchemy.engine import Engine

from .money_pipeline import funding_orders, settle_and_post, starting, table_envelopes

pytestmark = pytest.mark.integration

# The first consumer group on a fresh broker makes it create `__consumer_offsets`, which on a
# loaded machine takes minutes; later groups join in about a second.
DEADLINE_SECONDS = 300.0
POLL_TIMEOUT_MS = 100
# Seed 5 with these options: exposed and added kongs, three wins, kong refunds, the
# rake, and a payer (seat 3, 600 beans) too short for what it owes: pro-rata splits.
GAME_SEED = 5
GAME_RULES = RoomRules(coefficient=100, rake_beans=400)
FUNDING = starting(20_000, 20_000, 20_000, 600)


def complete_game() -> list[TableEvent]:
    table = Table(open_table(f"table-{GAME_SEED}", "room-1", GAME_RULES, ["p0", "p1", "p2", "p3"], GAME_SEED))
    generator = random.Random(GAME_SEED)
    while not table.state.is_over:
        table.act(random_legal_command(table.state, generator, leave_chance=0.0, greedy_chance=0.5))
    return table.events


@pytest.fixture
def topics(kafka_bootstrap_servers: str, unique_prefix: str) -> Topics:
    topics = Topics.with_prefix(unique_prefix)
    ensure_topics(kafka_bootstrap_servers, topics.all_names(), partitions=1)
    return topics


def _migrated(url: str, migrate: Callable[[str], None]) -> Iterator[Engine]:
    migrate(url)
    engine = create_engine_for(url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def scoring_engine(postgres_database_factory: Callable[[str], str]) -> Iterator[Engine]:
    yield from _migrated(
        postgres_database_factory("scoring"), lambda url: upgrade(url, "mahjong_scoring:alembic")
    )


@pytest.fixture
def ledger_engine(postgres_database_factory: Callable[[str], str]) -> Iterator[Engine]:
    yield from _migrated(postgres_database_factory("ledger"), migrate_ledger)


def produce(bootstrap_servers: str, topic: str, envelopes: Sequence[envelope_pb2.Envelope]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all")
    try:
        for envelope in envelopes:
            producer.send(topic, key=envelope.stream_id.encode(), value=serialize_envelope(envelope))
        producer.flush(timeout=30)
    finally:
        producer.close()


def read_topic(bootstrap_servers: str, topic: str) -> list[envelope_pb2.Envelope]:
    """Everything on a (one-partition) topic now, from the beginning."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False, group_id=None)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        end = consumer.end_offsets([partition])[partition]
        consumer.seek_to_beginning(partition)
        envelopes: list[envelope_pb2.Envelope] = []
        deadline = time.monotonic() + DEADLINE_SECONDS
        while consumer.position(partition) < end:
            assert time.monotonic() < deadline, f"read {len(envelopes)} of {end} events of {topic} in time"
            for records in consumer.poll(timeout_ms=POLL_TIMEOUT_MS).values():
                envelopes.extend(parse_envelope(record.value) for record in records)
        return envelopes
    finally:
        consumer.close(autocommit=False)


def scoring_consumer(engine: Engine, bootstrap_servers: str, topics: Topics, prefix: str) -> TrackedConsumer:
    """A fresh scoring process: a new consumer and a new projection (nothing in memory)."""
    return TrackedConsumer(
        engine,
        bootstrap_servers,
        prefix + SCORING_GROUP,
        [topics.table],
        ScoringProjection(EventStore(topics)),
        topics.dead_letter,
        session_timeout_ms=6_000,
        heartbeat_interval_ms=500,
    )


def ledger_consumer(
    engine: Engine,
    bootstrap_servers: str,
    topics: Topics,
    prefix: str,
    before_commit: Callable[[MessagePosition], None] | None = None,
) -> TrackedConsumer:
    """A fresh ledger process: a new consumer, repository and projection."""
    return TrackedConsumer(
        engine,
        bootstrap_servers,
        prefix + "ledger-settlement",
        [topics.settlement],
        LedgerProjection(LedgerRepository(EventStore(topics=topics))).handle,
        topics.dead_letter,
        session_timeout_ms=6_000,
        heartbeat_interval_ms=500,
        before_commit=before_commit,
    )


def consume(consumer: TrackedConsumer, message_count: int) -> None:
    """Poll until `message_count` messages were handled (applied or skipped as duplicates)."""
    handled = 0
    deadline = time.monotonic() + DEADLINE_SECONDS
    while handled < message_count:
        assert time.monotonic() < deadline, f"handled {handled} of {message_count} messages in time"
        handled += consumer.poll_once(timeout_ms=POLL_TIMEOUT_MS)


def relay_all(engine: Engine, bootstrap_servers: str) -> None:
    session_factory = create_session_factory(engine)
    with OutboxRelay(engine, bootstrap_servers) as relay:
        while True:
            relay.run_once()
            with transaction(session_factory) as session:
                if count_unsent_outbox_messages(session) == 0:
                    return


def balances(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        rows = connection.execute(
            sqlalchemy.select(ledger_accounts.c.account, ledger_accounts.c.balance_beans)
        )
        return {row.account: int(row.balance_beans) for row in rows if row.balance_beans != 0}


def twice(envelopes: Sequence[envelope_pb2.Envelope]) -> list[envelope_pb2.Envelope]:
    return [envelope for envelope in envelopes for _ in range(2)]


def test_balances_equal_a_clean_run_despite_duplicates_a_killed_ledger_and_a_restarted_scoring(
    kafka_bootstrap_servers: str,
    topics: Topics,
    unique_prefix: str,
    scoring_engine: Engine,
    ledger_engine: Engine,
) -> None:
    game = complete_game()
    table_events = table_envelopes(game)
    clean = settle_and_post(game, FUNDING)
    expected = {account: beans for account, beans in clean.book.balances.items() if beans != 0}
    assert any(transfer.posted_beans < transfer.requested_beans for transfer in clean.transfers)
    assert {"exposed_kong", "added_kong", "win", "kong_refund", "rake"} <= {
        line.reason for line in clean.instructions
    }

    repository = LedgerRepository(EventStore(topics=topics))
    with transaction(create_session_factory(ledger_engine)) as session:
        for order in funding_orders(FUNDING):
            repository.deposit(session, order)

    # (a) + (c): the first half of the game, each event twice, to one scoring process; the rest,
    # each event twice again, to a fresh one.
    middle = len(table_events) // 2
    produce(kafka_bootstrap_servers, topics.table, twice(table_events[:middle]))
    with scoring_consumer(scoring_engine, kafka_bootstrap_servers, topics, unique_prefix) as first:
        consume(first, 2 * middle)
    produce(kafka_bootstrap_servers, topics.table, twice(table_events[middle:]))
    with scoring_consumer(scoring_engine, kafka_bootstrap_servers, topics, unique_prefix) as second:
        consume(second, 2 * (len(table_events) - middle))
    relay_all(scoring_engine, kafka_bootstrap_servers)
    settlement_events = read_topic(kafka_bootstrap_servers, topics.settlement)
    assert [event.event_id for event in settlement_events] == [
        envelope.event_id for envelope in clean.output.envelopes
    ], "scoring published each settlement event once, as the pure fold does"

    # (a) again, downstream: every settlement event is delivered a second time.
    produce(kafka_bootstrap_servers, topics.settlement, settlement_events)
    message_count = 2 * len(settlement_events)

    # (b): the ledger dies between applying the middle instruction and committing it.
    crash_offset = len(settlement_events) // 2
    crashes: list[MessagePosition] = []

    def crash_once(position: MessagePosition) -> None:
        if not crashes and position.offset == crash_offset:
            crashes.append(position)
            raise RuntimeError("ledger killed between apply and commit")

    killed = ledger_consumer(ledger_engine, kafka_bootstrap_servers, topics, unique_prefix, crash_once)
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not crashes:
            assert time.monotonic() < deadline, "the ledger never reached the crash point"
            with contextlib.suppress(RuntimeError):
                killed.poll_once(timeout_ms=POLL_TIMEOUT_MS)
    finally:
        killed.close()
    assert balances(ledger_engine) != expected, "the crash happened mid-game"

    with ledger_consumer(ledger_engine, kafka_bootstrap_servers, topics, unique_prefix) as restarted:
        consume(restarted, message_count - crash_offset)
        for _ in range(3):  # nothing more arrives, nothing more changes
            assert restarted.poll_once(timeout_ms=POLL_TIMEOUT_MS) == 0
    assert balances(ledger_engine) == expected
    assert read_topic(kafka_bootstrap_servers, topics.dead_letter) == []
