"""Reconcile on PostgreSQL reads the ledger in one snapshot, taken before it asks scoring.

The ledger posts what scoring instructed, asynchronously. Reconcile asks scoring for its list of
instructions after it began reading the ledger, so its ledger side is the older one: a window that
ends now may show an instruction "in scoring but never posted" yet (the documented case), never
one "posted by the ledger but unknown to scoring", which would say the ledger moved money nobody
instructed. Under READ COMMITTED each statement saw the ledger anew, so an instruction scoring
emitted and the ledger posted while scoring was being asked showed up as the alarming kind.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest
import sqlalchemy
from mahjong.v1 import ledger_service_pb2
from mahjong_ledger.app import migrate
from mahjong_ledger.domain import DepositOrder
from mahjong_ledger.projection import SettlementProjection
from mahjong_ledger.reconcile import InstructedBeans
from mahjong_ledger.repository import LedgerRepository
from mahjong_ledger.servicer import LedgerServicer
from mahjong_ledger.settings import LedgerSettings
from mahjong_ledger.testing import instruction_envelope, payee
from mahjong_platform.auth import Identity, identity_scope
from mahjong_platform.database import SessionFactory, create_engine_for, create_session_factory, transaction
from mahjong_platform.event_store import EventStore
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import MessagePosition

pytestmark = pytest.mark.integration

FINANCE = Identity("auditor", frozenset({"finance"}))


@pytest.fixture
def session_factory(postgres_database_url: str) -> Iterator[SessionFactory]:
    migrate(postgres_database_url)
    engine = create_engine_for(postgres_database_url)
    try:
        yield create_session_factory(engine)
    finally:
        engine.dispose()


def post_instruction(
    session_factory: SessionFactory, projection: SettlementProjection, instruction_id: str, offset: int
) -> None:
    envelope = instruction_envelope(
        instruction_id, "player:bob", [payee("player:alice", 100)], table_id=instruction_id, sequence=1
    )
    with transaction(session_factory) as session:
        projection.handle(session, envelope, MessagePosition("mahjong.settlement.v1", 0, offset))


class PostsRightAfterAnswering:
    """Scoring answers with the instructions it has, and emits one more at once, which the ledger
    posts before the reconcile reads its postings."""

    def __init__(self, session_factory: SessionFactory, projection: SettlementProjection) -> None:
        self._session_factory = session_factory
        self._projection = projection

    def instructions(
        self, from_time: datetime.datetime | None, to_time: datetime.datetime | None
    ) -> dict[str, InstructedBeans]:
        post_instruction(self._session_factory, self._projection, "game-2", offset=2)
        return {"game-1": InstructedBeans("game-1", 100)}


def test_an_instruction_posted_while_scoring_is_asked_is_not_unknown_to_scoring(
    session_factory: SessionFactory,
) -> None:
    repository = LedgerRepository(EventStore(topics=Topics.with_prefix("test.")))
    projection = SettlementProjection(repository)
    with transaction(session_factory) as session:
        repository.deposit(session, DepositOrder("player:bob", 1_000, "fund-bob"))
    post_instruction(session_factory, projection, "game-1", offset=1)
    servicer = LedgerServicer(
        session_factory, repository, LedgerSettings(), PostsRightAfterAnswering(session_factory, projection)
    )
    with identity_scope(FINANCE):
        report = servicer.Reconcile(ledger_service_pb2.ReconcileRequest(), None)
    assert report.scoring_checked
    assert report.ok, list(report.findings)
    assert report.instructions_checked == 1  # game-2 is the next reconcile's


def test_the_snapshot_ends_with_the_reconcile(session_factory: SessionFactory) -> None:
    """The connection goes back to the pool at the default level (READ COMMITTED), which the
    ledger's writers rely on for their row locks."""
    repository = LedgerRepository(EventStore(topics=Topics.with_prefix("test.")))
    servicer = LedgerServicer(session_factory, repository, LedgerSettings())
    with identity_scope(FINANCE):
        servicer.Reconcile(ledger_service_pb2.ReconcileRequest(), None)
    with transaction(session_factory) as session:
        level = session.execute(sqlalchemy.text("SHOW transaction_isolation")).scalar_one()
    assert level == "read committed"
