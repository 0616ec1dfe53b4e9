"""The ledger in SQL: posting orders atomically, and reading balances, entries and statements.

Every write runs in the caller's transaction (the tracked consumer's for settlements, the
servicer's for deposits), so the transfer row, its postings, the materialized balances, the
``TransferPosted`` event and its outbox message commit together or not at all.

Concurrency: the accounts an order touches are first created if missing, then locked in name
order (``SELECT ... FOR UPDATE`` under PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` already serializes
writers), and only then is the order key checked and the split computed from the locked balances.
Locking in one global order means two transfers never deadlock; checking the key after the lock
means a concurrent retry of the same key finds the first one's rows and posts nothing.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Final

import sqlalchemy
from mahjong.v1 import ledger_events_pb2
from mahjong_platform.envelopes import Clock, new_envelope, utc_now
from mahjong_platform.event_store import EventStore
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from mahjong_ledger.domain import (
    WORLD_ACCOUNT,
    DepositOrder,
    IdempotencyConflictError,
    SettlementOrder,
    Transfer,
    TransferKind,
    apply_postings,
    check_account,
    check_deposit_order,
    check_settlement_order,
    deposit_digest,
    deposit_transfer,
    is_player_account,
    settlement_digest,
    settlement_transfer,
    starting_grant_order,
)
from mahjong_ledger.models import ledger_accounts, ledger_games, ledger_postings, ledger_transfers

ENTRIES_FETCH_MAX: Final = 1_000
STATEMENT_TRANSFERS_MAX: Final = 10_000
_EVENT_ID_NAMESPACE: Final = uuid.UUID("0b8f3c6e-52a1-4d7e-8f43-6a9e1c2d5b70")


@dataclasses.dataclass(frozen=True)
class PostingRecord:
    """One stored posting, as read back (no invariants asserted: reconciliation reads tampered rows)."""

    posting_id: int
    account: str
    beans: int
    reason: str
    balance_after_beans: int
    posted_at: datetime.datetime


@dataclasses.dataclass(frozen=True)
class TransferRecord:
    """One stored transfer with its postings in posting order."""

    transfer_id: str
    kind: str
    order_key: str
    table_id: str
    room_id: str
    reason: str
    payer_account: str
    requested_beans: int
    posted_beans: int
    request_digest: str
    source_event_id: str
    line: int
    memo: str
    posted_at: datetime.datetime
    postings: tuple[PostingRecord, ...]

    def balance_after_beans(self, account: str) -> int | None:
        """``account``'s balance after this transfer, when the transfer moved beans on it."""
        for posting in self.postings:
            if posting.account == account:
                return posting.balance_after_beans
        return None


@dataclasses.dataclass(frozen=True)
class PostResult:
    """The stored transfer for an order, and whether this call posted it (False: a retry)."""

    record: TransferRecord
    newly_posted: bool


@dataclasses.dataclass(frozen=True)
class Entry:
    """One line of an account statement: a posting with its transfer's identity."""

    posting_id: int
    transfer_id: str
    order_key: str
    table_id: str
    reason: str
    beans: int
    balance_after_beans: int
    posted_at: datetime.datetime


@dataclasses.dataclass(frozen=True)
class EventContext:
    """Where the ``TransferPosted`` event comes from: correlation and causation ids, and its time."""

    occurred_at: datetime.datetime
    correlation_id: str = ""
    causation_id: str = ""


class LedgerRepository:
    """Posts orders and reads the ledger through the caller's session. Stateless: share one."""

    def __init__(self, event_store: EventStore, clock: Clock = utc_now) -> None:
        self._event_store = event_store
        self._clock = clock

    # --- writes -----------------------------------------------------------------------------------

    def post_settlement(self, session: Session, order: SettlementOrder, context: EventContext) -> PostResult:
        """Post a settlement instruction once: pro-rata if the payer is short, never below zero.

        A second call with the same instruction id and content returns the first result and posts
        nothing; different content raises `IdempotencyConflictError`.
        """
        check_settlement_order(order)
        accounts = {order.payer_account, *(payee.account for payee in order.payees)}
        return self._post(
            session,
            TransferKind.SETTLEMENT,
            order.instruction_id,
            settlement_digest(order),
            accounts,
            lambda balances: settlement_transfer(order, balances[order.payer_account]),
            context,
            stream_id=order.table_id,
            source_event_id=context.causation_id,
            line=order.line,
            memo="",
        )

    def deposit(self, session: Session, order: DepositOrder, correlation_id: str = "") -> PostResult:
        """Move beans from ``world`` to the order's account once per idempotency key."""
        check_deposit_order(order)
        context = EventContext(occurred_at=self._clock(), correlation_id=correlation_id)
        return self._post(
            session,
            TransferKind.DEPOSIT,
            order.idempotency_key,
            deposit_digest(order),
            {order.account, WORLD_ACCOUNT},
            lambda _balances: deposit_transfer(order),
            context,
            stream_id=order.account,
            source_event_id="",
            line=0,
            memo=order.memo,
        )

    def ensure_starting_grant(self, session: Session, account: str, grant_beans: int) -> PostResult | None:
        """Give a player the starting grant the first time the ledger sees them.

        "First time" = the account has no row yet. The grant is a deposit keyed ``grant:<id>``,
        so two callers racing on a new player grant once. Returns None when nothing was to do
        (grant disabled, not a player, or a known account).
        """
        check_account(account)
        if grant_beans <= 0 or not is_player_account(account):
            return None
        if self.account_exists(session, account):
            return None
        return self.deposit(session, starting_grant_order(account, grant_beans))

    def record_game_settled(
        self,
        session: Session,
        table_id: str,
        room_id: str,
        instruction_count: int,
        settled_at: datetime.datetime,
    ) -> None:
        """Remember how many instructions the scoring service says a game has (first report wins)."""
        statement = _insert_for(session)(ledger_games).values(
            table_id=table_id, room_id=room_id, instruction_count=instruction_count, settled_at=settled_at
        )
        session.execute(statement.on_conflict_do_nothing(index_elements=["table_id"]))

    # --- reads ------------------------------------------------------------------------------------

    def account_exists(self, session: Session, account: str) -> bool:
        """True once any transfer has touched ``account`` (or it was opened for one)."""
        query = sqlalchemy.select(ledger_accounts.c.account).where(ledger_accounts.c.account == account)
        return session.execute(query).first() is not None

    def balance(self, session: Session, account: str) -> int:
        """The balance of ``account``; 0 for an account the ledger has never seen."""
        query = sqlalchemy.select(ledger_accounts.c.balance_beans).where(ledger_accounts.c.account == account)
        value = session.execute(query).scalar_one_or_none()
        return 0 if value is None else int(value)

    def find_transfer(self, session: Session, kind: TransferKind, order_key: str) -> TransferRecord | None:
        """The transfer posted for an order key, or None."""
        query = sqlalchemy.select(ledger_transfers).where(
            ledger_transfers.c.kind == kind.value, ledger_transfers.c.order_key == order_key
        )
        row = session.execute(query).mappings().first()
        return None if row is None else self._records(session, [row])[0]

    def list_entries(
        self, session: Session, account: str, page_size: int, before_posting_id: int | None
    ) -> list[Entry]:
        """The account's postings newest first, at most ``page_size``, older than the given id.

        Keyset paging on the posting id: stable while new postings arrive (they are newer than the
        first page and never shift later pages).
        """
        assert 1 <= page_size <= ENTRIES_FETCH_MAX, page_size
        query = (
            sqlalchemy.select(
                ledger_postings.c.posting_id,
                ledger_postings.c.transfer_id,
                ledger_transfers.c.order_key,
                ledger_transfers.c.table_id,
                ledger_postings.c.reason,
                ledger_postings.c.beans,
                ledger_postings.c.balance_after_beans,
                ledger_postings.c.posted_at,
            )
            .join(ledger_transfers, ledger_transfers.c.transfer_id == ledger_postings.c.transfer_id)
            .where(ledger_postings.c.account == account)
            .order_by(ledger_postings.c.posting_id.desc())
            .limit(page_size)
        )
        if before_posting_id is not None:
            query = query.where(ledger_postings.c.posting_id < before_posting_id)
        return [
            Entry(
                posting_id=int(row.posting_id),
                transfer_id=row.transfer_id,
                order_key=row.order_key,
                table_id=row.table_id,
                reason=row.reason,
                beans=int(row.beans),
                balance_after_beans=int(row.balance_after_beans),
                posted_at=_aware(row.posted_at),
            )
            for row in session.execute(query)
        ]

    def transfers_of_table(self, session: Session, table_id: str) -> list[TransferRecord]:
        """Every transfer of one game, in posting order (at most STATEMENT_TRANSFERS_MAX)."""
        first_posting = (
            sqlalchemy.select(sqlalchemy.func.min(ledger_postings.c.posting_id))
            .where(ledger_postings.c.transfer_id == ledger_transfers.c.transfer_id)
            .scalar_subquery()
        )
        query = (
            sqlalchemy.select(ledger_transfers)
            .where(ledger_transfers.c.table_id == table_id)
            .order_by(
                ledger_transfers.c.posted_at,
                ledger_transfers.c.line,
                first_posting,
                ledger_transfers.c.transfer_id,
            )
            .limit(STATEMENT_TRANSFERS_MAX)
        )
        return self._records(session, list(session.execute(query).mappings()))

    # --- internals --------------------------------------------------------------------------------

    def _post(
        self,
        session: Session,
        kind: TransferKind,
        order_key: str,
        digest: str,
        accounts: Collection[str],
        decide: Callable[[Mapping[str, int]], Transfer],
        context: EventContext,
        *,
        stream_id: str,
        source_event_id: str,
        line: int,
        memo: str,
    ) -> PostResult:
        posted_at = _aware(context.occurred_at)
        self._open_accounts(session, accounts, posted_at)
        balances = self._lock_balances(session, accounts)
        # Only after the lock: a concurrent call with the same key has committed or not started.
        existing = self._existing(session, kind, order_key, digest)
        if existing is not None:
            return PostResult(existing, newly_posted=False)
        transfer = decide(balances)
        assert transfer.kind == kind and transfer.order_key == order_key, transfer
        new_balances = apply_postings(balances, transfer)
        session.execute(
            ledger_transfers.insert().values(
                transfer_id=transfer.transfer_id,
                kind=kind.value,
                order_key=order_key,
                table_id=transfer.table_id,
                room_id=transfer.room_id,
                reason=transfer.reason,
                payer_account=transfer.payer_account,
                requested_beans=transfer.requested_beans,
                posted_beans=transfer.posted_beans,
                request_digest=transfer.request_digest,
                source_event_id=source_event_id,
                line=line,
                memo=memo,
                posted_at=posted_at,
            )
        )
        posting_ids: list[int] = []
        if transfer.postings:
            inserted = session.execute(
                ledger_postings.insert().returning(
                    ledger_postings.c.posting_id, sort_by_parameter_order=True
                ),
                [
                    {
                        "transfer_id": transfer.transfer_id,
                        "account": posting.account,
                        "beans": posting.beans,
                        "reason": posting.reason,
                        "balance_after_beans": new_balances[posting.account],
                        "posted_at": posted_at,
                    }
                    for posting in transfer.postings
                ],
            )
            posting_ids = [int(posting_id) for posting_id in inserted.scalars()]
            session.execute(
                ledger_accounts.update()
                .where(ledger_accounts.c.account == sqlalchemy.bindparam("target_account"))
                .values(balance_beans=sqlalchemy.bindparam("new_balance_beans")),
                [
                    {"target_account": account, "new_balance_beans": balance_beans}
                    for account, balance_beans in new_balances.items()
                ],
            )
        self._append_transfer_posted(session, transfer, stream_id, context, memo)
        record = TransferRecord(
            transfer_id=transfer.transfer_id,
            kind=kind.value,
            order_key=order_key,
            table_id=transfer.table_id,
            room_id=transfer.room_id,
            reason=transfer.reason,
            payer_account=transfer.payer_account,
            requested_beans=transfer.requested_beans,
            posted_beans=transfer.posted_beans,
            request_digest=transfer.request_digest,
            source_event_id=source_event_id,
            line=line,
            memo=memo,
            posted_at=posted_at,
            postings=tuple(
                PostingRecord(
                    posting_id=posting_id,
                    account=posting.account,
                    beans=posting.beans,
                    reason=posting.reason,
                    balance_after_beans=new_balances[posting.account],
                    posted_at=posted_at,
                )
                for posting_id, posting in zip(posting_ids, transfer.postings, strict=True)
            ),
        )
        return PostResult(record, newly_posted=True)

    def _existing(
        self, session: Session, kind: TransferKind, order_key: str, digest: str
    ) -> TransferRecord | None:
        query = sqlalchemy.select(ledger_transfers.c.transfer_id, ledger_transfers.c.request_digest).where(
            ledger_transfers.c.kind == kind.value, ledger_transfers.c.order_key == order_key
        )
        row = session.execute(query).first()
        if row is None:
            return None
        if row.request_digest != digest:
            raise IdempotencyConflictError(
                f"{kind.value} key {order_key!r} was already used for a different request "
                f"(transfer {row.transfer_id}); use a new key for a new request"
            )
        return self.find_transfer(session, kind, order_key)

    def _open_accounts(
        self, session: Session, accounts: Collection[str], opened_at: datetime.datetime
    ) -> None:
        statement = _insert_for(session)(ledger_accounts).on_conflict_do_nothing(index_elements=["account"])
        session.execute(
            statement,
            [
                {"account": account, "balance_beans": 0, "opened_at": opened_at}
                for account in sorted(accounts)
            ],
        )

    def _lock_balances(self, session: Session, accounts: Collection[str]) -> dict[str, int]:
        query = (
            sqlalchemy.select(ledger_accounts.c.account, ledger_accounts.c.balance_beans)
            .where(ledger_accounts.c.account.in_(sorted(accounts)))
            .order_by(ledger_accounts.c.account)
            .with_for_update()
        )
        balances = {row.account: int(row.balance_beans) for row in session.execute(query)}
        assert set(balances) == set(accounts), (balances, accounts)
        return balances

    def _append_transfer_posted(
        self, session: Session, transfer: Transfer, stream_id: str, context: EventContext, memo: str
    ) -> None:
        payload = ledger_events_pb2.TransferPosted(
            transfer_id=transfer.transfer_id,
            instruction_id=transfer.order_key,
            table_id=transfer.table_id,
            reason=transfer.reason,
            postings=[
                ledger_events_pb2.Posting(account=posting.account, beans=posting.beans)
                for posting in transfer.postings
            ],
            requested_beans=transfer.requested_beans,
            posted_beans=transfer.posted_beans,
            memo=memo,
        )
        envelope = new_envelope(
            payload,
            clock=lambda: _aware(context.occurred_at),
            # Derived, so a rebuild or a replayed instruction yields the same event id.
            event_id=str(uuid.uuid5(_EVENT_ID_NAMESPACE, transfer.transfer_id)),
            correlation_id=context.correlation_id,
            causation_id=context.causation_id,
        )
        version = self._event_store.stream_version(session, stream_id)
        self._event_store.append(session, stream_id, version, [envelope])

    def _records(self, session: Session, rows: Sequence[sqlalchemy.RowMapping]) -> list[TransferRecord]:
        if not rows:
            return []
        transfer_ids = [row["transfer_id"] for row in rows]
        postings: dict[str, list[PostingRecord]] = {transfer_id: [] for transfer_id in transfer_ids}
        query = (
            sqlalchemy.select(ledger_postings)
            .where(ledger_postings.c.transfer_id.in_(transfer_ids))
            .order_by(ledger_postings.c.posting_id)
        )
        for posting in session.execute(query):
            postings[posting.transfer_id].append(
                PostingRecord(
                    posting_id=int(posting.posting_id),
                    account=posting.account,
                    beans=int(posting.beans),
                    reason=posting.reason,
                    balance_after_beans=int(posting.balance_after_beans),
                    posted_at=_aware(posting.posted_at),
                )
            )
        return [
            TransferRecord(
                transfer_id=row["transfer_id"],
                kind=row["kind"],
                order_key=row["order_key"],
                table_id=row["table_id"],
                room_id=row["room_id"],
                reason=row["reason"],
                payer_account=row["payer_account"],
                requested_beans=int(row["requested_beans"]),
                posted_beans=int(row["posted_beans"]),
                request_digest=row["request_digest"],
                source_event_id=row["source_event_id"],
                line=int(row["line"]),
                memo=row["memo"],
                posted_at=_aware(row["posted_at"]),
                postings=tuple(postings[row["transfer_id"]]),
            )
            for row in rows
        ]


def _insert_for(session: Session) -> Callable[..., sqlalchemy.dialects.postgresql.Insert]:
    """The dialect's INSERT with ON CONFLICT support (PostgreSQL and SQLite both have it)."""
    dialect_name = session.get_bind().dialect.name
    insert = postgresql.insert if dialect_name == "postgresql" else sqlite.insert
    return insert  # type: ignore[return-value]


def _aware(moment: datetime.datetime) -> datetime.datetime:
    """SQLite hands back naive datetimes for timezone-aware columns; everything stored is UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)
