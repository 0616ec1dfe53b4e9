"""The bean ledger's pure double-entry logic: accounts, orders, transfers and the book they fold into.

No I/O, no clocks, no randomness: the SQL repository (`repository.py`) and the tests call these
functions with everything they need. ARCHITECTURE.md "Money: the ledger" is the specification:

- Accounts: ``player:<id>``, ``house:rake``, ``house:escape`` and ``world``, the issuer that deposits
  are drawn from. Only ``world`` may go negative; the sum over all accounts is always zero.
- A transfer is a list of postings (signed bean amounts per account) that sum to zero.
- A settlement order (one ``SettlementInstructed``) is posted at most what the payer has: the
  RULES.md 1.9 pro-rata split, or the 1.10 escape split, both computed by the rules library's
  `apply_balance`, so the ledger and the rules can never disagree on a split.
- A kong refund or call transfer names the kong's instructions (``income_instruction_ids``): it
  moves at most what the ledger credited its payer for them (RULES.md 1.9a.1), a figure the ledger
  reads from its own postings, so it is a pure function of the settlement stream in order.
- Orders are idempotent on their key (the instruction id, or the deposit idempotency key): the same
  key with the same content posts once; the same key with different content is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import uuid
from collections.abc import Iterable, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from mahjong_rules.settlement import (
    HOUSE_ESCAPE,
    HOUSE_RAKE,
    SEAT_COUNT,
    BeanInstruction,
    BeanPayment,
    Reason,
    post_instruction,
)

WORLD_ACCOUNT: Final = "world"
"""The issuer: deposits and starting grants are drawn from it, so it is the one negative account."""
HOUSE_RAKE_ACCOUNT: Final = HOUSE_RAKE
HOUSE_ESCAPE_ACCOUNT: Final = HOUSE_ESCAPE
HOUSE_ACCOUNTS: Final = frozenset({HOUSE_RAKE_ACCOUNT, HOUSE_ESCAPE_ACCOUNT})
PLAYER_ACCOUNT_PREFIX: Final = "player:"
PLAYER_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
"""Player ids: what the JWT ``sub`` and the matchmaking tickets carry; 1..64 safe characters."""

ACCOUNT_NAME_MAX_LENGTH: Final = len(PLAYER_ACCOUNT_PREFIX) + 64
TABLE_ID_MAX_LENGTH: Final = 200
ROOM_ID_MAX_LENGTH: Final = 100
ORDER_KEY_MAX_LENGTH: Final = 300
REASON_MAX_LENGTH: Final = 50
MEMO_MAX_LENGTH: Final = 500
PAYEES_MAX: Final = 8
LINE_BEANS_MAX: Final = 10**15
"""One payee line or one deposit; far above any game (64-cap × 1,000 N), far below int64 overflow."""
DEPOSIT_BEANS_MAX: Final = 10**12

DEPOSIT_REASON: Final = "deposit"
STARTING_GRANT_REASON: Final = "starting_grant"
STARTING_GRANT_KEY_PREFIX: Final = "grant:"  # reserved: `mahjong_platform.idempotency`
SETTLEMENT_REASONS: Final = frozenset(reason.value for reason in Reason)
INCOME_REASONS: Final = frozenset({Reason.KONG_REFUND.value, Reason.CALL_TRANSFER.value})
"""The instructions that move kong income and so may name income instructions (RULES.md 1.9a.1)."""

# Transfer ids are derived from the order key, so a rebuild from offset 0 reproduces every row.
_TRANSFER_ID_NAMESPACE: Final = uuid.UUID("6f1d8a52-3f0e-4c47-9a51-0c2b7d9f4e10")


class LedgerError(Exception):
    """Base of the ledger's typed domain errors; the servicer maps each to a gRPC status."""


class InvalidAccountError(LedgerError):
    """An account name that is not ``player:<id>``, ``house:rake``, ``house:escape`` or ``world``."""


class InvalidOrderError(LedgerError):
    """A settlement instruction or deposit that is malformed whatever the balances are."""


class IdempotencyConflictError(LedgerError):
    """An order key that was already used for an order with different content."""


class TransferKind(StrEnum):
    """Where a transfer came from; with the order key it identifies the transfer."""

    SETTLEMENT = "settlement"
    DEPOSIT = "deposit"


def check_account(account: str) -> str:
    """Return ``account`` when it is a valid account name, else raise `InvalidAccountError`."""
    if account == WORLD_ACCOUNT or account in HOUSE_ACCOUNTS:
        return account
    if account.startswith(PLAYER_ACCOUNT_PREFIX) and PLAYER_ID_PATTERN.fullmatch(
        account.removeprefix(PLAYER_ACCOUNT_PREFIX)
    ):
        return account
    raise InvalidAccountError(
        f"account {account[:ACCOUNT_NAME_MAX_LENGTH]!r} must be 'player:<id>' (id: 1-64 letters, digits, "
        f"'.', '_', '@', '-', starting with a letter or digit), 'house:rake', 'house:escape' or 'world'"
    )


def is_player_account(account: str) -> bool:
    """True for ``player:<id>`` accounts (the ones that pay and receive in games)."""
    return account.startswith(PLAYER_ACCOUNT_PREFIX)


def player_account(player_id: str) -> str:
    """The account of ``player_id``; raises `InvalidAccountError` for an unusable id."""
    return check_account(PLAYER_ACCOUNT_PREFIX + player_id)


def may_go_negative(account: str) -> bool:
    """Only the issuer may hold a negative balance (ARCHITECTURE.md "Money: the ledger")."""
    return account == WORLD_ACCOUNT


def transfer_id_for(kind: TransferKind, order_key: str) -> str:
    """The transfer id of an order: a UUID derived from its kind and key (stable across rebuilds)."""
    return str(uuid.uuid5(_TRANSFER_ID_NAMESPACE, f"{kind.value}:{order_key}"))


@dataclasses.dataclass(frozen=True)
class PayeeLine:
    """One payee of a settlement order: who, how many beans are owed, and this line's reason."""

    account: str
    beans: int
    reason: str


@dataclasses.dataclass(frozen=True)
class SettlementOrder:
    """A ``SettlementInstructed`` as the ledger needs it.

    The payees are listed in turn order after the payer (the order the rules library produces and
    the scoring service keeps); that order decides who receives a pro-rata remainder (RULES.md 1.9).
    """

    instruction_id: str
    table_id: str
    room_id: str
    reason: str
    payer_account: str
    payees: tuple[PayeeLine, ...]
    source_event_id: str = ""
    line: int = 0
    income_instruction_ids: tuple[str, ...] = ()
    """RULES.md 1.9a.1: for a kong refund or call transfer, the kong's instructions; the order then
    moves at most what they credited the payer (see `settlement_transfer`)."""

    @property
    def requested_beans(self) -> int:
        """What the payer owes in all."""
        return sum(payee.beans for payee in self.payees)


@dataclasses.dataclass(frozen=True)
class DepositOrder:
    """Move ``beans`` from ``world`` to ``account`` (ops/finance, or the starting grant)."""

    account: str
    beans: int
    idempotency_key: str
    memo: str = ""
    reason: str = DEPOSIT_REASON


@dataclasses.dataclass(frozen=True)
class Posting:
    """One leg of a transfer: a signed amount (negative debits, positive credits) on one account."""

    account: str
    beans: int
    reason: str


@dataclasses.dataclass(frozen=True)
class Transfer:
    """What the ledger moved for one order. The postings sum to zero; no leg is zero.

    ``requested_beans`` is what the order asked for, ``posted_beans`` what moved: less when the
    payer was short (then the payer's whole balance moved, RULES.md 1.9).
    """

    transfer_id: str
    kind: TransferKind
    order_key: str
    table_id: str
    room_id: str
    reason: str
    payer_account: str
    postings: tuple[Posting, ...]
    requested_beans: int
    posted_beans: int
    request_digest: str
    income_limit_beans: int | None = None
    """For a kong refund or call transfer: what the payer had received for the kong (1.9a.1)."""

    def __post_init__(self) -> None:
        assert sum(posting.beans for posting in self.postings) == 0, f"unbalanced transfer {self}"
        assert all(posting.beans != 0 for posting in self.postings), "a posting moves something"
        accounts = [posting.account for posting in self.postings]
        assert len(set(accounts)) == len(accounts), f"an account appears twice in {self.transfer_id}"
        assert 0 <= self.posted_beans <= self.owed_beans, (self.posted_beans, self.owed_beans)
        debited = -sum(posting.beans for posting in self.postings if posting.beans < 0)
        assert debited == self.posted_beans, (debited, self.posted_beans)

    @property
    def owed_beans(self) -> int:
        """What the payer owed: the request, limited to the kong income behind it (1.9a.1)."""
        if self.income_limit_beans is None:
            return self.requested_beans
        return min(self.requested_beans, self.income_limit_beans)

    def delta_beans(self, account: str) -> int:
        """The net change this transfer makes to ``account`` (0 when it is not involved)."""
        return sum(posting.beans for posting in self.postings if posting.account == account)


def check_settlement_order(order: SettlementOrder) -> None:
    """Raise `InvalidOrderError` (or `InvalidAccountError`) unless ``order`` can be posted.

    Payer: a player. Payees: players or house accounts, never ``world``, never the payer, no
    repeats, at most three players (the other seats), beans 0..LINE_BEANS_MAX (0 is a line a
    shortfall upstream already emptied). At least one payee.
    """
    _check_text("instruction id", order.instruction_id, ORDER_KEY_MAX_LENGTH)
    _check_text("table id", order.table_id, TABLE_ID_MAX_LENGTH)
    _check_text("room id", order.room_id, ROOM_ID_MAX_LENGTH, required=False)
    _check_settlement_reason(order.reason)
    check_account(order.payer_account)
    if not is_player_account(order.payer_account):
        raise InvalidOrderError(f"payer {order.payer_account!r} must be a player account")
    if not 1 <= len(order.payees) <= PAYEES_MAX:
        raise InvalidOrderError(f"an instruction has 1..{PAYEES_MAX} payees, got {len(order.payees)}")
    seen: set[str] = set()
    for payee in order.payees:
        check_account(payee.account)
        if payee.account == WORLD_ACCOUNT:
            raise InvalidOrderError("'world' never receives a settlement payment")
        if payee.account == order.payer_account:
            raise InvalidOrderError(f"payer {order.payer_account!r} cannot pay themselves")
        if payee.account in seen:
            raise InvalidOrderError(f"payee {payee.account!r} appears twice")
        seen.add(payee.account)
        if not 0 <= payee.beans <= LINE_BEANS_MAX:
            raise InvalidOrderError(
                f"payee {payee.account!r} beans must be 0..{LINE_BEANS_MAX}, got {payee.beans}"
            )
        if payee.reason:
            _check_settlement_reason(payee.reason)
    player_payees = [payee for payee in order.payees if is_player_account(payee.account)]
    if len(player_payees) > SEAT_COUNT - 1:
        raise InvalidOrderError(f"at most {SEAT_COUNT - 1} players are paid, got {len(player_payees)}")
    escape_lines = [payee for payee in order.payees if payee.account == HOUSE_ESCAPE_ACCOUNT]
    _check_income_references(order, bool(escape_lines))
    if escape_lines and escape_lines[0].beans == 0:
        # RULES.md 1.10: the penalty is at least escape_penalty_floor, and the shortfall split
        # gives the house the remainder; a zero penalty line would receive beans it was never owed.
        raise InvalidOrderError("an escape instruction's house:escape penalty line must be positive")


def _check_income_references(order: SettlementOrder, has_escape_line: bool) -> None:
    ids = order.income_instruction_ids
    if not ids:
        return
    if order.reason not in INCOME_REASONS:
        raise InvalidOrderError(
            f"only {' and '.join(sorted(INCOME_REASONS))} move kong income; {order.reason!r} names "
            "income instructions"
        )
    if has_escape_line:
        raise InvalidOrderError("an escape instruction never moves kong income")
    if len(ids) > PAYEES_MAX or len(set(ids)) != len(ids):
        raise InvalidOrderError(f"1..{PAYEES_MAX} distinct income instruction ids, got {len(ids)}")
    for income_id in ids:
        _check_text("income instruction id", income_id, ORDER_KEY_MAX_LENGTH)
        if income_id == order.instruction_id:
            raise InvalidOrderError("an instruction cannot move its own income")


def income_beans(order: SettlementOrder, credited: Mapping[tuple[str, str, str], int]) -> int | None:
    """RULES.md 1.9a.1: what the order's income instructions credited its payer, as posted, given
    ``credited`` ((table id, order key, account) -> beans). Only instructions of the order's own game
    count, and one never posted credited nothing. None for an order naming no income instruction."""
    if not order.income_instruction_ids:
        return None
    return sum(
        credited.get((order.table_id, key, order.payer_account), 0) for key in order.income_instruction_ids
    )


def check_deposit_order(order: DepositOrder) -> None:
    """Raise `InvalidOrderError` (or `InvalidAccountError`) unless ``order`` can be posted."""
    check_account(order.account)
    if order.account == WORLD_ACCOUNT:
        raise InvalidOrderError("deposits are drawn from 'world'; deposit to another account")
    if not 1 <= order.beans <= DEPOSIT_BEANS_MAX:
        raise InvalidOrderError(f"deposit beans must be 1..{DEPOSIT_BEANS_MAX}, got {order.beans}")
    _check_text("idempotency key", order.idempotency_key, ORDER_KEY_MAX_LENGTH)
    if len(order.memo) > MEMO_MAX_LENGTH:
        raise InvalidOrderError(f"memo is at most {MEMO_MAX_LENGTH} characters, got {len(order.memo)}")
    _check_reason(order.reason)


def settlement_digest(order: SettlementOrder) -> str:
    """A fingerprint of what a settlement order asks for, to tell a true retry from a key clash."""
    payees = ";".join(f"{payee.account}={payee.beans}/{payee.reason}" for payee in order.payees)
    text = f"{order.table_id}|{order.reason}|{order.payer_account}>{payees}"
    if order.income_instruction_ids:  # appended only when present: older digests stay valid
        text += "|income:" + ",".join(order.income_instruction_ids)
    return _digest(text)


def deposit_digest(order: DepositOrder) -> str:
    """A fingerprint of what a deposit asks for (the memo is a note, not part of the request)."""
    return _digest(f"{order.account}|{order.beans}|{order.reason}")


def settlement_transfer(
    order: SettlementOrder, payer_balance_beans: int, income_beans: int | None = None
) -> Transfer:
    """The transfer for ``order`` when the payer holds ``payer_balance_beans``.

    ``income_beans`` (required when the order names income instructions) is what those
    instructions credited the payer: the order moves at most that (RULES.md 1.9a.1). The split
    when the payer is short is the rules library's `post_instruction` (RULES.md 1.9, and 1.10 when
    a payee is ``house:escape``). The rules speak of seats, the ledger of accounts: the
    payer becomes seat 0 and the player payees seats 1, 2, 3 in listing order, so "the first payee
    in turn order after the payer" is the first player payee listed; house accounts come after the
    players, as in the rules.
    """
    check_settlement_order(order)
    assert payer_balance_beans >= 0, f"{order.payer_account} holds {payer_balance_beans} beans"
    if order.income_instruction_ids:
        assert income_beans is not None and income_beans >= 0, "a kong income order needs the income"
    else:
        income_beans = None
    instruction, account_of_party = _bean_instruction(order)
    posted = post_instruction(instruction, payer_balance_beans, income_beans or 0)
    postings: list[Posting] = []
    for payee, payment in zip(order.payees, posted.payments, strict=True):
        assert account_of_party[payment.payee] == payee.account
        if payment.beans > 0:
            postings.append(Posting(payee.account, payment.beans, payee.reason or order.reason))
    posted_beans = posted.total_beans
    if posted_beans > 0:
        postings.insert(0, Posting(order.payer_account, -posted_beans, order.reason))
    return Transfer(
        transfer_id=transfer_id_for(TransferKind.SETTLEMENT, order.instruction_id),
        kind=TransferKind.SETTLEMENT,
        order_key=order.instruction_id,
        table_id=order.table_id,
        room_id=order.room_id,
        reason=order.reason,
        payer_account=order.payer_account,
        postings=tuple(postings),
        requested_beans=order.requested_beans,
        posted_beans=posted_beans,
        request_digest=settlement_digest(order),
        income_limit_beans=income_beans,
    )


def deposit_transfer(order: DepositOrder) -> Transfer:
    """The transfer for a deposit: ``world`` pays ``account`` (world may go negative)."""
    check_deposit_order(order)
    return Transfer(
        transfer_id=transfer_id_for(TransferKind.DEPOSIT, order.idempotency_key),
        kind=TransferKind.DEPOSIT,
        order_key=order.idempotency_key,
        table_id="",
        room_id="",
        reason=order.reason,
        payer_account=WORLD_ACCOUNT,
        postings=(
            Posting(WORLD_ACCOUNT, -order.beans, order.reason),
            Posting(order.account, order.beans, order.reason),
        ),
        requested_beans=order.beans,
        posted_beans=order.beans,
        request_digest=deposit_digest(order),
    )


def starting_grant_order(account: str, grant_beans: int) -> DepositOrder:
    """The idempotent starting grant of a new player: a deposit keyed ``grant:<player id>``."""
    check_account(account)
    if not is_player_account(account):
        raise InvalidOrderError(f"only players get a starting grant, not {account!r}")
    player_id = account.removeprefix(PLAYER_ACCOUNT_PREFIX)
    return DepositOrder(
        account=account,
        beans=grant_beans,
        idempotency_key=STARTING_GRANT_KEY_PREFIX + player_id,
        memo="starting grant for a new player",
        reason=STARTING_GRANT_REASON,
    )


def apply_postings(balances: Mapping[str, int], transfer: Transfer) -> dict[str, int]:
    """The new balances of the accounts ``transfer`` touches (accounts not in ``balances`` start at 0).

    Asserts the ledger's invariants: no account except ``world`` ends negative. A violation is a
    bug in the caller (the split never posts more than the payer has), never a client error.
    """
    updated: dict[str, int] = {}
    for posting in transfer.postings:
        balance_beans = balances.get(posting.account, 0) + posting.beans
        assert balance_beans >= 0 or may_go_negative(posting.account), (
            f"{posting.account} would hold {balance_beans} beans after {transfer.transfer_id}"
        )
        updated[posting.account] = balance_beans
    return updated


@dataclasses.dataclass(frozen=True)
class Book:
    """An in-memory ledger: balances and the orders already posted. The model the SQL repository
    implements, and what the property tests fold random order streams into."""

    balances: Mapping[str, int] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    posted_digests: Mapping[tuple[TransferKind, str], str] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )
    credited: Mapping[tuple[str, str, str], int] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )
    """(table id, settlement order key, account) -> beans that order credited the account (1.9a.1)."""

    def income_of(self, order: SettlementOrder) -> int | None:
        """What the order's income instructions (of its own game) credited its payer; None for
        other orders."""
        return income_beans(order, self.credited)

    def balance(self, account: str) -> int:
        """The balance of ``account``; 0 for an account the book has never seen."""
        return self.balances.get(account, 0)

    def total_beans(self) -> int:
        """The sum over every account: always zero (the trial balance)."""
        return sum(self.balances.values())


def decide_settlement(book: Book, order: SettlementOrder) -> Transfer | None:
    """The transfer that posts ``order`` on ``book``, or None when it was posted before.

    Raises `IdempotencyConflictError` when the instruction id was posted with different content.
    """
    check_settlement_order(order)
    if _already_posted(book, TransferKind.SETTLEMENT, order.instruction_id, settlement_digest(order)):
        return None
    return settlement_transfer(order, book.balance(order.payer_account), book.income_of(order))


def decide_deposit(book: Book, order: DepositOrder) -> Transfer | None:
    """The transfer that posts ``order`` on ``book``, or None when the key was posted before."""
    check_deposit_order(order)
    if _already_posted(book, TransferKind.DEPOSIT, order.idempotency_key, deposit_digest(order)):
        return None
    return deposit_transfer(order)


def evolve(book: Book, transfer: Transfer) -> Book:
    """The book after ``transfer``: balances moved, its key remembered. Asserts the invariants."""
    key = (transfer.kind, transfer.order_key)
    assert key not in book.posted_digests, f"{key} is posted twice"
    balances = {**book.balances, **apply_postings(book.balances, transfer)}
    assert sum(balances.values()) == 0, "the trial balance is zero after every transfer"
    credited = dict(book.credited)
    if transfer.kind is TransferKind.SETTLEMENT:
        for posting in transfer.postings:
            if posting.beans > 0:
                credited[(transfer.table_id, transfer.order_key, posting.account)] = posting.beans
    return Book(
        balances=MappingProxyType(balances),
        posted_digests=MappingProxyType({**book.posted_digests, key: transfer.request_digest}),
        credited=MappingProxyType(credited),
    )


def fold(book: Book, orders: Iterable[SettlementOrder | DepositOrder]) -> tuple[Book, list[Transfer]]:
    """Post ``orders`` in turn onto ``book``; returns the final book and the transfers that moved."""
    transfers: list[Transfer] = []
    for order in orders:
        if isinstance(order, SettlementOrder):
            transfer = decide_settlement(book, order)
        else:
            transfer = decide_deposit(book, order)
        if transfer is not None:
            book = evolve(book, transfer)
            transfers.append(transfer)
    return book, transfers


def _already_posted(book: Book, kind: TransferKind, key: str, digest: str) -> bool:
    posted_digest = book.posted_digests.get((kind, key))
    if posted_digest is None:
        return False
    if posted_digest != digest:
        raise IdempotencyConflictError(f"{kind.value} key {key!r} was already used for a different request")
    return True


def _bean_instruction(order: SettlementOrder) -> tuple[BeanInstruction, dict[int | str, str]]:
    """The order as the rules library's `BeanInstruction`, and the account behind each party."""
    payer_seat = 0
    account_of_party: dict[int | str, str] = {payer_seat: order.payer_account}
    payments: list[BeanPayment] = []
    next_seat = payer_seat + 1
    for payee in order.payees:
        party: int | str
        if is_player_account(payee.account):
            party = next_seat
            next_seat += 1
        else:
            party = payee.account
        account_of_party[party] = payee.account
        payments.append(BeanPayment(party, payee.beans, Reason(payee.reason or order.reason)))
    instruction = BeanInstruction(
        payer_seat, tuple(payments), order.instruction_id, income_of=order.income_instruction_ids
    )
    return instruction, account_of_party


def _check_text(what: str, value: str, maximum_length: int, *, required: bool = True) -> None:
    if (required and not value) or len(value) > maximum_length:
        low = 1 if required else 0
        raise InvalidOrderError(f"{what} must be {low}..{maximum_length} characters, got {len(value)}")


def _check_reason(reason: str) -> None:
    if not reason or len(reason) > REASON_MAX_LENGTH or not reason.replace("_", "").isalnum():
        raise InvalidOrderError(
            f"reason must be 1..{REASON_MAX_LENGTH} letters, digits or '_', got {reason!r}"
        )


def _check_settlement_reason(reason: str) -> None:
    # Strict on purpose: a reason the ledger does not know means scoring and ledger disagree on
    # the contract, and that should stop in the dead letter topic, not be booked under a guess.
    if reason not in SETTLEMENT_REASONS:
        known = ", ".join(sorted(SETTLEMENT_REASONS))
        raise InvalidOrderError(f"settlement reason {reason[:REASON_MAX_LENGTH]!r} is not one of: {known}")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
