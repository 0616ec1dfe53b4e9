"""The ledger in SQL: posting orders atomically, and reading balances, entries and statements.

Every write runs in the caller's transaction (the tracked consumer's for settlements, the
servicer's for deposits), so the transfer row, its postings, the materialized balances, the
``TransferPosted`` event and its outbox message commit together or not at all.

Batches: `post_many` posts a list of orders with set-based SQL: one statement opens every account
the batch touches, one locks them, one finds the keys posted before; the splits are computed in
memory in order; then one multi-row insert each for the transfers and the postings, one balance
update per account, and one append of all ``TransferPosted`` events. The single-order methods are
batches of one, so there is one write path.

Concurrency (replicas of the ledger on one PostgreSQL): one statement creates the accounts a batch
touches and locks them, one account after the other in name order (``INSERT ... SELECT ... ORDER BY
account ON CONFLICT DO UPDATE ... RETURNING``: a new account's row is held by its uncommitted
insert, an existing one by the update's row lock; SQLite's ``BEGIN IMMEDIATE`` already serializes
writers), and only then are the order keys checked and the splits computed from the locked
balances. Every writer (consumer batches, deposits) takes its locks in that one global order, so
two never deadlock; checking the keys after the lock means a concurrent retry of the same key
finds the first one's rows and posts nothing. (Locking the existing accounts first and creating
the missing ones after deadlocked: a writer that created a new account, then locked one another
writer had just committed, waited for a second writer that had locked that one and waited to
create the same new account; `tests/test_account_locks_postgresql.py`.) Row locks rather
than serializable retries: a batch is a few hundred statements' worth of work, and a retry would
redo all of it whenever two replicas touch ``house:rake``, which nearly every batch does; a lock
makes the second wait a few milliseconds instead.

Determinism (a rebuild gives identical rows): every time stored is an event's occurrence time,
and an account's ``opened_at`` is the earliest time of any order that touched it, whatever the
order in which the batches arrived.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Final, NamedTuple

import sqlalchemy
from mahjong.v1 import envelope_pb2, ledger_events_pb2
from mahjong_platform.database import PerDialect, compiled_once, insert_rows, one_of
from mahjong_platform.driver_sql import Sql, run, run_many
from mahjong_platform.envelopes import Clock, as_utc, new_envelope, utc_now
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
    income_beans,
    is_player_account,
    settlement_digest,
    settlement_transfer,
    starting_grant_order,
    transfer_id_for,
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
    income_limit_beans: int | None = None

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


@dataclasses.dataclass(frozen=True)
class PostRequest:
    """One order to post: its key and digest, the accounts it touches, and how to split it.

    ``decide`` gets the locked balances and the beans each income order (``income_keys``) credited
    each account, both as posted so far in the batch, and returns the transfer. Build it with
    `settlement_request` or `deposit_request`.
    """

    kind: TransferKind
    order_key: str
    digest: str
    accounts: tuple[str, ...]
    decide: Callable[[Mapping[str, int], Mapping[tuple[str, str, str], int]], Transfer]
    context: EventContext
    stream_id: str
    source_event_id: str
    line: int
    memo: str
    income_keys: tuple[str, ...] = ()
    """RULES.md 1.9a.1: the settlement order keys whose credits limit this order (kong income)."""


def settlement_request(order: SettlementOrder, context: EventContext) -> PostRequest:
    """The request that posts a settlement instruction (raises for a malformed one)."""
    check_settlement_order(order)
    return PostRequest(
        kind=TransferKind.SETTLEMENT,
        order_key=order.instruction_id,
        digest=settlement_digest(order),
        accounts=(order.payer_account, *(payee.account for payee in order.payees)),
        decide=lambda balances, credited: settlement_transfer(
            order, balances[order.payer_account], income_beans(order, credited)
        ),
        context=context,
        stream_id=order.table_id,
        source_event_id=context.causation_id,
        line=order.line,
        memo="",
        income_keys=order.income_instruction_ids,
    )


def deposit_request(order: DepositOrder, context: EventContext) -> PostRequest:
    """The request that posts a deposit at ``context.occurred_at`` (raises for a malformed one)."""
    check_deposit_order(order)
    return PostRequest(
        kind=TransferKind.DEPOSIT,
        order_key=order.idempotency_key,
        digest=deposit_digest(order),
        accounts=(order.account, WORLD_ACCOUNT),
        decide=lambda _balances, _credited: deposit_transfer(order),
        context=context,
        stream_id=order.account,
        source_event_id="",
        line=0,
        memo=order.memo,
    )


def known_balance(connection: sqlalchemy.Connection, account: str) -> int | None:
    """The balance of ``account``, or None when the ledger has never seen it (GetBalance's read:
    the statement on the driver's cursor, `driver_sql`)."""
    row = run(connection, _KNOWN_BALANCE, (account,)).fetchone()
    return None if row is None else int(row[0])


_KNOWN_BALANCE = Sql.of("SELECT balance_beans FROM ledger_accounts WHERE account = ?")


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
        return self.post_many(session, [settlement_request(order, context)])[0]

    def deposit(self, session: Session, order: DepositOrder, correlation_id: str = "") -> PostResult:
        """Move beans from ``world`` to the order's account once per idempotency key."""
        context = EventContext(occurred_at=self._clock(), correlation_id=correlation_id)
        return self.post_many(session, [deposit_request(order, context)])[0]

    def post_many(self, session: Session, requests: Sequence[PostRequest]) -> list[PostResult]:
        """Post the requests in order, each once (see the module docstring); one result each.

        A key posted before, or earlier in the same batch, returns the stored transfer with
        ``newly_posted=False``; the same key with other content raises `IdempotencyConflictError`
        and nothing of the batch is written (the caller's transaction rolls back).
        """
        if not requests:
            return []
        plan = self._plan(session, requests)
        posting_ids = self._write(session, plan, posting_ids=True)
        results = [PostResult(record, newly_posted=True) for record in plan.records(posting_ids)]
        return self._with_repeats(session, requests, plan, results)

    def post_batch(self, session: Session, requests: Sequence[PostRequest]) -> int:
        """`post_many` for a projection that needs no records back: how many moved beans now.

        The same postings, without reading back posting ids or the stored transfers of repeats.
        """
        return len(self.post_new(session, requests))

    def post_new(self, session: Session, requests: Sequence[PostRequest]) -> list[PostRequest]:
        """`post_batch`, answering the requests that moved beans now (not the repeats of a key
        posted before or earlier in the batch), in order."""
        if not requests:
            return []
        plan = self._plan(session, requests)
        self._write(session, plan, posting_ids=False)
        return [request for request in requests if plan.is_new(request)]

    def _plan(self, session: Session, requests: Sequence[PostRequest]) -> _Plan:
        balances = self._open_and_lock(session, requests)
        # Only after the lock: a concurrent call with the same key has committed or not started.
        posted_before = self._posted_digests(session, requests)
        plan = _Plan(balances, self._credited(session, requests))
        for request in requests:
            plan.add(request, posted_before)
        return plan

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
        self.record_games_settled(
            session,
            [
                {
                    "table_id": table_id,
                    "room_id": room_id,
                    "instruction_count": instruction_count,
                    "settled_at": settled_at,
                }
            ],
        )

    def record_games_settled(self, session: Session, games: Sequence[Mapping[str, object]]) -> list[str]:
        """`record_game_settled` for many ``ledger_games`` rows (first report wins): one look-up of
        the games recorded before and one insert of the others; the table ids recorded now."""
        first: dict[str, Mapping[str, object]] = {}
        for game in games:
            first.setdefault(str(game["table_id"]), game)
        if not first:
            return []
        table_ids = sorted(first)
        connection = session.connection()
        if connection.dialect.name == "sqlite":
            known = {row[0] for row in run(connection, _recorded_games_sqlite(len(table_ids)), table_ids)}
        else:
            known = set(session.execute(_RECORDED_GAMES(session), {"table_ids": table_ids}).scalars())
        new = {table_id: game for table_id, game in first.items() if table_id not in known}
        if new:
            session.execute(_INSERT_GAMES_FIRST_WINS(session), list(new.values()))
        return list(new)

    # --- reads ------------------------------------------------------------------------------------

    def account_exists(self, session: Session, account: str) -> bool:
        """True once any transfer has touched ``account`` (or it was opened for one)."""
        return self.known_balance(session, account) is not None

    def balance(self, session: Session, account: str) -> int:
        """The balance of ``account``; 0 for an account the ledger has never seen."""
        return self.known_balance(session, account) or 0

    def known_balance(self, session: Session, account: str) -> int | None:
        """The balance of ``account``, or None when the ledger has never seen it."""
        value = session.execute(_BALANCE, {"wanted_account": account}).scalar_one_or_none()
        return None if value is None else int(value)

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
                posted_at=as_utc(row.posted_at),
            )
            for row in session.execute(query)
        ]

    def transfers_of_table(self, session: Session, table_id: str) -> list[TransferRecord]:
        """Every transfer of one game, in posting order (at most STATEMENT_TRANSFERS_MAX)."""
        rows = session.execute(_TRANSFERS_OF_TABLE, {"wanted_table_id": table_id}).mappings()
        return self._records(session, list(rows))

    # --- internals --------------------------------------------------------------------------------

    def _write(self, session: Session, plan: _Plan, *, posting_ids: bool) -> list[int]:
        """Insert the plan's transfers and postings, update balances, append the events; the
        posting ids in posting order when asked (RETURNING costs a multi-row statement text
        that psycopg parses anew for every batch size)."""
        if not plan.transfers:
            return []
        insert_rows(session, ledger_transfers, [transfer_row for transfer_row, _ in plan.transfers])
        inserted_ids: list[int] = []
        if plan.postings and posting_ids:
            inserted = session.execute(_INSERT_POSTINGS_RETURNING_IDS, plan.postings)
            inserted_ids = [int(posting_id) for posting_id in inserted.scalars()]
        elif plan.postings:
            insert_rows(session, ledger_postings, plan.postings)
        changed = plan.changed_balances()
        if changed and session.get_bind().dialect.name == "postgresql":
            # One statement for the batch; psycopg would send an executemany row by row.
            session.execute(
                _UPDATE_BALANCES_POSTGRESQL,
                {
                    "accounts": [account for account, _ in changed],
                    "balances": [beans for _, beans in changed],
                },
            )
        elif changed:
            run_many(
                session.connection(), _UPDATE_BALANCE_SQLITE, [(beans, account) for account, beans in changed]
            )
        self._append_transfers_posted(session, plan)
        return inserted_ids

    def _with_repeats(
        self,
        session: Session,
        requests: Sequence[PostRequest],
        plan: _Plan,
        new_results: list[PostResult],
    ) -> list[PostResult]:
        """One result per request: the new ones in order, and the stored record for repeats."""
        new_by_key = {(result.record.kind, result.record.order_key): result for result in new_results}
        repeated_keys = [
            (request.kind, request.order_key) for request in requests if not plan.is_new(request)
        ]
        stored = self._stored_records(session, repeated_keys)
        results: list[PostResult] = []
        seen_new: set[tuple[str, str]] = set()
        for request in requests:
            key = (request.kind.value, request.order_key)
            if plan.is_new(request) and key not in seen_new:
                seen_new.add(key)
                results.append(new_by_key[key])
            else:
                record = stored.get(key) or new_by_key[key].record
                results.append(PostResult(record, newly_posted=False))
        return results

    def _stored_records(
        self, session: Session, keys: Sequence[tuple[TransferKind, str]]
    ) -> dict[tuple[str, str], TransferRecord]:
        if not keys:
            return {}
        wanted = {(kind.value, order_key) for kind, order_key in keys}
        query = sqlalchemy.select(ledger_transfers).where(  # (kind, order_key): the unique index
            ledger_transfers.c.kind.in_(sorted({kind for kind, _ in wanted})),
            ledger_transfers.c.order_key.in_(sorted({order_key for _, order_key in wanted})),
        )
        rows = [row for row in session.execute(query).mappings() if (row["kind"], row["order_key"]) in wanted]
        return {(record.kind, record.order_key): record for record in self._records(session, rows)}

    def _credited(self, session: Session, requests: Sequence[PostRequest]) -> dict[tuple[str, str, str], int]:
        """(table id, order key, account) -> beans credited, for every income key the batch names."""
        keys = sorted({key for request in requests for key in request.income_keys})
        if not keys:
            return {}
        connection = session.connection()
        if connection.dialect.name == "sqlite":
            return {
                (table_id, order_key, account): int(beans)
                for table_id, order_key, account, beans in run(
                    connection, _credited_sqlite(len(keys)), [TransferKind.SETTLEMENT.value, *keys]
                )
            }
        return {
            (row.table_id, row.order_key, row.account): int(row.beans)
            for row in session.execute(_CREDITED(session), {"order_keys": keys})
        }

    def _posted_digests(
        self, session: Session, requests: Sequence[PostRequest]
    ) -> dict[tuple[str, str], str]:
        """The request digest stored for each of the requests' keys posted before."""
        kinds = sorted({request.kind.value for request in requests})
        order_keys = sorted({request.order_key for request in requests})
        connection = session.connection()
        if connection.dialect.name == "sqlite":
            statement = _posted_digests_sqlite(len(kinds), len(order_keys))
            return {
                (kind, key): digest for kind, key, digest in run(connection, statement, [*kinds, *order_keys])
            }
        rows = session.execute(_POSTED_DIGESTS(session), {"kinds": kinds, "order_keys": order_keys})
        return {(row.kind, row.order_key): row.request_digest for row in rows}

    def _open_and_lock(self, session: Session, requests: Sequence[PostRequest]) -> dict[str, int]:
        """Lock the batch's accounts in name order, creating the missing ones; their balances.

        An account's ``opened_at`` is the earliest time of any order that touched it (moved
        earlier when this batch has an earlier one), so it does not depend on arrival order.
        PostgreSQL: one upsert takes every row in name order, new or not, so the waits of two
        writers never form a cycle (see the module docstring).
        """
        opened_at: dict[str, datetime.datetime] = {}
        for request in requests:
            moment = as_utc(request.context.occurred_at)
            for account in request.accounts:
                if account not in opened_at or moment < opened_at[account]:
                    opened_at[account] = moment
        accounts = sorted(opened_at)
        if session.get_bind().dialect.name == "postgresql":
            rows = session.execute(
                _OPEN_AND_LOCK_POSTGRESQL,
                {"accounts": accounts, "opened_ats": [opened_at[account] for account in accounts]},
            )
            balances = {row.account: int(row.balance_beans) for row in rows}
            assert set(balances) == set(accounts), (sorted(balances), accounts)
            return balances
        # SQLite: one writer at a time (BEGIN IMMEDIATE), so no lock order to keep.
        connection = session.connection()
        locked = _locked_sqlite(connection, accounts)
        missing = [account for account in accounts if account not in locked]
        if missing:
            session.execute(
                _INSERT_MISSING_ACCOUNTS(session),
                [
                    {"account": account, "balance_beans": 0, "opened_at": opened_at[account]}
                    for account in missing
                ],
            )
            locked |= _locked_sqlite(connection, missing)
        assert set(locked) == set(accounts), (sorted(locked), accounts)
        earlier = [
            {"target_account": account, "earlier_opened_at": opened_at[account]}
            for account in accounts
            if opened_at[account] < as_utc(locked[account].opened_at)
        ]
        if earlier:
            session.execute(_MOVE_OPENED_AT, earlier)
        return {account: int(row.balance_beans) for account, row in locked.items()}

    def _append_transfers_posted(self, session: Session, plan: _Plan) -> None:
        by_stream: dict[str, list[envelope_pb2.Envelope]] = {}
        for _, (transfer, request) in plan.transfers:
            by_stream.setdefault(request.stream_id, []).append(_transfer_posted_envelope(transfer, request))
        # Without a savepoint: every caller rolls its whole transaction back on any error (the
        # consumer's batch, the servicer's `_write`); a writer that appended to a stream since the
        # versions were read fails the append on the stream's unique key (an IntegrityError, which
        # the consumer tries once more and the servicer retries once).
        self._event_store.append_after_current(session, list(by_stream.items()), savepoint=False)

    def _records(self, session: Session, rows: Sequence[sqlalchemy.RowMapping]) -> list[TransferRecord]:
        if not rows:
            return []
        transfer_ids = [row["transfer_id"] for row in rows]
        postings: dict[str, list[PostingRecord]] = {transfer_id: [] for transfer_id in transfer_ids}
        for posting in session.execute(_POSTINGS_OF_TRANSFERS(session), {"transfer_ids": transfer_ids}):
            postings[posting.transfer_id].append(
                PostingRecord(
                    posting_id=int(posting.posting_id),
                    account=posting.account,
                    beans=int(posting.beans),
                    reason=posting.reason,
                    balance_after_beans=int(posting.balance_after_beans),
                    posted_at=as_utc(posting.posted_at),
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
                income_limit_beans=_optional_int(row["income_limit_beans"]),
                posted_at=as_utc(row["posted_at"]),
                postings=tuple(postings[row["transfer_id"]]),
            )
            for row in rows
        ]


class _Plan:
    """A batch worked out in memory: the transfers, their postings and the running balances, and
    what the settlement orders credited (for the kong income of RULES.md 1.9a.1)."""

    def __init__(self, balances: Mapping[str, int], credited: Mapping[tuple[str, str, str], int]) -> None:
        self._initial = dict(balances)
        self._balances = dict(balances)
        self._credited = dict(credited)
        self._digests: dict[tuple[str, str], str] = {}
        self._new: set[int] = set()
        self.transfers: list[tuple[dict[str, object], tuple[Transfer, PostRequest]]] = []
        self.postings: list[dict[str, object]] = []

    def add(self, request: PostRequest, posted_before: Mapping[tuple[str, str], str]) -> None:
        """Decide the request's transfer on the balances so far, unless its key is posted."""
        key = (request.kind.value, request.order_key)
        digest = posted_before.get(key) or self._digests.get(key)
        if digest is not None:
            if digest != request.digest:
                raise IdempotencyConflictError(
                    f"{request.kind.value} key {request.order_key!r} was already used for a different "
                    f"request (transfer {transfer_id_for(request.kind, request.order_key)}); "
                    "use a new key for a new request"
                )
            return
        transfer = request.decide(self._balances, self._credited)
        assert transfer.kind == request.kind and transfer.order_key == request.order_key, transfer
        new_balances = apply_postings(self._balances, transfer)
        self._balances.update(new_balances)
        if transfer.kind is TransferKind.SETTLEMENT:
            for posting in transfer.postings:
                if posting.beans > 0:
                    self._credited[(transfer.table_id, transfer.order_key, posting.account)] = posting.beans
        self._digests[key] = request.digest
        self._new.add(id(request))
        posted_at = as_utc(request.context.occurred_at)
        self.transfers.append((_transfer_row(transfer, request, posted_at), (transfer, request)))
        self.postings.extend(
            {
                "transfer_id": transfer.transfer_id,
                "account": posting.account,
                "beans": posting.beans,
                "reason": posting.reason,
                "balance_after_beans": new_balances[posting.account],
                "posted_at": posted_at,
            }
            for posting in transfer.postings
        )

    def is_new(self, request: PostRequest) -> bool:
        """Whether this request (not a repeat of a posted key) moved beans in this batch."""
        return id(request) in self._new

    def changed_balances(self) -> list[tuple[str, int]]:
        """(account, new balance) for every account the batch changed, in name order."""
        return sorted(
            (account, beans) for account, beans in self._balances.items() if beans != self._initial[account]
        )

    def records(self, posting_ids: Sequence[int]) -> list[TransferRecord]:
        """The stored transfers, given the posting ids the insert returned (in posting order)."""
        assert len(posting_ids) == len(self.postings), (len(posting_ids), len(self.postings))
        records = []
        next_posting = 0
        for row, (transfer, _) in self.transfers:
            postings = []
            for _posting in transfer.postings:
                stored = self.postings[next_posting]
                postings.append(
                    PostingRecord(
                        posting_id=posting_ids[next_posting],
                        account=str(stored["account"]),
                        beans=int(stored["beans"]),  # type: ignore[call-overload]
                        reason=str(stored["reason"]),
                        balance_after_beans=int(stored["balance_after_beans"]),  # type: ignore[call-overload]
                        posted_at=stored["posted_at"],  # type: ignore[arg-type]
                    )
                )
                next_posting += 1
            records.append(TransferRecord(**row, postings=tuple(postings)))  # type: ignore[arg-type]
        return records


def _transfer_row(
    transfer: Transfer, request: PostRequest, posted_at: datetime.datetime
) -> dict[str, object]:
    return {
        "transfer_id": transfer.transfer_id,
        "kind": transfer.kind.value,
        "order_key": transfer.order_key,
        "table_id": transfer.table_id,
        "room_id": transfer.room_id,
        "reason": transfer.reason,
        "payer_account": transfer.payer_account,
        "requested_beans": transfer.requested_beans,
        "posted_beans": transfer.posted_beans,
        "request_digest": transfer.request_digest,
        "source_event_id": request.source_event_id,
        "line": request.line,
        "memo": request.memo,
        "income_limit_beans": transfer.income_limit_beans,
        "posted_at": posted_at,
    }


def _transfer_posted_envelope(transfer: Transfer, request: PostRequest) -> envelope_pb2.Envelope:
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
        memo=request.memo,
        income_limit_beans=transfer.income_limit_beans,
    )
    occurred_at = as_utc(request.context.occurred_at)
    return new_envelope(
        payload,
        clock=lambda: occurred_at,
        # Derived, so a rebuild or a replayed instruction yields the same event id.
        event_id=str(uuid.uuid5(_EVENT_ID_NAMESPACE, transfer.transfer_id)),
        correlation_id=request.context.correlation_id,
        causation_id=request.context.causation_id,
    )


# Statements built once: building one per batch costs more than running it on SQLite.
_INSERT_POSTINGS_RETURNING_IDS = ledger_postings.insert().returning(
    ledger_postings.c.posting_id, sort_by_parameter_order=True
)
_UPDATE_BALANCES_POSTGRESQL = sqlalchemy.text(
    "UPDATE ledger_accounts SET balance_beans = batch.balance_beans "
    "FROM unnest(CAST(:accounts AS text[]), CAST(:balances AS bigint[])) AS batch(account, balance_beans) "
    "WHERE ledger_accounts.account = batch.account"
)
_TRANSFERS_OF_TABLE = (
    sqlalchemy.select(ledger_transfers)
    .where(ledger_transfers.c.table_id == sqlalchemy.bindparam("wanted_table_id"))
    .order_by(
        ledger_transfers.c.posted_at,
        ledger_transfers.c.line,
        sqlalchemy.select(sqlalchemy.func.min(ledger_postings.c.posting_id))
        .where(ledger_postings.c.transfer_id == ledger_transfers.c.transfer_id)
        .scalar_subquery(),
        ledger_transfers.c.transfer_id,
    )
    .limit(STATEMENT_TRANSFERS_MAX)
)
_POSTINGS_OF_TRANSFERS = PerDialect(
    lambda dialect_name: sqlalchemy.select(ledger_postings)
    .where(one_of(ledger_postings.c.transfer_id, "transfer_ids", dialect_name))
    .order_by(ledger_postings.c.posting_id)
)
_BALANCE = sqlalchemy.select(ledger_accounts.c.balance_beans).where(
    ledger_accounts.c.account == sqlalchemy.bindparam("wanted_account")
)
_OPEN_AND_LOCK_POSTGRESQL = sqlalchemy.text(
    # Rows are inserted (or, when present, updated and so locked) in the ORDER BY's order. The
    # update always writes opened_at (the earliest), so RETURNING gives every row, new or not.
    "INSERT INTO ledger_accounts (account, balance_beans, opened_at) "
    "SELECT batch.account, 0, batch.opened_at "
    "FROM unnest(CAST(:accounts AS text[]), CAST(:opened_ats AS timestamptz[])) AS batch(account, opened_at) "
    "ORDER BY batch.account "
    "ON CONFLICT (account) DO UPDATE "
    "SET opened_at = LEAST(ledger_accounts.opened_at, EXCLUDED.opened_at) "
    "RETURNING ledger_accounts.account, ledger_accounts.balance_beans"
)
_MOVE_OPENED_AT = (
    ledger_accounts.update()
    .where(ledger_accounts.c.account == sqlalchemy.bindparam("target_account"))
    .values(opened_at=sqlalchemy.bindparam("earlier_opened_at"))
)
_CREDITED = PerDialect(
    lambda dialect_name: sqlalchemy.select(
        ledger_transfers.c.table_id,
        ledger_transfers.c.order_key,
        ledger_postings.c.account,
        ledger_postings.c.beans,
    )
    .join(ledger_postings, ledger_postings.c.transfer_id == ledger_transfers.c.transfer_id)
    .where(
        ledger_transfers.c.kind == TransferKind.SETTLEMENT.value,
        one_of(ledger_transfers.c.order_key, "order_keys", dialect_name),
        ledger_postings.c.beans > 0,
    )
)
# By kind and order key, the unique index's columns in its order: by order key alone the
# index cannot be searched (kind leads it), and SQLite and PostgreSQL read every transfer ever posted.
_POSTED_DIGESTS = PerDialect(
    lambda dialect_name: sqlalchemy.select(
        ledger_transfers.c.kind, ledger_transfers.c.order_key, ledger_transfers.c.request_digest
    ).where(
        one_of(ledger_transfers.c.kind, "kinds", dialect_name),
        one_of(ledger_transfers.c.order_key, "order_keys", dialect_name),
    )
)


def _insert_ignoring_conflicts(table: sqlalchemy.Table, key: str) -> PerDialect[sqlalchemy.TextClause]:
    """``INSERT ... ON CONFLICT (key) DO NOTHING`` into ``table`` (every column given), compiled
    once per dialect (`compiled_once`: SQLAlchemy compiled it anew at every execution)."""

    def build(dialect_name: str) -> sqlalchemy.Insert:
        insert = postgresql.insert if dialect_name == "postgresql" else sqlite.insert
        return insert(table).on_conflict_do_nothing(index_elements=[key])

    return compiled_once(build)


_INSERT_GAMES_FIRST_WINS = _insert_ignoring_conflicts(ledger_games, "table_id")
_RECORDED_GAMES = PerDialect(
    lambda dialect_name: sqlalchemy.select(ledger_games.c.table_id).where(
        one_of(ledger_games.c.table_id, "table_ids", dialect_name)
    )
)
_INSERT_MISSING_ACCOUNTS = _insert_ignoring_conflicts(ledger_accounts, "account")


# SQLite's statements of a batch as SQL texts on the driver's cursor (`driver_sql`): about 10 us
# each instead of 100-170 through `Session.execute` (and an expanding IN rendered anew each time).
# PostgreSQL keeps the statements above (one array parameter, one text for any length).
_UPDATE_BALANCE_SQLITE = Sql.of("UPDATE ledger_accounts SET balance_beans = ? WHERE account = ?")


def _marks(count: int) -> str:
    return ", ".join("?" * count)


@functools.lru_cache(maxsize=256)
def _lock_balances_sqlite(count: int) -> Sql:
    # No FOR UPDATE on SQLite: BEGIN IMMEDIATE holds the one write lock already.
    return Sql.of(
        "SELECT account, balance_beans, opened_at FROM ledger_accounts "
        f"WHERE account IN ({_marks(count)}) ORDER BY account"
    )


@functools.lru_cache(maxsize=256)
def _posted_digests_sqlite(kinds: int, order_keys: int) -> Sql:
    # By kind and order key: the unique index's columns in its order (see _POSTED_DIGESTS).
    return Sql.of(
        "SELECT kind, order_key, request_digest FROM ledger_transfers "
        f"WHERE kind IN ({_marks(kinds)}) AND order_key IN ({_marks(order_keys)})"
    )


@functools.lru_cache(maxsize=256)
def _credited_sqlite(count: int) -> Sql:
    # `_CREDITED`: by kind and order key, the unique index's columns in its order.
    return Sql.of(
        "SELECT ledger_transfers.table_id, ledger_transfers.order_key, ledger_postings.account, "
        "ledger_postings.beans FROM ledger_transfers JOIN ledger_postings "
        "ON ledger_postings.transfer_id = ledger_transfers.transfer_id "
        f"WHERE ledger_transfers.kind = ? AND ledger_transfers.order_key IN ({_marks(count)}) "
        "AND ledger_postings.beans > 0"
    )


@functools.lru_cache(maxsize=256)
def _recorded_games_sqlite(count: int) -> Sql:
    return Sql.of(f"SELECT table_id FROM ledger_games WHERE table_id IN ({_marks(count)})")


class _Locked(NamedTuple):
    balance_beans: int
    opened_at: datetime.datetime


def _locked_sqlite(connection: sqlalchemy.Connection, accounts: Sequence[str]) -> dict[str, _Locked]:
    """The rows of `accounts` that exist (SQLite: the batch's write lock is held)."""
    return {
        account: _Locked(int(balance), _stored_datetime(opened_at))
        for account, balance, opened_at in run(connection, _lock_balances_sqlite(len(accounts)), accounts)
    }


def _stored_datetime(value: object) -> datetime.datetime:
    """A ``DateTime`` column as the driver gives it: SQLite's text (SQLAlchemy's storage format,
    UTC) parsed; a datetime as it is."""
    return datetime.datetime.fromisoformat(value) if isinstance(value, str) else value  # type: ignore[return-value]


def _optional_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]
