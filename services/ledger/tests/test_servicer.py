"""LedgerService on a real in-process gRPC server with real tokens (SQLite behind it)."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Iterator

import grpc
import pytest
from mahjong.v1 import ledger_service_pb2, ledger_service_pb2_grpc
from mahjong_ledger.projection import SettlementProjection
from mahjong_ledger.reconcile import InstructedBeans
from mahjong_ledger.repository import LedgerRepository
from mahjong_ledger.servicer import ERROR_MAPPING, METHOD_ROLES, LedgerServicer
from mahjong_ledger.settings import LedgerSettings
from mahjong_ledger.testing import instruction_envelope, payee
from mahjong_platform.auth import AuthInterceptor, mint_token
from mahjong_platform.config import load_settings
from mahjong_platform.database import create_session_factory, transaction
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_client import bearer_metadata
from mahjong_platform.grpc_server import RunningServer, register_service, serve
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import MessagePosition
from sqlalchemy.engine import Engine

SECRET = "ledger-test-secret-that-is-long-enough-for-hs256"
SETTINGS = load_settings({"MAHJONG_JWT_SECRET": SECRET})
GRANT_BEANS = 100_000

Stub = ledger_service_pb2_grpc.LedgerServiceStub
Call = Callable[..., object]


@pytest.fixture
def repository() -> LedgerRepository:
    return LedgerRepository(EventStore(topics=Topics.with_prefix("test.")))


def serve_ledger(servicer: LedgerServicer) -> RunningServer:
    return serve(
        [
            register_service(
                ledger_service_pb2.DESCRIPTOR.services_by_name["LedgerService"],
                ledger_service_pb2_grpc.add_LedgerServiceServicer_to_server,
                servicer,
            )
        ],
        "127.0.0.1:0",
        SETTINGS,
        interceptors=[AuthInterceptor(SECRET, METHOD_ROLES)],
        extra_error_mapping=ERROR_MAPPING,
    )


@pytest.fixture
def server(sqlite_engine: Engine, repository: LedgerRepository) -> Iterator[RunningServer]:
    servicer = LedgerServicer(
        create_session_factory(sqlite_engine), repository, LedgerSettings(starting_grant_beans=GRANT_BEANS)
    )
    running = serve_ledger(servicer)
    try:
        yield running
    finally:
        running.stop(0)


@pytest.fixture
def stub(server: RunningServer) -> Iterator[Stub]:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield Stub(channel)


def as_player(player_id: str, *roles: str) -> tuple[tuple[str, str], ...]:
    return bearer_metadata(mint_token(SECRET, player_id, roles))


OPS = as_player("operator", "ops")
FINANCE = as_player("auditor", "finance")
ALICE = as_player("alice")


def status_of(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    error = raised.value
    return error.code(), error.details()


def deposit(stub: Stub, account: str, beans: int, key: str) -> ledger_service_pb2.DepositResponse:
    request = ledger_service_pb2.DepositRequest(account=account, beans=beans, idempotency_key=key)
    response: ledger_service_pb2.DepositResponse = stub.Deposit(request, metadata=OPS)
    return response


# --- GetBalance and the starting grant ---------------------------------------------------------


def test_a_new_player_reading_their_balance_receives_the_starting_grant_once(stub: Stub) -> None:
    first = stub.GetBalance(ledger_service_pb2.GetBalanceRequest(), metadata=ALICE)
    again = stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account="player:alice"), metadata=ALICE)
    assert (first.account, first.balance_beans) == ("player:alice", GRANT_BEANS)
    assert again.balance_beans == GRANT_BEANS
    world = stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account="world"), metadata=FINANCE)
    assert world.balance_beans == -GRANT_BEANS


def test_a_player_may_not_read_another_players_balance(stub: Stub) -> None:
    code, details = status_of(
        lambda: stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account="player:bob"), metadata=ALICE)
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "only their own account" in details


def test_ops_reading_a_new_player_grants_too_so_matchmaking_can_check_the_floor(stub: Stub) -> None:
    response = stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account="player:carol"), metadata=OPS)
    assert response.balance_beans == GRANT_BEANS


def test_calls_without_a_valid_token_are_unauthenticated(stub: Stub) -> None:
    code, _ = status_of(lambda: stub.GetBalance(ledger_service_pb2.GetBalanceRequest()))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    forged = bearer_metadata(mint_token("another-secret-that-is-long-enough-for-hs256", "alice"))
    code, _ = status_of(lambda: stub.GetBalance(ledger_service_pb2.GetBalanceRequest(), metadata=forged))
    assert code == grpc.StatusCode.UNAUTHENTICATED


def test_a_bad_account_name_is_invalid_argument(stub: Stub) -> None:
    code, details = status_of(
        lambda: stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account="bank:vault"), metadata=OPS)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "player:<id>" in details


# --- Deposit ------------------------------------------------------------------------------------


def test_deposit_needs_the_ops_or_finance_role(stub: Stub) -> None:
    request = ledger_service_pb2.DepositRequest(account="player:alice", beans=5, idempotency_key="k")
    code, details = status_of(lambda: stub.Deposit(request, metadata=ALICE))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "finance, ops" in details
    assert stub.Deposit(request, metadata=FINANCE).balance_beans == 5


def test_a_deposit_retry_returns_the_first_answer(stub: Stub) -> None:
    first = deposit(stub, "player:alice", 700, "top-up-1")
    deposit(stub, "player:alice", 300, "top-up-2")
    retry = deposit(stub, "player:alice", 700, "top-up-1")
    assert retry == first
    assert first.balance_beans == 700
    assert first.transfer.instruction_id == "top-up-1"
    assert {posting.account: posting.beans for posting in first.transfer.postings} == {
        "world": -700,
        "player:alice": 700,
    }
    balance = stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account="player:alice"), metadata=OPS)
    assert balance.balance_beans == 1_000  # Known account: no starting grant on top.


@pytest.mark.parametrize(
    ("account", "beans", "key", "message"),
    [
        ("player:alice", 0, "k", "beans must be 1.."),
        ("player:alice", -10, "k", "beans must be 1.."),
        ("alice", 10, "k", "must be 'player:<id>'"),
        ("world", 10, "k", "drawn from 'world'"),
        ("player:alice", 10, "", "idempotency key"),
    ],
)
def test_bad_deposits_are_invalid_argument_and_change_nothing(
    stub: Stub, account: str, beans: int, key: str, message: str
) -> None:
    request = ledger_service_pb2.DepositRequest(account=account, beans=beans, idempotency_key=key)
    code, details = status_of(lambda: stub.Deposit(request, metadata=OPS))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert message in details
    world = stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account="world"), metadata=OPS)
    assert world.balance_beans == 0


def test_a_key_reused_for_a_different_deposit_is_failed_precondition(stub: Stub) -> None:
    deposit(stub, "player:alice", 10, "k")
    code, details = status_of(lambda: deposit(stub, "player:alice", 11, "k"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "already used for a different request" in details


def test_a_deposit_may_not_take_a_starting_grant_key_so_the_player_still_gets_the_grant(stub: Stub) -> None:
    code, details = status_of(lambda: deposit(stub, "player:zoe", 1, "grant:zoe"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "reserved" in details
    balance = stub.GetBalance(ledger_service_pb2.GetBalanceRequest(), metadata=as_player("zoe"))
    assert balance.balance_beans > 1


# --- ListEntries --------------------------------------------------------------------------------


def test_entries_page_through_a_players_history_newest_first(stub: Stub) -> None:
    for number in range(1, 6):
        deposit(stub, "player:alice", number, f"k{number}")
    seen: list[int] = []
    token = ""
    while True:
        request = ledger_service_pb2.ListEntriesRequest(page_size=2, page_token=token)
        page = stub.ListEntries(request, metadata=ALICE)
        seen.extend(entry.beans for entry in page.entries)
        assert all(entry.posted_at.seconds > 0 for entry in page.entries)
        token = page.next_page_token
        if not token:
            break
    assert seen == [5, 4, 3, 2, 1]


def test_entries_reject_a_token_from_another_account_and_a_negative_page_size(stub: Stub) -> None:
    for number in range(1, 4):
        deposit(stub, "player:bob", number, f"k{number}")
    page = stub.ListEntries(
        ledger_service_pb2.ListEntriesRequest(account="player:bob", page_size=1), metadata=OPS
    )
    foreign = ledger_service_pb2.ListEntriesRequest(account="player:alice", page_token=page.next_page_token)
    code, details = status_of(lambda: stub.ListEntries(foreign, metadata=OPS))
    assert (code, "another account" in details) == (grpc.StatusCode.INVALID_ARGUMENT, True)
    negative = ledger_service_pb2.ListEntriesRequest(page_size=-1)
    assert (
        status_of(lambda: stub.ListEntries(negative, metadata=ALICE))[0] == grpc.StatusCode.INVALID_ARGUMENT
    )
    garbage = ledger_service_pb2.ListEntriesRequest(page_token="%%%")
    assert status_of(lambda: stub.ListEntries(garbage, metadata=ALICE))[0] == grpc.StatusCode.INVALID_ARGUMENT


# --- GetGameStatement and Reconcile -------------------------------------------------------------


def play_one_game(sqlite_engine: Engine, repository: LedgerRepository) -> None:
    projection = SettlementProjection(repository)
    envelopes = [
        instruction_envelope("w-b", "player:bob", [payee("player:alice", 3_600)], sequence=1),
        instruction_envelope("r-a", "player:alice", [payee("house:rake", 400)], reason="rake", sequence=2),
    ]
    for envelope in envelopes:
        with transaction(create_session_factory(sqlite_engine)) as session:
            projection.handle(session, envelope, MessagePosition("t", 0, envelope.sequence))


def test_a_game_statement_shows_transfers_and_net_to_its_players_and_ops_only(
    stub: Stub, sqlite_engine: Engine, repository: LedgerRepository
) -> None:
    deposit(stub, "player:bob", 10_000, "fund-bob")
    play_one_game(sqlite_engine, repository)
    request = ledger_service_pb2.GetGameStatementRequest(table_id="table-1")
    statement = stub.GetGameStatement(request, metadata=ALICE)
    assert [transfer.instruction_id for transfer in statement.transfers] == ["w-b", "r-a"]
    assert {posting.account: posting.beans for posting in statement.net} == {
        "player:alice": 3_200,
        "player:bob": -3_600,
        "house:rake": 400,
    }
    assert stub.GetGameStatement(request, metadata=FINANCE).table_id == "table-1"
    code, _ = status_of(lambda: stub.GetGameStatement(request, metadata=as_player("mallory")))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    unknown = ledger_service_pb2.GetGameStatementRequest(table_id="no-such-table")
    assert status_of(lambda: stub.GetGameStatement(unknown, metadata=OPS))[0] == grpc.StatusCode.NOT_FOUND


def test_statements_and_entries_are_read_while_a_writer_holds_the_ledger(
    stub: Stub, sqlite_engine: Engine, repository: LedgerRepository
) -> None:
    """A client polling its game's statement (and the bench's settlement-lag probe) must neither
    wait for the settlement consumer's write transaction nor hold one up: both reads take no write
    lock. The test holds the ledger's writer (the in-process lock and SQLite's) while it reads."""
    deposit(stub, "player:bob", 10_000, "fund-bob")
    play_one_game(sqlite_engine, repository)
    request = ledger_service_pb2.GetGameStatementRequest(table_id="table-1")
    entries = ledger_service_pb2.ListEntriesRequest(account="player:bob")
    with transaction(create_session_factory(sqlite_engine)) as writing:
        writing.connection()  # BEGIN IMMEDIATE: the write lock is held until the block ends
        statement = stub.GetGameStatement(request, metadata=FINANCE, timeout=WRITER_WAIT_SECONDS)
        listed = stub.ListEntries(entries, metadata=FINANCE, timeout=WRITER_WAIT_SECONDS)
    assert [transfer.instruction_id for transfer in statement.transfers] == ["w-b", "r-a"]
    assert [entry.beans for entry in listed.entries] == [-3_600, 10_000]


def test_reconcile_needs_the_role_and_reports_a_clean_ledger(
    stub: Stub, sqlite_engine: Engine, repository: LedgerRepository
) -> None:
    deposit(stub, "player:bob", 10_000, "fund-bob")
    play_one_game(sqlite_engine, repository)
    assert status_of(lambda: stub.Reconcile(ledger_service_pb2.ReconcileRequest(), metadata=ALICE))[0] == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    report = stub.Reconcile(ledger_service_pb2.ReconcileRequest(), metadata=FINANCE)
    assert report.ok and report.accounts_sum_beans == 0
    assert (report.games_checked, report.instructions_checked) == (1, 2)
    # This servicer has no scoring to ask (the process always gives it one): it says so.
    assert not report.scoring_checked and not report.findings_truncated
    assert [(rake.day, rake.room_id, rake.rake_beans, rake.games) for rake in report.rake] == [
        ("2025-01-02", "novice", 400, 1)
    ]


def test_reconcile_refuses_a_window_that_ends_before_it_starts(stub: Stub) -> None:
    request = ledger_service_pb2.ReconcileRequest()
    getattr(request, "from").FromDatetime(datetime.datetime(2025, 2, 1, tzinfo=datetime.UTC))
    request.to.FromDatetime(datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC))
    code, details = status_of(lambda: stub.Reconcile(request, metadata=OPS))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "is after to" in details


WRITER_WAIT_SECONDS = 60.0
"""How long a deposit may wait while Reconcile asks scoring before the test calls it blocked (a
bound on a hang, not a timing check: the deposit needs milliseconds when nothing holds it up)."""


class DepositsWhileAsked:
    """A scoring source that, while the ledger asks it, deposits through the ledger's own API and
    waits for the answer: the ledger must go on taking writes while a reconcile talks to scoring."""

    def __init__(self) -> None:
        self.stub: Stub | None = None
        self.deposited_while_asked = False

    def instructions(
        self, from_time: datetime.datetime | None, to_time: datetime.datetime | None
    ) -> dict[str, InstructedBeans]:
        stub = self.stub
        assert stub is not None
        done = threading.Event()

        def write() -> None:
            deposit(stub, "player:carol", 500, "while-scoring-is-asked")
            done.set()

        threading.Thread(target=write, daemon=True).start()
        self.deposited_while_asked = done.wait(5)
        return {}


def test_reconcile_does_not_hold_the_ledgers_write_lock_while_it_asks_scoring(
    sqlite_engine: Engine, repository: LedgerRepository
) -> None:
    """Asking scoring is a network call (minutes for a large window or a slow scoring): the
    settlement consumer, deposits and starting grants go on meanwhile (SQLite has one writer)."""
    scoring = DepositsWhileAsked()
    servicer = LedgerServicer(
        create_session_factory(sqlite_engine),
        repository,
        LedgerSettings(starting_grant_beans=GRANT_BEANS),
        scoring,
    )
    running = serve_ledger(servicer)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            scoring.stub = Stub(channel)
            report = scoring.stub.Reconcile(ledger_service_pb2.ReconcileRequest(), metadata=FINANCE)
            assert scoring.deposited_while_asked, "a deposit waited until the reconcile had finished"
            assert report.ok and report.scoring_checked
            carol = ledger_service_pb2.GetBalanceRequest(account="player:carol")
            assert scoring.stub.GetBalance(carol, metadata=FINANCE).balance_beans == 500
    finally:
        running.stop(0)
