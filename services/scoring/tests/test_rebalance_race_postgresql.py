"""Two scoring replicas applying the same table event during a rebalance: no spurious dead letter,
nothing applied twice (PostgreSQL, where the two transactions really run at once).

The evicted replica (B) has not noticed it lost the partition; the new owner (A) applies the same
events. Here B's batch also holds a poison event, so B applies it again one event at a time; its
attempt at the shared event reads the game's last sequence before A committed that event, then its
inbox insert waits for A's uncommitted row and fails on the inbox's primary key once A commits. That
is not a poison message: the tracked consumer tries it once more, now sees A's row, and skips it as
received. Only the poison event is dead-lettered; the projection holds each event once, with the
rows a single consumer leaves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy
from mahjong_platform.database import SessionFactory, create_session_factory
from mahjong_platform.event_store import EventStore
from mahjong_platform.tracked_consumer import BatchApplier, BatchOutcome, Delivery, MessagePosition
from mahjong_scoring.projection import CONSUMER_GROUP, IDEMPOTENT_HANDLER, SettlementProjection
from mahjong_scoring.testing import TableScript
from sqlalchemy.engine import Engine

from .conftest import migrated_engine
from .test_projection import projection_rows, whole_game

THREAD_JOIN_SECONDS = 120.0
LOCK_WAIT_ATTEMPTS = 3_000


def replica(session_factory: SessionFactory, failures: list[str], **hooks: object) -> BatchApplier:
    """One scoring replica's batch logic (its own projection, so its own cache of games)."""
    return BatchApplier(
        session_factory,
        CONSUMER_GROUP,
        SettlementProjection(EventStore()).apply_batch,
        lambda delivery, error: failures.append(delivery.envelope.event_id),
        idempotent_handler=IDEMPOTENT_HANDLER,
        **hooks,  # type: ignore[arg-type]
    )


def at(partition: int, offset: int) -> MessagePosition:
    return MessagePosition("mahjong.table.v1", partition, offset)


@pytest.fixture
def postgresql_scoring(postgres_database_url: str) -> Iterator[Engine]:
    engine = migrated_engine(postgres_database_url)
    yield engine
    engine.dispose()


def wait_until_a_transaction_waits_for_a_lock(engine: Engine) -> None:
    waiting = sqlalchemy.text("SELECT count(*) FROM pg_locks WHERE NOT granted")
    with engine.connect() as connection:
        for _attempt in range(LOCK_WAIT_ATTEMPTS):
            if connection.execute(waiting).scalar_one():
                return
            connection.rollback()
            time.sleep(0.01)
    pytest.fail("the evicted replica's insert never waited for the new owner's row")


@pytest.mark.integration
def test_an_event_the_new_owner_commits_meanwhile_is_skipped_not_dead_lettered(
    postgresql_scoring: Engine, session_factory: SessionFactory
) -> None:
    session_factory_pg = create_session_factory(postgresql_scoring)
    events = whole_game("table-1").events
    kong = 7  # the concealed kong: settlement lines, so a doubled apply would show
    assert events[kong].WhichOneof("payload") == "kong_declared"
    poison = TableScript(table_id="table-2").draw(0, "1m")  # a draw before the table opened
    owner_failures: list[str] = []
    evicted_failures: list[str] = []
    owner_holds, release_owner = threading.Event(), threading.Event()

    def hold_the_commit(position: MessagePosition) -> None:
        if position.offset == kong:
            owner_holds.set()
            assert release_owner.wait(THREAD_JOIN_SECONDS)

    owner = replica(session_factory_pg, owner_failures, before_commit=hold_the_commit)
    evicted = replica(session_factory_pg, evicted_failures)
    before = [Delivery(envelope, at(0, offset)) for offset, envelope in enumerate(events[:kong])]
    owner.apply(before, [delivery.position for delivery in before])

    outcomes: dict[str, BatchOutcome] = {}
    errors: list[BaseException] = []

    def run(name: str, applier: BatchApplier, deliveries: list[Delivery]) -> None:
        try:
            outcomes[name] = applier.apply(deliveries, [delivery.position for delivery in deliveries])
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    shared = Delivery(events[kong], at(0, kong))
    owner_thread = threading.Thread(target=run, args=("owner", owner, [shared]))
    owner_thread.start()
    assert owner_holds.wait(THREAD_JOIN_SECONDS)
    evicted_thread = threading.Thread(
        target=run, args=("evicted", evicted, [Delivery(poison, at(1, 0)), shared])
    )
    evicted_thread.start()
    wait_until_a_transaction_waits_for_a_lock(postgresql_scoring)
    release_owner.set()
    owner_thread.join(THREAD_JOIN_SECONDS)
    evicted_thread.join(THREAD_JOIN_SECONDS)
    assert errors == []
    assert owner_failures == []
    assert evicted_failures == [poison.event_id]  # the poison only: the shared event was skipped
    assert outcomes["owner"].applied == 1
    assert (outcomes["evicted"].applied, outcomes["evicted"].duplicates) == (0, 1)

    # Each event once: the rows of one consumer applying the same events alone (SQLite).
    reference = replica(session_factory, [])
    alone = [Delivery(envelope, at(0, offset)) for offset, envelope in enumerate(events[: kong + 1])]
    reference.apply(alone, [delivery.position for delivery in alone])
    assert projection_rows(session_factory_pg) == projection_rows(session_factory)
