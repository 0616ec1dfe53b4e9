"""The SQL ledger behaves like the pure `Book`: random order streams give the same balances, and
concurrent first sights of a player on PostgreSQL grant exactly once."""

from __future__ import annotations

import pathlib
import tempfile
import threading
from collections.abc import Callable

import pytest
import sqlalchemy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mahjong_ledger.app import migrate
from mahjong_ledger.domain import (
    Book,
    DepositOrder,
    IdempotencyConflictError,
    PayeeLine,
    SettlementOrder,
    decide_deposit,
    decide_settlement,
    evolve,
)
from mahjong_ledger.models import ledger_accounts
from mahjong_ledger.reconcile import KONG_INCOME, reconcile
from mahjong_ledger.repository import EventContext, LedgerRepository
from mahjong_ledger.testing import FIXED_TIME
from mahjong_platform.database import create_engine_for, create_session_factory, sqlite_url, transaction
from mahjong_platform.event_store import EventStore
from mahjong_platform.topics import Topics

PLAYERS = [f"player:p{number}" for number in range(5)]


@st.composite
def orders(draw: st.DrawFn) -> list[SettlementOrder | DepositOrder]:
    stream: list[SettlementOrder | DepositOrder] = [
        DepositOrder(player, draw(st.integers(0, 3).map(lambda k: k * 1_000 + 1)), f"g:{player}")
        for player in PLAYERS
    ]
    for index in range(draw(st.integers(1, 15))):
        payer = draw(st.sampled_from(PLAYERS))
        others = [player for player in PLAYERS if player != payer]
        payees = draw(st.lists(st.sampled_from([*others, "house:rake"]), min_size=1, max_size=3, unique=True))
        lines = tuple(PayeeLine(account, draw(st.integers(0, 3_000)), "") for account in payees)
        key = f"i{draw(st.integers(0, index))}"  # Repeats: retries and key clashes.
        # RULES.md 1.9a.1: some orders move kong income, limited to what earlier orders credited.
        income_ids: tuple[str, ...] = ()
        if index and draw(st.booleans()):
            earlier = draw(st.sets(st.sampled_from([f"i{k}" for k in range(index)]), min_size=1, max_size=3))
            income_ids = tuple(sorted(income_id for income_id in earlier if income_id != key))
        reason = "kong_refund" if income_ids else "win"
        stream.append(
            SettlementOrder(
                key, f"table-{index % 2}", "room", reason, payer, lines, income_instruction_ids=income_ids
            )
        )
    return stream


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(orders())
def test_random_streams_give_the_sql_ledger_the_same_balances_as_the_pure_book(
    stream: list[SettlementOrder | DepositOrder],
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        url = sqlite_url(pathlib.Path(directory), "ledger")
        migrate(url)
        engine = create_engine_for(url)
        try:
            session_factory = create_session_factory(engine)
            repository = LedgerRepository(EventStore(topics=Topics()))
            book = Book()
            for order in stream:
                try:
                    if isinstance(order, SettlementOrder):
                        transfer = decide_settlement(book, order)
                    else:
                        transfer = decide_deposit(book, order)
                except IdempotencyConflictError:
                    with pytest.raises(IdempotencyConflictError), transaction(session_factory) as session:
                        post(repository, session, order)
                    continue
                with transaction(session_factory) as session:
                    result = post(repository, session, order)
                assert result == (transfer is not None)
                if transfer is not None:
                    book = evolve(book, transfer)
            with transaction(session_factory) as session:
                rows = session.execute(
                    sqlalchemy.select(ledger_accounts.c.account, ledger_accounts.c.balance_beans)
                )
                stored = {row.account: int(row.balance_beans) for row in rows}
                # The random stream is no game: its refunds name any earlier order, not a kong its
                # payee paid, so only the kong_income check (a game invariant) does not apply here.
                findings = [f for f in reconcile(session).findings if f.check != KONG_INCOME]
                assert not findings, findings
            assert {a: b for a, b in stored.items() if b} == {a: b for a, b in book.balances.items() if b}
        finally:
            engine.dispose()


def post(
    repository: LedgerRepository, session: sqlalchemy.orm.Session, order: SettlementOrder | DepositOrder
) -> bool:
    if isinstance(order, SettlementOrder):
        return repository.post_settlement(session, order, EventContext(occurred_at=FIXED_TIME)).newly_posted
    return repository.deposit(session, order).newly_posted


@pytest.mark.integration
def test_concurrent_first_sights_of_a_player_grant_once_on_postgresql(postgres_database_url: str) -> None:
    migrate(postgres_database_url)
    engine = create_engine_for(postgres_database_url)
    try:
        session_factory = create_session_factory(engine)
        repository = LedgerRepository(EventStore(topics=Topics()))
        errors: list[BaseException] = []
        start = threading.Barrier(6)

        def first_sight(work: Callable[[], None]) -> None:
            try:
                start.wait(10)
                work()
            except BaseException as error:  # Reported below; a thread must not swallow it.
                errors.append(error)

        def grant() -> None:
            for _ in range(2):  # The servicer retries once on a lost unique-key race.
                try:
                    with transaction(session_factory) as session:
                        repository.ensure_starting_grant(session, "player:new", 1_000)
                    return
                except sqlalchemy.exc.IntegrityError:
                    continue

        threads = [threading.Thread(target=first_sight, args=(grant,)) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not errors, errors
        with transaction(session_factory) as session:
            assert repository.balance(session, "player:new") == 1_000
            assert repository.balance(session, "world") == -1_000
            assert reconcile(session).ok
    finally:
        engine.dispose()
