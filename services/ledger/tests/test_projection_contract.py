"""The settlement projection and the SQL ledger: one contract, run on SQLite and on PostgreSQL.

The handler is called the way the tracked consumer calls it (inside one transaction); the Kafka
side is covered by test_exactly_once_with_kafka.py.
"""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy
from mahjong.v1 import envelope_pb2
from mahjong_ledger.domain import DepositOrder, IdempotencyConflictError, InvalidOrderError, TransferKind
from mahjong_ledger.models import ledger_accounts, ledger_metadata, ledger_postings, ledger_transfers
from mahjong_ledger.projection import SettlementProjection
from mahjong_ledger.reconcile import InstructedBeans, reconcile
from mahjong_ledger.repository import LedgerRepository
from mahjong_ledger.testing import game_settled_envelope, instruction_envelope, payee
from mahjong_platform.database import SessionFactory, transaction
from mahjong_platform.schema import outbox_messages, stored_events
from mahjong_platform.tracked_consumer import MessagePosition
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

POSITION = MessagePosition(topic="test.mahjong.settlement.v1", partition=0, offset=0)


def apply(
    session_factory: SessionFactory, projection: SettlementProjection, envelope: envelope_pb2.Envelope
) -> None:
    with transaction(session_factory) as session:
        projection.handle(session, envelope, POSITION)


def fund(session_factory: SessionFactory, repository: LedgerRepository, balances: dict[str, int]) -> None:
    with transaction(session_factory) as session:
        for account, beans in balances.items():
            repository.deposit(session, DepositOrder(account, beans, f"fund:{account}"))


def balances(session_factory: SessionFactory) -> dict[str, int]:
    with transaction(session_factory) as session:
        rows = session.execute(sqlalchemy.select(ledger_accounts.c.account, ledger_accounts.c.balance_beans))
        return {row.account: int(row.balance_beans) for row in rows}


def postings_sums(session_factory: SessionFactory) -> dict[str, int]:
    query = sqlalchemy.select(
        ledger_postings.c.account, sqlalchemy.func.sum(ledger_postings.c.beans)
    ).group_by(ledger_postings.c.account)
    with transaction(session_factory) as session:
        return {account: int(total) for account, total in session.execute(query)}


def transfer_posted_messages(session_factory: SessionFactory) -> list[envelope_pb2.Envelope]:
    query = sqlalchemy.select(outbox_messages.c.topic, outbox_messages.c.message_value).order_by(
        outbox_messages.c.id
    )
    envelopes = []
    with transaction(session_factory) as session:
        for row in session.execute(query):
            assert row.topic == "test.mahjong.ledger.v1"
            envelope = envelope_pb2.Envelope()
            envelope.ParseFromString(bytes(row.message_value))
            envelopes.append(envelope)
    return envelopes


def assert_books_balance(session_factory: SessionFactory) -> None:
    current = balances(session_factory)
    assert sum(current.values()) == 0
    assert {account: beans for account, beans in current.items() if beans} == {
        account: beans for account, beans in postings_sums(session_factory).items() if beans
    }
    assert all(beans >= 0 for account, beans in current.items() if account != "world")


def test_an_instruction_is_posted_with_its_transfer_posted_event_in_the_outbox(
    session_factory: SessionFactory, repository: LedgerRepository, projection: SettlementProjection
) -> None:
    fund(session_factory, repository, {"player:a": 10_000})
    envelope = instruction_envelope("win-1", "player:a", [payee("player:b", 3_600), payee("player:c", 1_000)])
    apply(session_factory, projection, envelope)

    assert balances(session_factory)["player:a"] == 10_000 - 4_600
    assert balances(session_factory)["player:b"] == 3_600
    assert_books_balance(session_factory)
    posted = [event for event in transfer_posted_messages(session_factory) if event.stream_id == "table-1"]
    assert len(posted) == 1
    transfer = posted[0].transfer_posted
    assert transfer.instruction_id == "win-1"
    assert (transfer.requested_beans, transfer.posted_beans) == (4_600, 4_600)
    assert {posting.account: posting.beans for posting in transfer.postings} == {
        "player:a": -4_600,
        "player:b": 3_600,
        "player:c": 1_000,
    }
    assert posted[0].causation_id == envelope.event_id


def test_the_same_instruction_in_two_events_is_posted_once(
    session_factory: SessionFactory, repository: LedgerRepository, projection: SettlementProjection
) -> None:
    fund(session_factory, repository, {"player:a": 10_000})
    first = instruction_envelope("win-1", "player:a", [payee("player:b", 100)])
    again = instruction_envelope("win-1", "player:a", [payee("player:b", 100)], sequence=2)
    apply(session_factory, projection, first)
    apply(session_factory, projection, again)
    assert balances(session_factory)["player:b"] == 100
    assert (
        len([event for event in transfer_posted_messages(session_factory) if event.stream_id == "table-1"])
        == 1
    )


def test_a_short_payer_pays_pro_rata_and_ends_at_zero(
    session_factory: SessionFactory, repository: LedgerRepository, projection: SettlementProjection
) -> None:
    fund(session_factory, repository, {"player:a": 1_001})
    apply(
        session_factory,
        projection,
        instruction_envelope(
            "win-1", "player:a", [payee("player:b", 600), payee("player:c", 400), payee("player:d", 200)]
        ),
    )
    current = balances(session_factory)
    assert (current["player:a"], current["player:b"], current["player:c"], current["player:d"]) == (
        0,
        502,
        333,
        166,
    )
    (event,) = [event for event in transfer_posted_messages(session_factory) if event.stream_id == "table-1"]
    assert (event.transfer_posted.requested_beans, event.transfer_posted.posted_beans) == (1_200, 1_001)
    assert_books_balance(session_factory)


def test_a_payer_with_nothing_records_the_instruction_with_nothing_posted(
    session_factory: SessionFactory, projection: SettlementProjection, repository: LedgerRepository
) -> None:
    apply(
        session_factory,
        projection,
        instruction_envelope("rake-1", "player:a", [payee("house:rake", 400)], reason="rake"),
    )
    with transaction(session_factory) as session:
        record = repository.find_transfer(session, TransferKind.SETTLEMENT, "rake-1")
    assert record is not None
    assert (record.requested_beans, record.posted_beans, record.postings) == (400, 0, ())
    assert balances(session_factory).get("player:a") == 0


def test_an_escape_with_too_few_beans_follows_rules_1_10(
    session_factory: SessionFactory, repository: LedgerRepository, projection: SettlementProjection
) -> None:
    fund(session_factory, repository, {"player:a": 1_000})
    envelope = instruction_envelope(
        "escape-1",
        "player:a",
        [
            payee("house:escape", 3_200, "escape_penalty"),
            payee("player:b", 800, "escape_compensation"),
            payee("player:c", 400, "escape_compensation"),
        ],
        reason="escape_penalty",
    )
    apply(session_factory, projection, envelope)
    current = balances(session_factory)
    assert (current["house:escape"], current["player:b"], current["player:c"], current["player:a"]) == (
        727,
        182,
        91,
        0,
    )


def test_an_instruction_id_reused_with_other_content_fails_and_changes_nothing(
    session_factory: SessionFactory, repository: LedgerRepository, projection: SettlementProjection
) -> None:
    fund(session_factory, repository, {"player:a": 10_000})
    apply(session_factory, projection, instruction_envelope("win-1", "player:a", [payee("player:b", 100)]))
    before = balances(session_factory)
    with pytest.raises(IdempotencyConflictError):
        apply(
            session_factory, projection, instruction_envelope("win-1", "player:a", [payee("player:b", 999)])
        )
    assert balances(session_factory) == before


def test_a_malformed_instruction_raises_for_the_dead_letter_topic(
    session_factory: SessionFactory, projection: SettlementProjection
) -> None:
    with pytest.raises(InvalidOrderError, match="'world' never receives"):
        apply(session_factory, projection, instruction_envelope("bad-1", "player:a", [payee("world", 1)]))
    assert balances(session_factory) == {}


def test_deposits_are_idempotent_and_return_the_first_answer(
    session_factory: SessionFactory, repository: LedgerRepository
) -> None:
    order = DepositOrder("player:a", 500, "key-1", memo="welcome")
    with transaction(session_factory) as session:
        first = repository.deposit(session, order)
    with transaction(session_factory) as session:
        repository.deposit(session, DepositOrder("player:a", 70, "key-2"))
    with transaction(session_factory) as session:
        retry = repository.deposit(session, order)
    assert first.newly_posted and not retry.newly_posted
    assert retry.record == first.record
    assert retry.record.balance_after_beans("player:a") == 500
    assert balances(session_factory) == {"player:a": 570, "world": -570}


def test_the_starting_grant_is_given_once_on_first_sight_only(
    session_factory: SessionFactory, repository: LedgerRepository
) -> None:
    with transaction(session_factory) as session:
        assert repository.ensure_starting_grant(session, "player:new", 100_000) is not None
    with transaction(session_factory) as session:
        assert repository.ensure_starting_grant(session, "player:new", 100_000) is None
        assert repository.ensure_starting_grant(session, "house:rake", 100_000) is None
        assert repository.ensure_starting_grant(session, "player:other", 0) is None
    assert balances(session_factory) == {"player:new": 100_000, "world": -100_000}


def test_the_database_refuses_a_negative_player_balance(session_factory: SessionFactory) -> None:
    with pytest.raises(IntegrityError), transaction(session_factory) as session:
        session.execute(
            ledger_accounts.insert().values(
                account="player:x", balance_beans=-1, opened_at=sqlalchemy.func.current_timestamp()
            )
        )


def test_entries_page_newest_first_without_gaps_or_repeats(
    session_factory: SessionFactory, repository: LedgerRepository
) -> None:
    with transaction(session_factory) as session:
        for number in range(1, 8):
            repository.deposit(session, DepositOrder("player:a", number, f"key-{number}"))
    seen: list[int] = []
    before: int | None = None
    while True:
        with transaction(session_factory) as session:
            page = repository.list_entries(session, "player:a", 3, before)
        if not page:
            break
        seen.extend(entry.beans for entry in page)
        before = page[-1].posting_id
    assert seen == [7, 6, 5, 4, 3, 2, 1]


def test_game_statement_lists_a_games_transfers_in_order(
    session_factory: SessionFactory, repository: LedgerRepository, projection: SettlementProjection
) -> None:
    fund(session_factory, repository, {"player:a": 10_000, "player:b": 10_000})
    apply(
        session_factory,
        projection,
        instruction_envelope("k-1", "player:a", [payee("player:b", 200)], sequence=1),
    )
    apply(
        session_factory,
        projection,
        instruction_envelope("w-1", "player:b", [payee("player:a", 900)], sequence=2),
    )
    apply(
        session_factory,
        projection,
        instruction_envelope("other", "player:b", [payee("player:a", 1)], table_id="t2"),
    )
    with transaction(session_factory) as session:
        records = repository.transfers_of_table(session, "table-1")
    assert [record.order_key for record in records] == ["k-1", "w-1"]


def test_reconcile_passes_on_a_clean_ledger_and_counts_games_and_instructions(
    session_factory: SessionFactory, repository: LedgerRepository, projection: SettlementProjection
) -> None:
    fund(session_factory, repository, {"player:a": 500, "player:b": 10_000})
    apply(
        session_factory,
        projection,
        instruction_envelope("w-1", "player:a", [payee("player:b", 900)], sequence=1),
    )
    apply(
        session_factory,
        projection,
        instruction_envelope("r-1", "player:b", [payee("house:rake", 50)], reason="rake", sequence=2),
    )
    apply(session_factory, projection, game_settled_envelope("table-1", instruction_count=2, sequence=3))
    with transaction(session_factory) as session:
        report = reconcile(session)
    assert report.ok, report.findings
    assert (report.accounts_sum_beans, report.games_checked, report.instructions_checked) == (0, 1, 2)


def test_reconcile_names_a_tampered_posting(
    session_factory: SessionFactory, repository: LedgerRepository, projection: SettlementProjection
) -> None:
    fund(session_factory, repository, {"player:a": 10_000})
    apply(session_factory, projection, instruction_envelope("w-1", "player:a", [payee("player:b", 900)]))
    with transaction(session_factory) as session:
        posting_id = session.execute(
            sqlalchemy.select(ledger_postings.c.posting_id).where(ledger_postings.c.account == "player:b")
        ).scalar_one()
        session.execute(
            ledger_postings.update().where(ledger_postings.c.posting_id == posting_id).values(beans=9_000)
        )
    with transaction(session_factory) as session:
        report = reconcile(session)
    assert not report.ok
    checks = {finding.check for finding in report.findings}
    assert {
        "trial_balance",
        "balance_matches_postings",
        "running_balance",
        "transfer_sum",
        "game_sum",
    } <= checks
    running = [finding for finding in report.findings if finding.check == "running_balance"]
    assert f"posting {posting_id} " in running[0].subject
    assert any(
        "player:b" in finding.subject
        for finding in report.findings
        if finding.check == "balance_matches_postings"
    )


def test_reconcile_finds_a_missing_instruction_and_a_scoring_mismatch(
    session_factory: SessionFactory, repository: LedgerRepository, projection: SettlementProjection
) -> None:
    fund(session_factory, repository, {"player:a": 10_000})
    apply(
        session_factory,
        projection,
        instruction_envelope("w-1", "player:a", [payee("player:b", 900)], sequence=1),
    )
    apply(session_factory, projection, game_settled_envelope("table-1", instruction_count=2, sequence=2))

    class Scoring:
        def instructions(self, from_time: object, to_time: object) -> dict[str, InstructedBeans]:
            return {"w-1": InstructedBeans("table-1", 800), "w-2": InstructedBeans("table-1", 5)}

    with transaction(session_factory) as session:
        report = reconcile(session, scoring=Scoring())
    details = {(finding.check, finding.subject): finding.detail for finding in report.findings}
    assert "announced 2 instructions, the ledger posted 1" in details[("posted_once", "table table-1")]
    assert "scoring asked 800" in details[("matches_scoring", "instruction 'w-1'")]
    assert "never posted" in details[("matches_scoring", "instruction 'w-2'")]


def test_reconcile_window_selects_transfers_by_time(
    session_factory: SessionFactory, repository: LedgerRepository, projection: SettlementProjection
) -> None:
    import datetime

    fund(session_factory, repository, {"player:a": 10_000})
    early = datetime.datetime(2024, 6, 1, tzinfo=datetime.UTC)
    apply(
        session_factory,
        projection,
        instruction_envelope("old", "player:a", [payee("player:b", 1)], occurred_at=early),
    )
    apply(
        session_factory,
        projection,
        instruction_envelope("new", "player:a", [payee("player:b", 1)], table_id="t2"),
    )
    with transaction(session_factory) as session:
        report = reconcile(session, from_time=datetime.datetime(2024, 12, 1, tzinfo=datetime.UTC))
    assert report.ok and report.instructions_checked == 1


def test_migrations_create_exactly_the_modelled_tables(engine: Engine) -> None:
    inspector = sqlalchemy.inspect(engine)
    for table in ledger_metadata.sorted_tables:
        columns = {column["name"] for column in inspector.get_columns(table.name)}
        assert columns == {column.name for column in table.columns}, table.name
    assert {"stored_events", "outbox_messages", "consumer_positions", "processed_events"} <= set(
        inspector.get_table_names()
    )


def test_transfer_posted_events_are_in_the_event_store_under_the_table_stream(
    session_factory: SessionFactory, repository: LedgerRepository, projection: SettlementProjection
) -> None:
    fund(session_factory, repository, {"player:a": 10_000})
    for sequence in (1, 2):
        apply(
            session_factory,
            projection,
            instruction_envelope(f"w-{sequence}", "player:a", [payee("player:b", 1)], sequence=sequence),
        )
    with transaction(session_factory) as session:
        rows = session.execute(
            sqlalchemy.select(stored_events.c.sequence, stored_events.c.event_type)
            .where(stored_events.c.stream_id == "table-1")
            .order_by(stored_events.c.sequence)
        ).all()
        transfer_ids = session.execute(sqlalchemy.select(ledger_transfers.c.transfer_id)).scalars().all()
    assert [(row.sequence, row.event_type) for row in rows] == [(1, "TransferPosted"), (2, "TransferPosted")]
    assert all(uuid.UUID(transfer_id) for transfer_id in transfer_ids)


def test_the_live_consumer_keeps_no_processed_ids_and_posts_re_sent_events_once(
    engine: Engine, session_factory: SessionFactory, repository: LedgerRepository
) -> None:
    """The consumer the ledger runs (`app.definition`) leaves re-sent events to the repository's
    idempotency keys: an instruction and its game's `GameSettled`, each sent again within the batch
    and in a later one, move the beans once, announce one `TransferPosted`, record the game once,
    and leave no `processed_events`; the re-sends count as duplicates, not as applied (so the
    settlement lag is observed once per game)."""
    from mahjong_ledger.app import definition
    from mahjong_ledger.models import ledger_games
    from mahjong_ledger.settings import LedgerSettings
    from mahjong_platform.config import load_settings
    from mahjong_platform.schema import processed_events
    from mahjong_platform.testing import batch_applier_of
    from mahjong_platform.topics import Topics
    from mahjong_platform.tracked_consumer import Delivery

    fund(session_factory, repository, {"player:a": 10_000})
    (consumer,) = definition(LedgerSettings()).consumers(
        engine, load_settings({}), Topics.with_prefix("test.")
    )
    win = instruction_envelope("instruction-1", "player:a", [payee("player:b", 400)])
    settled = game_settled_envelope("table-1", instruction_count=1, sequence=2)
    failures: list[str] = []
    applier = batch_applier_of(consumer, session_factory, lambda delivery, error: failures.append(error))
    offsets = iter(range(100))
    outcomes = []
    for batch in ([win, settled, win], [settled, win]):
        deliveries = [Delivery(event, MessagePosition(POSITION.topic, 0, next(offsets))) for event in batch]
        outcomes.append(applier.apply(deliveries, [delivery.position for delivery in deliveries]))
    assert failures == []
    assert [(outcome.applied, outcome.duplicates) for outcome in outcomes] == [(2, 1), (0, 2)]
    assert outcomes[0].applied_events == [win, settled]
    assert balances(session_factory) == {"world": -10_000, "player:a": 9_600, "player:b": 400}
    assert len(transfer_posted_messages(session_factory)) == 2  # the deposit and the win
    assert_books_balance(session_factory)
    with transaction(session_factory) as session:
        assert len(session.execute(sqlalchemy.select(ledger_games)).all()) == 1
        assert session.execute(sqlalchemy.select(processed_events)).all() == []


def test_the_rebuild_counts_re_sent_events_as_duplicates_as_the_live_consumer_does(
    session_factory: SessionFactory, repository: LedgerRepository
) -> None:
    """`mjctl rebuild ledger` applies batches with `LedgerReplay` (`rebuild_target`): a deposit's
    `TransferPosted`, an instruction and its game's `GameSettled`, each sent again, are applied once
    and the re-sends count as duplicates, as the live consumer counts them (not "applied, 0
    duplicates")."""
    from mahjong_ledger.rebuild import rebuild_target
    from mahjong_platform.topics import Topics
    from mahjong_platform.tracked_consumer import BatchApplier, Delivery

    fund(session_factory, repository, {"player:a": 10_000})
    (deposit,) = transfer_posted_messages(session_factory)  # posted already: its re-send is a repeat
    win = instruction_envelope("instruction-1", "player:a", [payee("player:b", 400)])
    settled = game_settled_envelope("table-1", instruction_count=1, sequence=2)
    target = rebuild_target()
    topics = Topics.with_prefix("test.")
    failures: list[str] = []
    applier = BatchApplier(
        session_factory,
        target.consumer_group,
        target.handler(topics),
        lambda delivery, error: failures.append(error),
        idempotent_handler=target.idempotent_handler,
    )
    offsets = iter(range(100))
    outcomes = []
    for batch in ([deposit, win, settled, win], [settled, win, deposit]):
        deliveries = [
            Delivery(
                event,
                MessagePosition(topics.ledger if event is deposit else POSITION.topic, 0, next(offsets)),
            )
            for event in batch
        ]
        outcomes.append(applier.apply(deliveries, [delivery.position for delivery in deliveries]))
    assert failures == []
    assert [(outcome.applied, outcome.duplicates) for outcome in outcomes] == [(2, 2), (0, 3)]
    assert outcomes[0].applied_events == [win, settled]
    assert balances(session_factory) == {"world": -10_000, "player:a": 9_600, "player:b": 400}
    assert_books_balance(session_factory)
