"""Ledger replicas on one PostgreSQL: concurrent batches that create and lock the same accounts
never deadlock, post each order once and lose no balance update.

The hazard (a reviewer's, reproduced): when a batch locked the accounts that existed first and
created the missing ones after, a batch that created an account and then locked one that a
third writer had just committed could wait for a batch that had locked that one and was waiting
to create the same new account: PostgreSQL aborted one of them with "deadlock detected". Now
one statement creates and locks every account of a batch in name order.
"""

from __future__ import annotations

import datetime
import random
import threading
from collections.abc import Callable

import pytest
import sqlalchemy
from mahjong_ledger.domain import DepositOrder
from mahjong_ledger.models import ledger_accounts, ledger_transfers
from mahjong_ledger.projection import settlement_request_of
from mahjong_ledger.reconcile import reconcile
from mahjong_ledger.repository import EventContext, LedgerRepository, PostRequest, deposit_request
from mahjong_ledger.testing import instruction_envelope, payee
from mahjong_platform.database import (
    SessionFactory,
    create_session_factory,
    transaction,
)
from mahjong_platform.event_store import EventStore
from mahjong_platform.topics import Topics
from sqlalchemy.engine import Engine

pytestmark = pytest.mark.integration

WRITERS = 4
ROUNDS = 40
NEW_ACCOUNTS_PER_ROUND = 4
OLD_ACCOUNTS = 3
DEPOSIT_BEANS = 100
JOIN_SECONDS = 120.0
START = datetime.datetime(2026, 5, 1, tzinfo=datetime.UTC)


@pytest.fixture
def engine(postgresql_engine: Engine) -> Engine:
    return postgresql_engine


def deposit(account: str, key: str, seconds: int = 0) -> PostRequest:
    return deposit_request(
        DepositOrder(account, DEPOSIT_BEANS, key),
        EventContext(occurred_at=START + datetime.timedelta(seconds=seconds)),
    )


def run_concurrently(jobs: list[Callable[[], None]]) -> list[BaseException]:
    errors: list[BaseException] = []

    def guarded(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as error:  # reported by the test
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_SECONDS)
        assert not thread.is_alive(), "a writer is still waiting: a lock wait that never ends"
    return errors


def test_concurrent_batches_creating_the_same_accounts_never_deadlock(engine: Engine) -> None:
    """Each round, every writer posts one batch of settlement instructions between a random mix
    of the round's new accounts and a few funded old ones, all starting together: they race to
    create the same accounts while locking existing ones (no batch touches ``world``, which would
    serialize them). Nothing fails, every instruction is posted once, no bean is lost."""
    session_factory = create_session_factory(engine)
    repository = LedgerRepository(EventStore(Topics()))
    old = [f"player:old{number}" for number in range(OLD_ACCOUNTS)]
    with transaction(session_factory) as session:
        repository.post_many(session, [deposit(account, f"open:{account}") for account in old])
    barrier = threading.Barrier(WRITERS)
    posted: list[int] = [0] * WRITERS

    def writer(index: int) -> Callable[[], None]:
        generator = random.Random(index)

        def run() -> None:
            for round_number in range(ROUNDS):
                new = [f"player:r{round_number}n{number}" for number in range(NEW_ACCOUNTS_PER_ROUND)]
                table_id = f"w{index}r{round_number}"
                requests = []
                for line in range(1, generator.randint(1, 3) + 1):
                    payer, *payees = generator.sample(old + new, generator.randint(2, 3))
                    envelope = instruction_envelope(
                        f"{table_id}:{line}",
                        payer,
                        [payee(account, DEPOSIT_BEANS // 4) for account in payees],
                        table_id=table_id,
                        sequence=line,
                        occurred_at=START + datetime.timedelta(seconds=round_number),
                    )
                    requests.append(settlement_request_of(envelope))
                barrier.wait(JOIN_SECONDS)
                with transaction(session_factory) as session:
                    posted[index] += repository.post_batch(session, requests)

        return run

    errors = run_concurrently([writer(index) for index in range(WRITERS)])
    assert not errors, [f"{type(error).__name__}: {error}" for error in errors]
    with transaction(session_factory) as session:
        transfers = session.execute(
            sqlalchemy.select(sqlalchemy.func.count()).select_from(ledger_transfers)
        ).scalar_one()
        total = session.execute(
            sqlalchemy.select(sqlalchemy.func.sum(ledger_accounts.c.balance_beans)).where(
                ledger_accounts.c.account.like("player:%")
            )
        ).scalar_one()
        report = reconcile(session)
    assert transfers == OLD_ACCOUNTS + sum(posted)
    assert total == OLD_ACCOUNTS * DEPOSIT_BEANS
    assert report.ok, report.findings


def test_a_batch_waits_for_the_uncommitted_creation_of_its_account(engine: Engine) -> None:
    """A batch touching an account another transaction has created but not committed waits for
    that commit (its row is held by the insert), then posts on the committed balance."""
    session_factory = create_session_factory(engine)
    repository = LedgerRepository(EventStore(Topics()))
    first = session_factory()
    first.begin()
    repository.post_many(first, [deposit("player:x", "first:x")])
    first_backend = backend_of(first)

    def second() -> None:
        with transaction(session_factory) as session:
            repository.post_many(session, [deposit("player:w", "second:w"), deposit("player:x", "second:x")])

    def commit_once_waited_for() -> None:
        wait_until(lambda: blocked_by(session_factory, first_backend))
        first.commit()
        first.close()

    errors = run_concurrently([second, commit_once_waited_for])
    assert not errors, [f"{type(error).__name__}: {error}" for error in errors]
    with transaction(session_factory) as session:
        assert repository.balance(session, "player:x") == 2 * DEPOSIT_BEANS
        assert repository.balance(session, "player:w") == DEPOSIT_BEANS
        assert reconcile(session).ok


def test_the_interleaving_that_deadlocked(engine: Engine) -> None:
    """The reviewer's case, forced: T1 has created ``player:a`` and not committed; batch A
    (``player:a``, ``player:b``) waits for it; T1 commits; A is held after its second statement
    on ``ledger_accounts`` (before: it had created ``player:b`` and was about to lock the now
    committed ``player:a``); batch B (the same two accounts) starts. Before, B locked
    ``player:a``, waited for A's ``player:b``, A then waited for B's ``player:a``: "deadlock
    detected". Now A holds both rows in name order and B waits until A commits."""
    session_factory = create_session_factory(engine)
    repository = LedgerRepository(EventStore(Topics()))
    a_connections: set[int] = set()
    account_statements: list[str] = []
    a_held, release_a = threading.Event(), threading.Event()

    @sqlalchemy.event.listens_for(engine, "after_cursor_execute")
    def hold_a(connection: sqlalchemy.Connection, _cursor: object, statement: str, *_args: object) -> None:
        if id(connection.connection.dbapi_connection) not in a_connections:
            return
        if "ledger_accounts" in statement:
            account_statements.append(statement)
            if len(account_statements) == 2:
                a_held.set()
                release_a.wait(JOIN_SECONDS)

    first = session_factory()
    first.begin()
    repository.post_many(first, [deposit("player:a", "t1:a")])
    first_backend = backend_of(first)

    def batch_a() -> None:
        with transaction(session_factory) as session:
            a_connections.add(id(session.connection().connection.dbapi_connection))
            repository.post_many(session, [deposit("player:a", "a:a"), deposit("player:b", "a:b")])

    b_backend: list[int] = []

    def batch_b() -> None:
        with transaction(session_factory) as session:
            b_backend.append(backend_of(session))
            repository.post_many(session, [deposit("player:a", "b:a"), deposit("player:b", "b:b")])

    def orchestrate() -> None:
        wait_until(lambda: blocked_by(session_factory, first_backend) or a_held.is_set())
        first.commit()
        first.close()
        wait_until(a_held.is_set)
        thread_b = threading.Thread(target=run_b)
        thread_b.start()
        wait_until(lambda: bool(b_backend) and is_waiting(session_factory, b_backend[0]))
        release_a.set()
        thread_b.join(JOIN_SECONDS)

    b_errors: list[BaseException] = []

    def run_b() -> None:
        b_errors.extend(run_concurrently([batch_b]))

    try:
        errors = run_concurrently([batch_a, orchestrate])
    finally:
        release_a.set()
        sqlalchemy.event.remove(engine, "after_cursor_execute", hold_a)
    errors += b_errors
    assert not errors, [f"{type(error).__name__}: {error}" for error in errors]
    with transaction(session_factory) as session:
        assert repository.balance(session, "player:a") == 3 * DEPOSIT_BEANS
        assert repository.balance(session, "player:b") == 2 * DEPOSIT_BEANS
        assert reconcile(session).ok


def backend_of(session: sqlalchemy.orm.Session) -> int:
    return int(session.execute(sqlalchemy.text("SELECT pg_backend_pid()")).scalar_one())


def blocked_by(session_factory: SessionFactory, pid: int) -> bool:
    """Whether some backend waits for a lock held by backend ``pid``."""
    with transaction(session_factory) as session:
        return bool(
            session.execute(
                sqlalchemy.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"
                ),
                {"pid": pid},
            ).scalar_one()
        )


def is_waiting(session_factory: SessionFactory, pid: int) -> bool:
    """Whether backend ``pid`` waits for a lock."""
    with transaction(session_factory) as session:
        return bool(
            session.execute(
                sqlalchemy.text("SELECT cardinality(pg_blocking_pids(:pid)) > 0"), {"pid": pid}
            ).scalar_one()
        )


def wait_until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (a lock wait shows in pg_stat_activity at once); fail after JOIN_SECONDS."""
    for _ in range(int(JOIN_SECONDS / 0.02)):
        if condition():
            return
        threading.Event().wait(0.02)
    raise AssertionError("the expected lock wait never came")
