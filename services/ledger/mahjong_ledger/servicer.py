"""``LedgerService`` over gRPC: validate, check who may see what, call the repository, map back.

Who may call what (the `AuthInterceptor` enforces the roles of `METHOD_ROLES` before a handler
runs; the handlers check the per-account rules, and check the roles again for defense in depth):

- ``GetBalance``/``ListEntries``: a player reads only ``player:<their id>`` (an empty account means
  their own); ``ops`` or ``finance`` read any account. ``GetBalance`` on a player account the
  ledger has never seen first posts the starting grant (an idempotent deposit keyed
  ``grant:<player id>``, `LedgerSettings.starting_grant_beans`): the matchmaking service's balance
  check before ``Enqueue`` is that first sight, so a fresh install needs no manual deposit.
- ``GetGameStatement``: ops/finance, or a player whose account appears in that game's transfers.
- ``Deposit``, ``Reconcile``: ops or finance only. ``Reconcile`` compares the postings with the
  scoring service's instructions when the servicer has a `ScoringInstructions` source (the
  process always gives it one: `scoring_client.ScoringServiceInstructions`); scoring not
  answering is UNAVAILABLE.

Errors (ARCHITECTURE.md "Errors"): malformed input → INVALID_ARGUMENT, an idempotency key reused
for a different deposit → FAILED_PRECONDITION, a lost race on the event stream → ABORTED (retry
with the same key), unknown game → NOT_FOUND. A rejected call changes nothing: every write is one
transaction.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Final, TypeVar

import grpc
import sqlalchemy
from mahjong.v1 import ledger_events_pb2, ledger_service_pb2, ledger_service_pb2_grpc
from mahjong_platform.auth import (
    EVERY_CALLER,
    OPERATIONS_ROLES,
    Identity,
    check_roles,
    current_identity,
    role_table,
)
from mahjong_platform.database import SessionFactory, read_transaction, transaction
from mahjong_platform.errors import (
    ErrorMapping,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from mahjong_platform.event_store import WrongExpectedVersionError
from mahjong_platform.grpc_server import time_budget_seconds
from mahjong_platform.idempotency import check_not_reserved
from mahjong_platform.time_window import time_window
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mahjong_ledger.domain import (
    TABLE_ID_MAX_LENGTH,
    DepositOrder,
    IdempotencyConflictError,
    InvalidAccountError,
    InvalidOrderError,
    check_account,
    player_account,
)
from mahjong_ledger.messages import (
    decode_page_token,
    encode_page_token,
    entry_to_proto,
    transfer_posted_from_record,
)
from mahjong_ledger.reconcile import ScoringInstructions, reconcile
from mahjong_ledger.repository import LedgerRepository, known_balance
from mahjong_ledger.scoring_client import BUDGET_SECONDS_MAX as SCORING_BUDGET_SECONDS_MAX
from mahjong_ledger.scoring_client import ScoringServiceInstructions
from mahjong_ledger.settings import LedgerSettings

logger = logging.getLogger(__name__)

SERVICE_NAME: Final = "mahjong.v1.LedgerService"
METHOD_ROLES: Final = role_table(
    ledger_service_pb2.DESCRIPTOR.services_by_name["LedgerService"],
    {
        "GetBalance": EVERY_CALLER,
        "ListEntries": EVERY_CALLER,
        "GetGameStatement": EVERY_CALLER,
        "Deposit": OPERATIONS_ROLES,
        "Reconcile": OPERATIONS_ROLES,
    },
)
"""For `AuthInterceptor` (deny by default): every method and the roles that may call it; the
handlers check accounts and games."""

ERROR_MAPPING: Final[ErrorMapping] = {
    InvalidAccountError: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidOrderError: grpc.StatusCode.INVALID_ARGUMENT,
    IdempotencyConflictError: grpc.StatusCode.FAILED_PRECONDITION,
    WrongExpectedVersionError: grpc.StatusCode.ABORTED,
}
"""For `serve(extra_error_mapping=...)`: the ledger's domain errors and their status codes."""

ENTRIES_PAGE_SIZE_DEFAULT: Final = 50
ENTRIES_PAGE_SIZE_MAX: Final = 500
# One retry covers the only expected unique-key race (two first deposits with one key at once).
WRITE_ATTEMPTS: Final = 2

_Result = TypeVar("_Result")


class LedgerServicer(ledger_service_pb2_grpc.LedgerServiceServicer):
    """The gRPC face of the ledger. Thread-safe: every call opens its own transaction."""

    def __init__(
        self,
        session_factory: SessionFactory,
        repository: LedgerRepository,
        settings: LedgerSettings,
        scoring: ScoringInstructions | None = None,
    ) -> None:
        self._session_factory = session_factory
        self._engine: sqlalchemy.Engine = session_factory.kw["bind"]
        self._repository = repository
        self._settings = settings
        self._scoring = scoring

    def GetBalance(
        self, request: ledger_service_pb2.GetBalanceRequest, context: grpc.ServicerContext
    ) -> ledger_service_pb2.GetBalanceResponse:
        """The balance of an account; a never-seen player first receives the starting grant."""
        identity = current_identity()
        account = _readable_account(identity, request.account)

        def read(session: Session) -> int:
            self._repository.ensure_starting_grant(session, account, self._settings.starting_grant_beans)
            return self._repository.balance(session, account)

        # A known account is read without a write transaction (on SQLite that waits for the
        # consumer's writer); only a first sight grants, and the write re-checks under its lock.
        # One statement on a connection that begins no transaction of its own (no session, no
        # BEGIN and COMMIT: on SQLite the statement reads one snapshot by itself).
        with self._engine.connect() as connection:
            balance_beans = known_balance(connection, account)
        if balance_beans is None:
            balance_beans = self._write(read)
        return ledger_service_pb2.GetBalanceResponse(account=account, balance_beans=balance_beans)

    def ListEntries(
        self, request: ledger_service_pb2.ListEntriesRequest, context: grpc.ServicerContext
    ) -> ledger_service_pb2.ListEntriesResponse:
        """An account's postings, newest first, ``page_size`` at a time (keyset pagination)."""
        identity = current_identity()
        account = _readable_account(identity, request.account)
        if request.page_size < 0:
            raise InvalidArgumentError(f"page_size must be 0 (default) or positive, got {request.page_size}")
        page_size = min(request.page_size or ENTRIES_PAGE_SIZE_DEFAULT, ENTRIES_PAGE_SIZE_MAX)
        before_posting_id = decode_page_token(request.page_token, account)
        with read_transaction(self._session_factory) as session:
            # One more than asked, to know whether another page follows.
            entries = self._repository.list_entries(session, account, page_size + 1, before_posting_id)
        response = ledger_service_pb2.ListEntriesResponse(
            entries=[entry_to_proto(entry) for entry in entries[:page_size]]
        )
        if len(entries) > page_size:
            response.next_page_token = encode_page_token(account, entries[page_size - 1].posting_id)
        return response

    def Deposit(
        self, request: ledger_service_pb2.DepositRequest, context: grpc.ServicerContext
    ) -> ledger_service_pb2.DepositResponse:
        """Move beans from ``world`` to an account; a retry with the same key returns the first answer."""
        identity = current_identity()
        check_roles(f"/{SERVICE_NAME}/Deposit", identity, OPERATIONS_ROLES)
        # `grant:<player>` is the starting grant's own key: taken by a deposit, it would lock the
        # player out of their grant (the one idempotency rule reserves the services' prefixes).
        check_not_reserved(request.idempotency_key)
        order = DepositOrder(
            account=request.account,
            beans=request.beans,
            idempotency_key=request.idempotency_key,
            memo=request.memo,
        )
        result = self._write(lambda session: self._repository.deposit(session, order))
        balance_after_beans = result.record.balance_after_beans(order.account)
        assert balance_after_beans is not None, "a deposit always posts on its account"
        logger.info(
            "deposit posted" if result.newly_posted else "deposit retry answered",
            extra={
                "account": order.account,
                "beans": order.beans,
                "idempotency_key": order.idempotency_key,
                "operator": identity.player_id,
            },
        )
        return ledger_service_pb2.DepositResponse(
            transfer=transfer_posted_from_record(result.record), balance_beans=balance_after_beans
        )

    def GetGameStatement(
        self, request: ledger_service_pb2.GetGameStatementRequest, context: grpc.ServicerContext
    ) -> ledger_service_pb2.GetGameStatementResponse:
        """Every transfer of one game in order, and the net change per account."""
        identity = current_identity()
        table_id = request.table_id
        if not 0 < len(table_id) <= TABLE_ID_MAX_LENGTH:
            raise InvalidArgumentError(f"table_id must be 1..{TABLE_ID_MAX_LENGTH} characters")
        # Read-only, so no write transaction: on SQLite that queued every statement read (a client
        # polling for its game's settlement, the bench's lag probe) behind the settlement
        # consumer's writer and the consumer behind them. Transfers and their postings are
        # written together and never change, so the two reads agree under PostgreSQL's READ
        # COMMITTED too.
        with read_transaction(self._session_factory) as session:
            records = self._repository.transfers_of_table(session, table_id)
        if not records:
            raise NotFoundError(f"the ledger has no transfers for table {table_id!r}")
        net: defaultdict[str, int] = defaultdict(int)
        participants: set[str] = set()
        for record in records:
            participants.add(record.payer_account)
            for posting in record.postings:
                net[posting.account] += posting.beans
                participants.add(posting.account)
        if not identity.has_any_role(OPERATIONS_ROLES) and _own_account(identity) not in participants:
            raise PermissionDeniedError(
                f"player {identity.player_id!r} did not play at table {table_id!r}; "
                "only its players and ops/finance may read its statement"
            )
        return ledger_service_pb2.GetGameStatementResponse(
            table_id=table_id,
            transfers=[transfer_posted_from_record(record) for record in records],
            net=[ledger_events_pb2.Posting(account=account, beans=net[account]) for account in sorted(net)],
        )

    def Reconcile(
        self, request: ledger_service_pb2.ReconcileRequest, context: grpc.ServicerContext
    ) -> ledger_service_pb2.ReconcileResponse:
        """Trial balance and per-game checks over [from, to); unset bounds are open."""
        check_roles(f"/{SERVICE_NAME}/Reconcile", current_identity(), OPERATIONS_ROLES)
        from_time, to_time = time_window(request)
        scoring = self._scoring
        if isinstance(scoring, ScoringServiceInstructions):
            scoring = scoring.within(time_budget_seconds(context, SCORING_BUDGET_SECONDS_MAX))
        # Read-only, so no write lock: asking scoring may take minutes, and on SQLite a write
        # transaction would stall the settlement consumer, deposits and grants all that while.
        with read_transaction(self._session_factory) as session:
            _one_snapshot(session)
            report = reconcile(session, from_time=from_time, to_time=to_time, scoring=scoring)
        if not report.ok:
            logger.warning("reconcile found problems", extra={"finding_count": len(report.findings)})
        return ledger_service_pb2.ReconcileResponse(
            ok=report.ok,
            accounts_sum_beans=report.accounts_sum_beans,
            games_checked=report.games_checked,
            instructions_checked=report.instructions_checked,
            findings=[
                ledger_service_pb2.ReconcileFinding(
                    check=finding.check, subject=finding.subject, detail=finding.detail
                )
                for finding in report.findings
            ],
            findings_truncated=report.findings_truncated,
            scoring_checked=report.scoring_checked,
            rake=[
                ledger_service_pb2.RoomDayRake(
                    day=line.day, room_id=line.room_id, rake_beans=line.rake_beans, games=line.games
                )
                for line in report.rake
            ],
        )

    def _write(self, work: Callable[[Session], _Result]) -> _Result:
        """Run ``work`` in one transaction; retry once when a concurrent first write won a unique key."""
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                with transaction(self._session_factory) as session:
                    return work(session)
            except IntegrityError:
                if attempt == WRITE_ATTEMPTS:
                    raise
                logger.info("write lost a unique-key race; retrying once")
        raise AssertionError("unreachable")


def _own_account(identity: Identity) -> str | None:
    try:
        return player_account(identity.player_id)
    except InvalidAccountError:
        return None  # A service identity, not a player: it owns no account.


def _one_snapshot(session: Session) -> None:
    """Every check of the reconcile reads the ledger as it was at the first one, before scoring is
    asked (so the ledger side is never the newer: no posting looks "unknown to scoring" because
    it came in meanwhile). SQLite's read transaction is one WAL snapshot already; PostgreSQL's
    default, READ COMMITTED, takes a new one per statement."""
    if session.get_bind().dialect.name == "postgresql":
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})


def _readable_account(identity: Identity, requested_account: str) -> str:
    """The account a read names (empty = the caller's own), if the caller may read it."""
    own_account = _own_account(identity)
    if not requested_account:
        if own_account is None:
            raise InvalidArgumentError(
                f"caller {identity.player_id!r} is not a player; name the account to read"
            )
        return own_account
    account = check_account(requested_account)
    if account != own_account and not identity.has_any_role(OPERATIONS_ROLES):
        raise PermissionDeniedError(
            f"player {identity.player_id!r} may read only their own account {own_account!r}, "
            f"not {account!r}; other accounts need the ops or finance role"
        )
    return account
