"""The short-payer knobs of `mjctl bots` and the demo (issue 15) against a real LedgerService.

`starting_balance_funder` gives a new bot exactly its starting balance (its deposit replaces the
starting grant), and `shortfall_lines` names every short payment of a settled game: a payer who
ran out (RULES.md 1.9) and a refund limited to the kong income received (1.9a.1).
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterator

import grpc
import pytest
from mahjong.v1 import ledger_service_pb2, ledger_service_pb2_grpc
from mahjong_ledger.app import migrate
from mahjong_ledger.projection import SettlementProjection
from mahjong_ledger.repository import LedgerRepository
from mahjong_ledger.servicer import ERROR_MAPPING, METHOD_ROLES, LedgerServicer
from mahjong_ledger.settings import LedgerSettings
from mahjong_ledger.testing import instruction_envelope, payee
from mahjong_platform.auth import AuthInterceptor, mint_token
from mahjong_platform.config import load_settings
from mahjong_platform.database import create_engine_for, create_session_factory, sqlite_url, transaction
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_client import open_channel
from mahjong_platform.grpc_server import register_service, serve
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import MessagePosition
from mjctl.bots import starting_balance_funder
from mjctl.summary import shortfall_lines
from sqlalchemy.orm import Session, sessionmaker

SECRET = "mjctl-test-secret-that-is-long-enough-for-hs256"
GRANT_BEANS = 100_000


@dataclasses.dataclass
class Ledger:
    finance: grpc.Channel
    sessions: sessionmaker[Session]
    projection: SettlementProjection


@pytest.fixture
def ledger(tmp_path: pathlib.Path) -> Iterator[Ledger]:
    url = sqlite_url(tmp_path / "data", "ledger")
    migrate(url)
    engine = create_engine_for(url)
    sessions = create_session_factory(engine)
    repository = LedgerRepository(EventStore(topics=Topics.with_prefix("test.")))
    servicer = LedgerServicer(sessions, repository, LedgerSettings(starting_grant_beans=GRANT_BEANS))
    running = serve(
        [
            register_service(
                ledger_service_pb2.DESCRIPTOR.services_by_name["LedgerService"],
                ledger_service_pb2_grpc.add_LedgerServiceServicer_to_server,
                servicer,
            )
        ],
        "127.0.0.1:0",
        load_settings({"MAHJONG_JWT_SECRET": SECRET}),
        interceptors=[AuthInterceptor(SECRET, METHOD_ROLES)],
        extra_error_mapping=ERROR_MAPPING,
    )
    channel = open_channel(f"127.0.0.1:{running.port}", mint_token(SECRET, "bots-finance", ["finance"]))
    try:
        yield Ledger(channel, sessions, SettlementProjection(repository))
    finally:
        channel.close()
        running.stop(0)
        engine.dispose()


def balance(ledger: Ledger, account: str) -> int:
    stub = ledger_service_pb2_grpc.LedgerServiceStub(ledger.finance)
    response = stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account=account))
    return int(response.balance_beans)


def test_a_starting_balance_below_one_bean_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1 bean"):
        starting_balance_funder(grpc.insecure_channel("127.0.0.1:1"), 0)


def test_the_starting_balance_replaces_the_grant_and_tops_up_before_each_later_game(ledger: Ledger) -> None:
    fund = starting_balance_funder(ledger.finance, 150)
    fund("bot-1", "0.0")
    fund("bot-1", "0.0")  # a retried funding is the same deposit (its idempotency key), not a second one
    assert balance(ledger, "player:bot-1") == 150
    assert balance(ledger, "player:bot-unfunded") == GRANT_BEANS  # first sight: the grant
    spend = instruction_envelope("win-1", "player:bot-1", [payee("player:bot-2", 120)], sequence=1)
    with transaction(ledger.sessions) as session:
        ledger.projection.handle(session, spend, MessagePosition("settlement", 0, 0))
    fund("bot-1", "1.0")
    assert balance(ledger, "player:bot-1") == 150  # 30 + 120
    fund("bot-2", "0.0")
    fund("bot-2", "1.0")  # 120 won + 150 deposited: nothing to top up
    assert balance(ledger, "player:bot-2") == 270


def test_shortfall_lines_name_a_short_payer_and_a_refund_limited_to_the_kong_income(ledger: Ledger) -> None:
    fund = starting_balance_funder(ledger.finance, 150)
    for player in ("a", "b", "c", "d"):
        fund(player, "0.0")
    kong = instruction_envelope(
        "kong-b", "player:b", [payee("player:a", 200)], reason="concealed_kong", sequence=1
    )
    win = instruction_envelope("win-b", "player:b", [payee("player:c", 100)], sequence=2)
    refund = instruction_envelope(
        "refund-b", "player:a", [payee("player:b", 200)], reason="kong_refund", sequence=3
    )
    refund.settlement_instructed.income_instruction_ids.append("kong-b")
    rakes = [
        instruction_envelope(
            f"rake-{player}", f"player:{player}", [payee("house:rake", 5)], reason="rake", sequence=4 + index
        )
        for index, player in enumerate("abcd")
    ]
    for envelope in (kong, win, refund, *rakes):
        with transaction(ledger.sessions) as session:
            ledger.projection.handle(session, envelope, MessagePosition("settlement", 0, 0))
    # b pays the kong's 150 of 200 and has nothing left for the win; a refunds the 150 received.
    assert shortfall_lines(ledger.finance, "table-1") == [
        "short payment at table table-1 (concealed_kong): player:b owed 200, 150 moved "
        "(the payer ran out of beans): player:a +150",
        "short payment at table table-1 (win): the payer owed 100, 0 moved (the payer ran out of beans)",
        "short payment at table table-1 (kong_refund): player:a owed 200, 150 moved "
        "(only 150 beans of kong income were received): player:b +150",
    ]
