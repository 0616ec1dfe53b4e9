"""Exactly once with the real broker and the real PostgreSQL: duplicate deliveries, a consumer killed
between apply and commit, a restart; TransferPosted reaches mahjong.ledger.v1; reconcile passes,
and fails naming a posting tampered with in the database."""

from __future__ import annotations

import contextlib
import time
import uuid

import grpc
import pytest
import sqlalchemy
from kafka import KafkaConsumer, KafkaProducer
from mahjong.v1 import envelope_pb2, ledger_service_pb2, ledger_service_pb2_grpc
from mahjong_ledger.app import LedgerProcess
from mahjong_ledger.domain import Book, DepositOrder, PayeeLine, SettlementOrder, fold
from mahjong_ledger.models import ledger_accounts, ledger_postings
from mahjong_ledger.projection import SettlementProjection
from mahjong_ledger.reconcile import reconcile
from mahjong_ledger.repository import LedgerRepository
from mahjong_ledger.settings import LedgerSettings
from mahjong_ledger.testing import instruction_envelope, payee
from mahjong_platform.auth import mint_token
from mahjong_platform.config import load_settings
from mahjong_platform.database import create_session_factory, transaction
from mahjong_platform.envelopes import serialize_envelope
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_client import bearer_metadata
from mahjong_platform.outbox import OutboxRelay, count_unsent_outbox_messages
from mahjong_platform.topics import Topics, ensure_topics
from mahjong_platform.tracked_consumer import MessagePosition, TrackedConsumer
from sqlalchemy.engine import Engine

pytestmark = pytest.mark.integration

DEADLINE_SECONDS = 60.0
PLAYERS = ("a", "b", "c", "d")
SECRET = "ledger-integration-secret-long-enough-for-hs256"


@pytest.fixture
def topics(kafka_bootstrap_servers: str, unique_prefix: str) -> Topics:
    topics = Topics.with_prefix(unique_prefix)
    ensure_topics(kafka_bootstrap_servers, topics.all_names(), partitions=2)
    return topics


@pytest.fixture
def engine(postgresql_engine: Engine) -> Engine:
    return postgresql_engine


def game_envelopes(table_id: str) -> list[envelope_pb2.Envelope]:
    """One game's instructions: a kong, a win, a short payer (d), an escape, the rake."""
    instructions = [
        (
            "kong",
            "player:b",
            [payee("player:a", 200), payee("player:c", 200), payee("player:d", 200)],
            "exposed_kong",
        ),
        ("win", "player:c", [payee("player:a", 3_600)], "win"),
        (
            "short",
            "player:d",
            [payee("player:a", 600), payee("player:b", 400), payee("player:c", 200)],
            "win",
        ),
        (
            "escape",
            "player:b",
            [payee("house:escape", 3_200, "escape_penalty"), payee("player:c", 800, "escape_compensation")],
            "escape_penalty",
        ),
        *[(f"rake-{name}", f"player:{name}", [payee("house:rake", 400)], "rake") for name in PLAYERS],
    ]
    return [
        instruction_envelope(
            f"{table_id}|{key}", payer, payees, table_id=table_id, reason=reason, sequence=sequence
        )
        for sequence, (key, payer, payees, reason) in enumerate(instructions, start=1)
    ]


def expected_balances(envelopes: list[envelope_pb2.Envelope], funding: dict[str, int]) -> dict[str, int]:
    """The pure domain's answer: what a clean run must end with."""
    orders: list[SettlementOrder | DepositOrder] = [
        DepositOrder(account, beans, f"fund:{account}") for account, beans in funding.items()
    ]
    for envelope in envelopes:
        message = envelope.settlement_instructed
        orders.append(
            SettlementOrder(
                instruction_id=message.instruction_id,
                table_id=message.table_id,
                room_id=message.room_id,
                reason=message.reason,
                payer_account=message.payer_account,
                payees=tuple(PayeeLine(line.account, line.beans, line.reason) for line in message.payees),
            )
        )
    book, _ = fold(Book(), orders)
    return {account: beans for account, beans in book.balances.items()}


def balances(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        rows = connection.execute(
            sqlalchemy.select(ledger_accounts.c.account, ledger_accounts.c.balance_beans)
        )
        return {row.account: int(row.balance_beans) for row in rows}


def produce(bootstrap_servers: str, topic: str, envelopes: list[envelope_pb2.Envelope]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all")
    try:
        for envelope in envelopes:
            producer.send(topic, key=envelope.stream_id.encode(), value=serialize_envelope(envelope))
        producer.flush(timeout=30)
    finally:
        producer.close()


def poll_until_applied(consumer: TrackedConsumer, engine: Engine, expected: dict[str, int]) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while balances(engine) != expected:
        if time.monotonic() > deadline:
            pytest.fail(f"balances {balances(engine)} never reached {expected}")
        consumer.poll_once(timeout_ms=200)


def read_topic(bootstrap_servers: str, topic: str, count: int) -> list[envelope_pb2.Envelope]:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=1_000,
    )
    envelopes: list[envelope_pb2.Envelope] = []
    deadline = time.monotonic() + DEADLINE_SECONDS
    try:
        while len(envelopes) < count and time.monotonic() < deadline:
            for record in consumer:
                envelope = envelope_pb2.Envelope()
                envelope.ParseFromString(record.value)
                envelopes.append(envelope)
    finally:
        consumer.close()
    return envelopes


def test_instructions_apply_exactly_once_through_duplicates_a_crash_and_a_restart(
    kafka_bootstrap_servers: str, topics: Topics, engine: Engine, unique_prefix: str
) -> None:
    repository = LedgerRepository(EventStore(topics=topics))
    session_factory = create_session_factory(engine)
    funding = {"player:a": 10_000, "player:b": 10_000, "player:c": 10_000, "player:d": 700}
    with transaction(session_factory) as session:
        for account, beans in funding.items():
            repository.deposit(session, DepositOrder(account, beans, f"fund:{account}"))
    envelopes = game_envelopes("table-1")
    expected = expected_balances(envelopes, funding)

    # Every message delivered twice, and the win re-emitted under a new event id (a scoring restart).
    reemitted = envelope_pb2.Envelope()
    reemitted.CopyFrom(envelopes[1])
    reemitted.event_id = str(uuid.uuid4())
    produce(kafka_bootstrap_servers, topics.settlement, [*envelopes, *envelopes, reemitted])

    crashes: list[MessagePosition] = []

    def crash_once_between_apply_and_commit(position: MessagePosition) -> None:
        if not crashes and position.offset == 2:
            crashes.append(position)
            raise RuntimeError("killed between apply and commit")

    projection = SettlementProjection(repository)

    def new_consumer(before_commit: object = None) -> TrackedConsumer:
        return TrackedConsumer(
            engine,
            kafka_bootstrap_servers,
            unique_prefix + "ledger",
            [topics.settlement],
            projection.handle,
            topics.dead_letter,
            session_timeout_ms=6_000,
            heartbeat_interval_ms=500,
            before_commit=before_commit,  # type: ignore[arg-type]
        )

    consumer = new_consumer(crash_once_between_apply_and_commit)
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not crashes:
            if time.monotonic() > deadline:
                pytest.fail("the consumer never reached the crash point")
            with contextlib.suppress(RuntimeError):
                consumer.poll_once(timeout_ms=200)
    finally:
        consumer.close()

    restarted = new_consumer()
    try:
        poll_until_applied(restarted, engine, expected)
        for _ in range(10):  # Whatever is left (the duplicates) must change nothing.
            restarted.poll_once(timeout_ms=200)
    finally:
        restarted.close()
    assert balances(engine) == expected
    assert expected["player:d"] == 0 and all(
        beans >= 0 for account, beans in expected.items() if account != "world"
    )

    with OutboxRelay(engine, kafka_bootstrap_servers) as relay:
        while relay.run_once():
            pass
    with transaction(session_factory) as session:
        assert count_unsent_outbox_messages(session) == 0
    posted = read_topic(kafka_bootstrap_servers, topics.ledger, len(envelopes) + len(funding))
    table_transfers = [event.transfer_posted for event in posted if event.stream_id == "table-1"]
    assert sorted(transfer.instruction_id for transfer in table_transfers) == sorted(
        envelope.settlement_instructed.instruction_id for envelope in envelopes
    )
    short = next(transfer for transfer in table_transfers if transfer.instruction_id.endswith("|short"))
    # d had 700 and received 200 from the kong: the 1,200 owed became 900, split pro rata.
    assert (short.requested_beans, short.posted_beans) == (1_200, 900)

    with transaction(session_factory) as session:
        report = reconcile(session)
    assert report.ok, report.findings
    assert (report.games_checked, report.instructions_checked) == (1, len(envelopes))

    with transaction(session_factory) as session:
        tampered_id = session.execute(
            sqlalchemy.select(sqlalchemy.func.max(ledger_postings.c.posting_id)).where(
                ledger_postings.c.account == "house:rake"
            )
        ).scalar_one()
        session.execute(
            ledger_postings.update().where(ledger_postings.c.posting_id == tampered_id).values(beans=4_000)
        )
    with transaction(session_factory) as session:
        report = reconcile(session)
    assert not report.ok
    assert any(f"posting {tampered_id} " in finding.subject for finding in report.findings)
    assert any(
        finding.check == "game_sum" and finding.subject == "table table-1" for finding in report.findings
    )


def test_the_ledger_process_consumes_serves_and_publishes(
    kafka_bootstrap_servers: str, topics: Topics, postgres_database_url: str, unique_prefix: str
) -> None:
    settings = load_settings(
        {
            "MAHJONG_JWT_SECRET": SECRET,
            "MAHJONG_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap_servers,
            "MAHJONG_TOPIC_PREFIX": unique_prefix,
            "MAHJONG_TOPIC_PARTITIONS": "2",
            "MAHJONG_LEDGER_DATABASE_URL": postgres_database_url,
            "MAHJONG_LEDGER_GRPC_ADDRESS": "127.0.0.1:0",
            # An ephemeral metrics port too: the default 9154 may belong to a running system.
            "MAHJONG_LEDGER_METRICS_ADDRESS": "127.0.0.1:0",
        }
    )
    process = LedgerProcess(
        settings, LedgerSettings(starting_grant_beans=5_000), consumer_group=unique_prefix + "g"
    )
    process.start()
    try:
        assert process.server is not None
        with grpc.insecure_channel(f"127.0.0.1:{process.server.port}") as channel:
            stub = ledger_service_pb2_grpc.LedgerServiceStub(channel)
            ops = bearer_metadata(mint_token(SECRET, "operator", ["ops"]))
            for name in ("alice", "bob"):
                request = ledger_service_pb2.GetBalanceRequest(account=f"player:{name}")
                assert stub.GetBalance(request, metadata=ops).balance_beans == 5_000
            produce(
                kafka_bootstrap_servers,
                topics.settlement,
                [instruction_envelope("w-1", "player:bob", [payee("player:alice", 7_000)], table_id="t-9")],
            )
            deadline = time.monotonic() + DEADLINE_SECONDS
            alice = ledger_service_pb2.GetBalanceRequest(account="player:alice")
            while stub.GetBalance(alice, metadata=ops).balance_beans != 10_000:
                assert time.monotonic() < deadline, "the instruction was never applied"
                time.sleep(0.2)
            statement = stub.GetGameStatement(
                ledger_service_pb2.GetGameStatementRequest(table_id="t-9"), metadata=ops
            )
            assert statement.transfers[0].posted_beans == 5_000  # bob had only the grant
        posted = read_topic(kafka_bootstrap_servers, topics.ledger, 3)
        assert {event.transfer_posted.instruction_id for event in posted} == {
            "grant:alice",
            "grant:bob",
            "w-1",
        }
    finally:
        process.stop()
