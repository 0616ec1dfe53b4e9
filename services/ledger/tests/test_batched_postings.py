"""Posting a poll batch at once (set-based SQL) gives the ledger of posting one at a time, on SQLite
and PostgreSQL: double entry, pro-rata when short (RULES.md 1.9), idempotent per instruction, and
an account's ``opened_at`` is the earliest event time that touched it whatever the arrival order."""

from __future__ import annotations

import datetime
import logging
import pathlib

import pytest
import sqlalchemy
from mahjong.v1 import envelope_pb2
from mahjong_ledger.app import migrate
from mahjong_ledger.domain import DepositOrder, IdempotencyConflictError, TransferKind, transfer_id_for
from mahjong_ledger.models import LEDGER_TABLES, ledger_accounts, ledger_postings
from mahjong_ledger.projection import SettlementProjection
from mahjong_ledger.reconcile import reconcile
from mahjong_ledger.repository import LedgerRepository
from mahjong_ledger.testing import FIXED_TIME, game_settled_envelope, instruction_envelope, payee
from mahjong_platform.database import (
    SessionFactory,
    create_engine_for,
    create_session_factory,
    sqlite_url,
    transaction,
)
from mahjong_platform.event_store import EventStore
from mahjong_platform.query_plans import StatementRecorder, plans_for
from mahjong_platform.schema import stored_events
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import Delivery, MessagePosition

PLAYERS = [f"player:p{seat}" for seat in range(4)]


def game_stream() -> list[envelope_pb2.Envelope]:
    """Kongs, wins (one of them more than the payer holds: pro-rata), the rake, a re-sent
    instruction under a new event id, and the game's GameSettled; times one second apart."""
    specs = [
        ("kong-1", PLAYERS[0], [payee(other, 2_000) for other in PLAYERS[1:]], "exposed_kong"),
        ("win-1", PLAYERS[1], [payee(PLAYERS[2], 3_000)], "win"),
        ("win-2", PLAYERS[3], [payee(PLAYERS[0], 9_000), payee(PLAYERS[2], 6_000)], "win"),
        ("rake-0", PLAYERS[0], [payee("house:rake", 400)], "rake"),
        ("rake-2", PLAYERS[2], [payee("house:rake", 400)], "rake"),
        ("escape-1", PLAYERS[1], [payee(PLAYERS[2], 500), payee("house:escape", 700)], "escape_penalty"),
    ]
    envelopes = [
        instruction_envelope(
            key,
            payer,
            payees,
            reason=reason,
            sequence=index + 1,
            occurred_at=FIXED_TIME + datetime.timedelta(seconds=index),
        )
        for index, (key, payer, payees, reason) in enumerate(specs)
    ]
    resent = envelope_pb2.Envelope()
    resent.CopyFrom(envelopes[2])
    resent.event_id = "resent-win-2"
    return [*envelopes, resent, game_settled_envelope("table-1", len(specs), len(specs) + 1)]


def ledger_rows(session_factory: SessionFactory) -> dict[str, list[tuple[object, ...]]]:
    rows: dict[str, list[tuple[object, ...]]] = {}
    with transaction(session_factory) as session:
        for table in LEDGER_TABLES:
            columns = [column for column in table.columns if column.name != "posting_id"]
            keys = [column for column in table.primary_key.columns if column.name != "posting_id"]
            order = keys or [table.c.transfer_id, table.c.account]
            rows[table.name] = [
                tuple(row) for row in session.execute(sqlalchemy.select(*columns).order_by(*order))
            ]
        rows["stored_events"] = [
            (row.stream_id, row.sequence, bytes(row.envelope))
            for row in session.execute(
                sqlalchemy.select(stored_events).order_by(stored_events.c.stream_id, stored_events.c.sequence)
            )
        ]
    return rows


def apply_in_batches(
    database_url: str, envelopes: list[envelope_pb2.Envelope], batch_size: int
) -> dict[str, list[tuple[object, ...]]]:
    migrate(database_url)
    engine = create_engine_for(database_url)
    try:
        session_factory = create_session_factory(engine)
        repository = LedgerRepository(EventStore(Topics.with_prefix("test.")), clock=lambda: FIXED_TIME)
        with transaction(session_factory) as session:
            # The payer of win-2 holds less than the 15,000 owed: pro-rata (RULES.md 1.9).
            for account, beans in zip(PLAYERS, (20_000, 20_000, 20_000, 7_000), strict=True):
                repository.deposit(session, DepositOrder(account, beans, f"fund:{account}"))
        projection = SettlementProjection(repository)
        for start in range(0, len(envelopes), batch_size):
            batch = [
                Delivery(envelope, MessagePosition("test.mahjong.settlement.v1", 0, start + index))
                for index, envelope in enumerate(envelopes[start : start + batch_size])
            ]
            with transaction(session_factory) as session:
                projection.handle_batch(session, batch)
        with transaction(session_factory) as session:
            report = reconcile(session)
        assert report.ok, report.findings
        return ledger_rows(session_factory)
    finally:
        engine.dispose()


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.integration),
    ]
)
def backend_urls(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> list[str]:
    """Three fresh empty databases of one backend."""
    if request.param == "sqlite":
        return [sqlite_url(tmp_path / f"data-{number}", "ledger") for number in range(3)]
    create = request.getfixturevalue("postgres_database_factory")
    return [create(f"batch{number}") for number in range(3)]


def test_batches_of_any_size_post_what_one_at_a_time_posts(backend_urls: list[str]) -> None:
    envelopes = game_stream()
    one_at_a_time = apply_in_batches(backend_urls[0], envelopes, 1)
    win_2 = transfer_id_for(TransferKind.SETTLEMENT, "win-2")
    win_2_postings = {row[1]: row[2] for row in one_at_a_time["ledger_postings"] if row[0] == win_2}
    # The payer held 7,000 + 2,000 (kong-1) of the 15,000 owed: all of it, pro-rata 6:4 (RULES.md 1.9).
    assert win_2_postings == {PLAYERS[3]: -9_000, PLAYERS[0]: 5_400, PLAYERS[2]: 3_600}
    for url, batch_size in zip(backend_urls[1:], (3, len(envelopes)), strict=True):
        assert apply_in_batches(url, envelopes, batch_size) == one_at_a_time, batch_size


def test_a_reused_instruction_id_with_other_content_fails_the_whole_batch(
    session_factory: SessionFactory, repository: LedgerRepository, projection: SettlementProjection
) -> None:
    good = instruction_envelope("kong-1", PLAYERS[0], [payee(PLAYERS[1], 100)], reason="exposed_kong")
    clash = instruction_envelope(
        "kong-1", PLAYERS[0], [payee(PLAYERS[1], 999)], reason="exposed_kong", sequence=2
    )
    with transaction(session_factory) as session:
        repository.deposit(session, DepositOrder(PLAYERS[0], 1_000, "fund"))
    with pytest.raises(IdempotencyConflictError), transaction(session_factory) as session:
        projection.handle_batch(
            session, [Delivery(good, MessagePosition("t", 0, 0)), Delivery(clash, MessagePosition("t", 0, 1))]
        )
    with transaction(session_factory) as session:
        assert (
            session.execute(
                sqlalchemy.select(sqlalchemy.func.count()).select_from(ledger_postings)
            ).scalar_one()
            == 2
        )


def test_an_account_is_opened_at_the_earliest_event_time_whatever_the_arrival_order(
    session_factory: SessionFactory, projection: SettlementProjection, repository: LedgerRepository
) -> None:
    """#12.4: two tables' escapes reach house:escape out of time order (they sit on different
    partitions); opened_at is the earlier event's time, as a rebuild in time order gives."""
    with transaction(session_factory) as session:
        for account in PLAYERS[:2]:
            repository.deposit(session, DepositOrder(account, 5_000, f"fund:{account}"))
    later, earlier = (
        instruction_envelope(
            f"escape-{index}",
            PLAYERS[index],
            [payee("house:escape", 700)],
            reason="escape_penalty",
            table_id=f"table-{index}",
            occurred_at=FIXED_TIME + datetime.timedelta(seconds=10 - 5 * index),
        )
        for index in range(2)
    )
    for envelope in (later, earlier):
        with transaction(session_factory) as session:
            projection.handle_batch(session, [Delivery(envelope, MessagePosition("t", 0, 0))])
    with transaction(session_factory) as session:
        opened_at = session.execute(
            sqlalchemy.select(ledger_accounts.c.opened_at).where(ledger_accounts.c.account == "house:escape")
        ).scalar_one()
    assert opened_at.replace(tzinfo=datetime.UTC) == FIXED_TIME + datetime.timedelta(seconds=5)


def test_the_posting_lookups_search_the_transfer_key_instead_of_scanning(backend_urls: list[str]) -> None:
    """Every posting looks its keys up among the transfers ever posted (idempotency, repeats, kong
    income): by order keys alone the unique (kind, order_key) index cannot be searched and each
    batch read the whole table. The databases' own plans of every statement that deposits, posts
    a game in batches and repeats a deposit run must search an index."""
    url = backend_urls[0]
    migrate(url)
    engine = create_engine_for(url)
    session_factory = create_session_factory(engine)
    repository = LedgerRepository(EventStore(Topics.with_prefix("test.")), clock=lambda: FIXED_TIME)
    projection = SettlementProjection(repository)
    envelopes = game_stream()
    recorder = StatementRecorder()
    recorder.label(url, "ledger")
    recorder.start()
    try:
        for order in (DepositOrder(PLAYERS[0], 20_000, "fund"), DepositOrder(PLAYERS[0], 20_000, "fund")):
            with transaction(session_factory) as session:
                repository.deposit(session, order)  # the second: the stored transfer, not a new one
        for start in range(0, len(envelopes), 3):
            batch = [
                Delivery(envelope, MessagePosition("test.mahjong.settlement.v1", 0, start + index))
                for index, envelope in enumerate(envelopes[start : start + 3])
            ]
            with transaction(session_factory) as session:
                projection.handle_batch(session, batch)
    finally:
        (statements,) = recorder.stop().values()
        engine.dispose()
    assert not recorder.failures, recorder.failures
    lookups = [text for text in statements if "FROM ledger_transfers" in text]
    assert len(lookups) >= 2, lookups  # the batch's digests, the repeated deposit's record
    with sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool).connect() as connection:
        plans = plans_for(connection, bounded=())
        for recorded in statements.values():
            for parameters in recorded.parameters:
                assert plans.scans(recorded.statement, parameters) == [], recorded.statement


def test_a_batch_logs_at_info_only_when_it_skips_instructions_posted_before(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The postings are counted by the metrics: a batch of new instructions logs no INFO line (one
    a batch cost about 3% of the ledger's CPU); a batch that skips a re-sent one says so."""
    envelopes = game_stream()
    resent = next(envelope for envelope in envelopes if envelope.event_id == "resent-win-2")
    with caplog.at_level(logging.INFO, logger="mahjong_ledger.projection"):
        apply_in_batches(sqlite_url(tmp_path, "ledger"), [e for e in envelopes if e is not resent], 100)
        assert [record.getMessage() for record in caplog.records if record.levelno >= logging.INFO] == []
    database_url = sqlite_url(tmp_path, "ledger-resent")
    with caplog.at_level(logging.INFO, logger="mahjong_ledger.projection"):
        apply_in_batches(database_url, envelopes, 100)
    skipped = [record for record in caplog.records if record.levelno >= logging.INFO]
    assert [record.getMessage() for record in skipped] == ["settlement instructions skipped as posted before"]
    assert skipped[0].already_posted == 1  # type: ignore[attr-defined]
