"""`mjctl reconcile` checks RULES.md 1.9a.1 from the postings themselves: a kong refund or call
transfer never moves more kong income than was received, even one posted without an income limit."""

from __future__ import annotations

import datetime
import pathlib
from collections.abc import Iterator

import pytest
from mahjong_ledger.app import migrate
from mahjong_ledger.domain import DepositOrder, PayeeLine, SettlementOrder
from mahjong_ledger.reconcile import KONG_INCOME, ReconcileReport, reconcile
from mahjong_ledger.repository import EventContext, LedgerRepository
from mahjong_ledger.testing import FIXED_TIME
from mahjong_platform.database import (
    SessionFactory,
    create_engine_for,
    create_session_factory,
    sqlite_url,
    transaction,
)
from mahjong_platform.event_store import EventStore
from mahjong_platform.topics import Topics

KONG_PLAYER = "player:kong"
BROKE = "player:broke"
WINNER = "player:winner"


@pytest.fixture
def session_factory(tmp_path: pathlib.Path) -> Iterator[SessionFactory]:
    url = sqlite_url(tmp_path, "ledger")
    migrate(url)
    engine = create_engine_for(url)
    yield create_session_factory(engine)
    engine.dispose()


def post_game(session_factory: SessionFactory, later: list[SettlementOrder]) -> ReconcileReport:
    """The kong player holds 1,000 beans; the broke player, who holds nothing, pays 0 of the 200 owed
    for an exposed kong (RULES.md 1.9); then `later` is posted, then reconcile runs."""
    repository = LedgerRepository(EventStore(Topics.with_prefix("test.")), clock=lambda: FIXED_TIME)
    kong = SettlementOrder(
        "kong-1", "table-1", "room", "exposed_kong", BROKE, (PayeeLine(KONG_PLAYER, 200, ""),)
    )
    with transaction(session_factory) as session:
        repository.deposit(session, DepositOrder(KONG_PLAYER, 1_000, "fund-kong"))
        repository.deposit(session, DepositOrder(BROKE, 1, "open-broke"))
        repository.deposit(session, DepositOrder(WINNER, 1, "open-winner"))
        for index, order in enumerate([kong, *later]):
            moment = FIXED_TIME + datetime.timedelta(seconds=index)
            if index == 0:  # the broke player spends their one bean first: nothing left for the kong
                rake = SettlementOrder(
                    "rake-0", "table-0", "room", "rake", BROKE, (PayeeLine("house:rake", 1, ""),)
                )
                repository.post_settlement(session, rake, EventContext(occurred_at=moment))
            repository.post_settlement(session, order, EventContext(occurred_at=moment))
    with transaction(session_factory) as session:
        return reconcile(session)


def kong_income_findings(report: ReconcileReport) -> list[str]:
    return [finding.detail for finding in report.findings if finding.check == KONG_INCOME]


def test_a_refund_limited_to_the_income_received_reconciles(session_factory: SessionFactory) -> None:
    refund = SettlementOrder(
        "refund-1",
        "table-1",
        "room",
        "kong_refund",
        KONG_PLAYER,
        (PayeeLine(BROKE, 200, ""),),
        income_instruction_ids=("kong-1",),
    )
    report = post_game(session_factory, [refund])
    assert report.ok, report.findings


def test_a_refund_of_beans_never_paid_is_a_finding_even_without_an_income_limit(
    session_factory: SessionFactory,
) -> None:
    # Naming no income instruction, the ledger posts the nominal 200 (no 1.9a.1 limit is known).
    refund = SettlementOrder(
        "refund-1", "table-1", "room", "kong_refund", KONG_PLAYER, (PayeeLine(BROKE, 200, ""),)
    )
    findings = kong_income_findings(post_game(session_factory, [refund]))
    assert findings == [
        f"{KONG_PLAYER} refunded 200 beans to {BROKE}, who paid them 0 for kongs (RULES.md 1.9a.1)",
        f"{KONG_PLAYER}'s kong refunds and call transfers moved 200 beans, more than the 0 of kong "
        "income received (RULES.md 1.9a.1)",
    ]


def test_a_call_transfer_of_income_never_received_is_a_finding(session_factory: SessionFactory) -> None:
    transfer = SettlementOrder(
        "transfer-1", "table-1", "room", "call_transfer", KONG_PLAYER, (PayeeLine(WINNER, 200, ""),)
    )
    findings = kong_income_findings(post_game(session_factory, [transfer]))
    assert findings == [
        f"{KONG_PLAYER}'s kong refunds and call transfers moved 200 beans, more than the 0 of kong "
        "income received (RULES.md 1.9a.1)"
    ]
