"""Reconciliation: prove from the stored rows that the books balance, or name what does not.

Checks (ARCHITECTURE.md "Money: the ledger"; the check names are the ``ReconcileFinding.check``):

- ``trial_balance``: the sum of all account balances is zero (and so is the sum of all postings).
- ``balance_matches_postings``: each account's materialized balance equals the sum of its postings.
- ``running_balance``: each posting's recorded ``balance_after_beans`` equals the running sum of the
  account's postings up to it; the first posting where they part is named (a tampered row).
- ``not_negative``: no account except ``world`` holds a negative balance.
- ``transfer_sum``: each transfer's postings sum to zero, and the beans debited equal its
  ``posted_beans``, never more than requested nor than the kong income a refund or call transfer
  was limited to (RULES.md 1.9a.1); a payment short of what was owed left the payer at exactly zero.
- ``kong_income``: per game, the beans a player's kong refunds returned to one original payer are at
  most what that payer paid them for kongs, and everything their refunds and call transfers moved
  is at most their kong income there (RULES.md 1.9a.1), from the postings themselves, so a refund
  or transfer posted without its income limit (an instruction naming no income instructions) is
  caught too.
- ``game_sum``: per game, player deltas + rake + escape penalties (+ compensations, which are
  player deltas) = 0.
- ``posted_once``: no order key has two transfers, and a game announced by ``GameSettled`` has as
  many posted instructions as the scoring service said it has.
- ``matches_scoring``: when a `ScoringInstructions` source is given, every instruction the scoring
  projection holds is posted once with the same requested beans, and the ledger has no others.

The time window [from, to) selects transfers by ``posted_at``; the account-wide checks (trial
balance, balances, running balances) always cover the whole history, since a balance is the sum
of everything before it. Findings are capped at ``findings_max``; the report says when it cut.
The report also gives the rake the house took per room and UTC day of posting in the window.

`LedgerService.Reconcile` runs this with `scoring_client.ScoringServiceInstructions` (the scoring
service's ListSettlementInstructions) as the `ScoringInstructions` source; ``mjctl reconcile``
calls that RPC.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Final, Protocol

import sqlalchemy
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from mahjong_ledger.domain import (
    HOUSE_ESCAPE_ACCOUNT,
    HOUSE_RAKE_ACCOUNT,
    PLAYER_ACCOUNT_PREFIX,
    WORLD_ACCOUNT,
    TransferKind,
)
from mahjong_ledger.models import ledger_accounts, ledger_games, ledger_postings, ledger_transfers

FINDINGS_MAX_DEFAULT: Final = 1_000

TRIAL_BALANCE: Final = "trial_balance"
BALANCE_MATCHES_POSTINGS: Final = "balance_matches_postings"
RUNNING_BALANCE: Final = "running_balance"
NOT_NEGATIVE: Final = "not_negative"
TRANSFER_SUM: Final = "transfer_sum"
GAME_SUM: Final = "game_sum"
POSTED_ONCE: Final = "posted_once"
KONG_INCOME: Final = "kong_income"
KONG_REASONS: Final = ("exposed_kong", "added_kong", "concealed_kong")
INCOME_MOVING_REASONS: Final = ("kong_refund", "call_transfer")
MATCHES_SCORING: Final = "matches_scoring"


@dataclasses.dataclass(frozen=True)
class Finding:
    """One thing that does not reconcile: which check, about what, and what exactly is wrong."""

    check: str
    subject: str
    detail: str


@dataclasses.dataclass(frozen=True)
class RakeLine:
    """The rake one room took on one (UTC) day."""

    day: str
    room_id: str
    rake_beans: int
    games: int


@dataclasses.dataclass(frozen=True)
class ReconcileReport:
    """The outcome: ok only when there are no findings."""

    accounts_sum_beans: int
    games_checked: int
    instructions_checked: int
    findings: tuple[Finding, ...]
    findings_truncated: bool = False
    scoring_checked: bool = False
    """True when the postings were compared with a `ScoringInstructions` source."""
    rake: tuple[RakeLine, ...] = ()
    """The rake per room per UTC day of posting in the window, in day then room order."""

    @property
    def ok(self) -> bool:
        """True when everything reconciles."""
        return not self.findings


@dataclasses.dataclass(frozen=True)
class InstructedBeans:
    """What the scoring projection says one instruction asked for."""

    table_id: str
    requested_beans: int


class ScoringInstructions(Protocol):
    """The hook for "ledger postings equal the scoring projection": the scoring service behind a
    small interface (in production `scoring_client.ScoringServiceInstructions`, over gRPC)."""

    def instructions(
        self, from_time: datetime.datetime | None, to_time: datetime.datetime | None
    ) -> Mapping[str, InstructedBeans]:
        """Every instruction id emitted in the window, with its game and requested beans."""
        ...


class _Findings:
    def __init__(self, maximum: int) -> None:
        assert maximum >= 1, maximum
        self.maximum = maximum
        self.items: list[Finding] = []
        self.truncated = False

    def add(self, check: str, subject: str, detail: str) -> None:
        if len(self.items) >= self.maximum:
            self.truncated = True
            return
        self.items.append(Finding(check, subject, detail))


def reconcile(
    session: Session,
    *,
    from_time: datetime.datetime | None = None,
    to_time: datetime.datetime | None = None,
    scoring: ScoringInstructions | None = None,
    findings_max: int = FINDINGS_MAX_DEFAULT,
) -> ReconcileReport:
    """Run every check over the ledger's rows (read-only) and report what does not reconcile."""
    if from_time is not None and to_time is not None and from_time > to_time:
        raise ValueError(f"from {from_time.isoformat()} is after to {to_time.isoformat()}")
    findings = _Findings(findings_max)
    window = _window(from_time, to_time)
    accounts_sum_beans = _check_trial_balance(session, findings)
    _check_balances_match_postings(session, findings)
    _check_running_balances(session, findings)
    _check_not_negative(session, findings)
    _check_transfer_sums(session, window, findings)
    _check_kong_income(session, window, findings)
    games_checked = _check_game_sums(session, window, findings)
    instructions_checked = _check_posted_once(session, window, findings)
    if scoring is not None:
        _check_matches_scoring(session, window, scoring.instructions(from_time, to_time), findings)
    return ReconcileReport(
        accounts_sum_beans=accounts_sum_beans,
        games_checked=games_checked,
        instructions_checked=instructions_checked,
        findings=tuple(findings.items),
        findings_truncated=findings.truncated,
        scoring_checked=scoring is not None,
        rake=tuple(rake_per_room_per_day(session, window)),
    )


def rake_per_room_per_day(session: Session, window: list[ColumnElement[bool]]) -> list[RakeLine]:
    """Beans credited to ``house:rake`` by settlements, per room and UTC day of posting."""
    query = (
        sqlalchemy.select(
            ledger_transfers.c.room_id,
            ledger_transfers.c.table_id,
            ledger_transfers.c.posted_at,
            ledger_postings.c.beans,
        )
        .join(ledger_postings, ledger_postings.c.transfer_id == ledger_transfers.c.transfer_id)
        .where(
            ledger_postings.c.account == HOUSE_RAKE_ACCOUNT,
            ledger_transfers.c.kind == TransferKind.SETTLEMENT.value,
            *window,
        )
    )
    beans: dict[tuple[str, str], int] = {}
    games: dict[tuple[str, str], set[str]] = {}
    for row in session.execute(query):
        key = (_utc(row.posted_at).date().isoformat(), row.room_id)
        beans[key] = beans.get(key, 0) + int(row.beans)
        games.setdefault(key, set()).add(row.table_id)
    return [
        RakeLine(day, room_id, beans[(day, room_id)], len(games[(day, room_id)]))
        for day, room_id in sorted(beans)
    ]


def _window(
    from_time: datetime.datetime | None, to_time: datetime.datetime | None
) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if from_time is not None:
        conditions.append(ledger_transfers.c.posted_at >= _utc(from_time))
    if to_time is not None:
        conditions.append(ledger_transfers.c.posted_at < _utc(to_time))
    return conditions


def _utc(moment: datetime.datetime) -> datetime.datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=datetime.UTC)
    return moment.astimezone(datetime.UTC)


def _check_trial_balance(session: Session, findings: _Findings) -> int:
    accounts_sum = int(
        session.execute(sqlalchemy.select(sqlalchemy.func.sum(ledger_accounts.c.balance_beans))).scalar() or 0
    )
    postings_sum = int(
        session.execute(sqlalchemy.select(sqlalchemy.func.sum(ledger_postings.c.beans))).scalar() or 0
    )
    if accounts_sum != 0:
        findings.add(TRIAL_BALANCE, "all accounts", f"account balances sum to {accounts_sum} beans, not 0")
    if postings_sum != 0:
        findings.add(TRIAL_BALANCE, "all postings", f"postings sum to {postings_sum} beans, not 0")
    return accounts_sum


def _check_balances_match_postings(session: Session, findings: _Findings) -> None:
    posted = (
        sqlalchemy.select(
            ledger_postings.c.account.label("account"),
            sqlalchemy.func.sum(ledger_postings.c.beans).label("total"),
        )
        .group_by(ledger_postings.c.account)
        .subquery()
    )
    query = (
        sqlalchemy.select(ledger_accounts.c.account, ledger_accounts.c.balance_beans, posted.c.total)
        .select_from(ledger_accounts.outerjoin(posted, posted.c.account == ledger_accounts.c.account))
        .where(ledger_accounts.c.balance_beans != sqlalchemy.func.coalesce(posted.c.total, 0))
        .order_by(ledger_accounts.c.account)
    )
    for row in session.execute(query):
        findings.add(
            BALANCE_MATCHES_POSTINGS,
            f"account {row.account}",
            f"balance is {row.balance_beans} beans but its postings sum to {int(row.total or 0)}",
        )
    orphans = (
        sqlalchemy.select(posted.c.account, posted.c.total)
        .select_from(posted.outerjoin(ledger_accounts, ledger_accounts.c.account == posted.c.account))
        .where(ledger_accounts.c.account.is_(None))
    )
    for row in session.execute(orphans):
        findings.add(
            BALANCE_MATCHES_POSTINGS,
            f"account {row.account}",
            f"has postings summing to {int(row.total)} beans but no account row",
        )


def _check_running_balances(session: Session, findings: _Findings) -> None:
    running = (
        sqlalchemy.select(
            ledger_postings.c.posting_id,
            ledger_postings.c.transfer_id,
            ledger_postings.c.account,
            ledger_postings.c.beans,
            ledger_postings.c.balance_after_beans,
            sqlalchemy.func.sum(ledger_postings.c.beans)
            .over(partition_by=ledger_postings.c.account, order_by=ledger_postings.c.posting_id)
            .label("running_beans"),
        )
    ).subquery()
    query = (
        sqlalchemy.select(running)
        .where(running.c.running_beans != running.c.balance_after_beans)
        .order_by(running.c.account, running.c.posting_id)
    )
    reported_accounts: set[str] = set()
    for row in session.execute(query):
        if row.account in reported_accounts:
            continue  # Every later posting of the account is off too; the first one is the clue.
        reported_accounts.add(row.account)
        findings.add(
            RUNNING_BALANCE,
            f"posting {row.posting_id} (transfer {row.transfer_id}, account {row.account})",
            f"records balance after {row.balance_after_beans} beans, but the account's postings up to it "
            f"sum to {int(row.running_beans)} (this posting moves {row.beans})",
        )


def _check_not_negative(session: Session, findings: _Findings) -> None:
    query = (
        sqlalchemy.select(ledger_accounts.c.account, ledger_accounts.c.balance_beans)
        .where(ledger_accounts.c.account != WORLD_ACCOUNT, ledger_accounts.c.balance_beans < 0)
        .order_by(ledger_accounts.c.account)
    )
    for row in session.execute(query):
        findings.add(NOT_NEGATIVE, f"account {row.account}", f"balance is {row.balance_beans} beans, below 0")


def _check_transfer_sums(session: Session, window: list[ColumnElement[bool]], findings: _Findings) -> None:
    debited = sqlalchemy.func.coalesce(
        sqlalchemy.func.sum(
            sqlalchemy.case((ledger_postings.c.beans < 0, -ledger_postings.c.beans), else_=0)
        ),
        0,
    )
    total = sqlalchemy.func.coalesce(sqlalchemy.func.sum(ledger_postings.c.beans), 0)
    query = (
        sqlalchemy.select(
            ledger_transfers.c.transfer_id,
            ledger_transfers.c.kind,
            ledger_transfers.c.order_key,
            ledger_transfers.c.table_id,
            ledger_transfers.c.requested_beans,
            ledger_transfers.c.posted_beans,
            ledger_transfers.c.income_limit_beans,
            total.label("total"),
            debited.label("debited"),
        )
        .select_from(
            ledger_transfers.outerjoin(
                ledger_postings, ledger_postings.c.transfer_id == ledger_transfers.c.transfer_id
            )
        )
        .where(*window)
        .group_by(ledger_transfers.c.transfer_id)
        .having(
            sqlalchemy.or_(
                total != 0,
                debited != ledger_transfers.c.posted_beans,
                ledger_transfers.c.posted_beans > ledger_transfers.c.requested_beans,
                ledger_transfers.c.posted_beans > _OWED_BEANS,
            )
        )
        .order_by(ledger_transfers.c.transfer_id)
    )
    for row in session.execute(query):
        subject = f"transfer {row.transfer_id} ({row.kind} {row.order_key!r}, table {row.table_id or '-'})"
        if row.total != 0:
            findings.add(
                TRANSFER_SUM,
                subject,
                f"postings sum to {int(row.total)} beans, not 0{_postings_of(session, row.transfer_id)}",
            )
        if row.debited != row.posted_beans:
            findings.add(
                TRANSFER_SUM,
                subject,
                f"debits {int(row.debited)} beans but records posted_beans {row.posted_beans}",
            )
        if row.posted_beans > row.requested_beans:
            findings.add(
                TRANSFER_SUM,
                subject,
                f"posted {row.posted_beans} beans, more than the {row.requested_beans} requested",
            )
        if row.income_limit_beans is not None and row.posted_beans > row.income_limit_beans:
            findings.add(
                TRANSFER_SUM,
                subject,
                f"moved {row.posted_beans} beans of kong income, more than the {row.income_limit_beans} "
                "received (RULES.md 1.9a.1)",
            )
    short = (
        sqlalchemy.select(
            ledger_transfers.c.transfer_id,
            ledger_transfers.c.order_key,
            ledger_transfers.c.payer_account,
            ledger_postings.c.balance_after_beans,
        )
        .join(
            ledger_postings,
            sqlalchemy.and_(
                ledger_postings.c.transfer_id == ledger_transfers.c.transfer_id,
                ledger_postings.c.account == ledger_transfers.c.payer_account,
            ),
        )
        .where(
            *window,
            ledger_transfers.c.kind == TransferKind.SETTLEMENT.value,
            ledger_transfers.c.posted_beans < _OWED_BEANS,
            ledger_postings.c.balance_after_beans != 0,
        )
        .order_by(ledger_transfers.c.transfer_id)
    )
    for row in session.execute(short):
        findings.add(
            TRANSFER_SUM,
            f"transfer {row.transfer_id} (settlement {row.order_key!r})",
            f"paid less than owed, yet left payer {row.payer_account} with "
            f"{row.balance_after_beans} beans (a short payer pays everything, RULES.md 1.9)",
        )


# What a transfer's payer owed: the request, or less when limited to kong income (RULES.md 1.9a.1).
_OWED_BEANS = sqlalchemy.case(
    (
        sqlalchemy.and_(
            ledger_transfers.c.income_limit_beans.is_not(None),
            ledger_transfers.c.income_limit_beans < ledger_transfers.c.requested_beans,
        ),
        ledger_transfers.c.income_limit_beans,
    ),
    else_=ledger_transfers.c.requested_beans,
)


def _check_kong_income(session: Session, window: list[ColumnElement[bool]], findings: _Findings) -> None:
    """RULES.md 1.9a.1 from the postings: what refunds and call transfers moved never exceeds the
    kong income received, per game, per original payer for refunds (see the module docstring)."""
    tables = (
        sqlalchemy.select(ledger_transfers.c.table_id)
        .where(
            *window,
            ledger_transfers.c.kind == TransferKind.SETTLEMENT.value,
            ledger_transfers.c.reason.in_(INCOME_MOVING_REASONS),
            ledger_transfers.c.posted_beans > 0,
        )
        .distinct()
    )
    query = (
        sqlalchemy.select(
            ledger_transfers.c.table_id,
            ledger_transfers.c.reason,
            ledger_transfers.c.payer_account,
            ledger_postings.c.account,
            ledger_postings.c.beans,
        )
        .join(ledger_postings, ledger_postings.c.transfer_id == ledger_transfers.c.transfer_id)
        .where(
            ledger_transfers.c.kind == TransferKind.SETTLEMENT.value,
            ledger_transfers.c.reason.in_(KONG_REASONS + INCOME_MOVING_REASONS),
            ledger_transfers.c.table_id.in_(tables.scalar_subquery()),
            ledger_postings.c.beans > 0,
        )
        .order_by(ledger_transfers.c.table_id, ledger_transfers.c.transfer_id, ledger_postings.c.account)
    )
    received: dict[tuple[str, str], int] = {}  # (table, kong player) -> kong income
    paid_by: dict[tuple[str, str, str], int] = {}  # (table, kong player, payer) -> what the payer paid
    moved: dict[tuple[str, str], int] = {}  # (table, kong player) -> refunds and transfers
    refunded_to: dict[tuple[str, str, str], int] = {}  # (table, kong player, payer) -> refunds
    for row in session.execute(query):
        beans = int(row.beans)
        if row.reason in KONG_REASONS:
            received[(row.table_id, row.account)] = received.get((row.table_id, row.account), 0) + beans
            key = (row.table_id, row.account, row.payer_account)
            paid_by[key] = paid_by.get(key, 0) + beans
            continue
        moved[(row.table_id, row.payer_account)] = moved.get((row.table_id, row.payer_account), 0) + beans
        if row.reason == "kong_refund":
            key = (row.table_id, row.payer_account, row.account)
            refunded_to[key] = refunded_to.get(key, 0) + beans
    for (table_id, player, payer), beans in sorted(refunded_to.items()):
        if beans > paid_by.get((table_id, player, payer), 0):
            findings.add(
                KONG_INCOME,
                f"table {table_id}",
                f"{player} refunded {beans} beans to {payer}, who paid them "
                f"{paid_by.get((table_id, player, payer), 0)} for kongs (RULES.md 1.9a.1)",
            )
    for (table_id, player), beans in sorted(moved.items()):
        if beans > received.get((table_id, player), 0):
            findings.add(
                KONG_INCOME,
                f"table {table_id}",
                f"{player}'s kong refunds and call transfers moved {beans} beans, more than the "
                f"{received.get((table_id, player), 0)} of kong income received (RULES.md 1.9a.1)",
            )


def _postings_of(session: Session, transfer_id: str) -> str:
    query = (
        sqlalchemy.select(ledger_postings.c.posting_id, ledger_postings.c.account, ledger_postings.c.beans)
        .where(ledger_postings.c.transfer_id == transfer_id)
        .order_by(ledger_postings.c.posting_id)
        .limit(20)
    )
    legs = ", ".join(
        f"posting {row.posting_id} {row.account} {row.beans:+d}" for row in session.execute(query)
    )
    return f" ({legs})" if legs else ""


def _account_class(
    account: ColumnElement[str], name: str, condition: ColumnElement[bool]
) -> sqlalchemy.Label[int]:
    return sqlalchemy.func.coalesce(
        sqlalchemy.func.sum(sqlalchemy.case((condition, ledger_postings.c.beans), else_=0)), 0
    ).label(name)


def _check_game_sums(session: Session, window: list[ColumnElement[bool]], findings: _Findings) -> int:
    account = ledger_postings.c.account
    players = _account_class(account, "players", account.startswith(PLAYER_ACCOUNT_PREFIX))
    rake = _account_class(account, "rake", account == HOUSE_RAKE_ACCOUNT)
    escape = _account_class(account, "escape", account == HOUSE_ESCAPE_ACCOUNT)
    total = sqlalchemy.func.coalesce(sqlalchemy.func.sum(ledger_postings.c.beans), 0).label("total")
    query = (
        sqlalchemy.select(ledger_transfers.c.table_id, players, rake, escape, total)
        .select_from(
            ledger_transfers.outerjoin(
                ledger_postings, ledger_postings.c.transfer_id == ledger_transfers.c.transfer_id
            )
        )
        .where(*window, ledger_transfers.c.kind == TransferKind.SETTLEMENT.value)
        .group_by(ledger_transfers.c.table_id)
        .order_by(ledger_transfers.c.table_id)
    )
    games_checked = 0
    for row in session.execute(query):
        games_checked += 1
        if row.total != 0:
            findings.add(
                GAME_SUM,
                f"table {row.table_id}",
                f"player deltas {int(row.players):+d} + rake {int(row.rake):+d} + escape penalties "
                f"{int(row.escape):+d} + other {int(row.total - row.players - row.rake - row.escape):+d} "
                f"= {int(row.total):+d} beans, not 0",
            )
    return games_checked


def _check_posted_once(session: Session, window: list[ColumnElement[bool]], findings: _Findings) -> int:
    duplicates = (
        sqlalchemy.select(
            ledger_transfers.c.kind, ledger_transfers.c.order_key, sqlalchemy.func.count().label("count")
        )
        .where(*window)
        .group_by(ledger_transfers.c.kind, ledger_transfers.c.order_key)
        .having(sqlalchemy.func.count() > 1)
        .order_by(ledger_transfers.c.order_key)
    )
    for row in session.execute(duplicates):
        findings.add(POSTED_ONCE, f"{row.kind} {row.order_key!r}", f"posted {row.count} times, not once")
    posted_counts = (
        sqlalchemy.select(ledger_transfers.c.table_id, sqlalchemy.func.count().label("posted"))
        .where(*window, ledger_transfers.c.kind == TransferKind.SETTLEMENT.value)
        .group_by(ledger_transfers.c.table_id)
    )
    posted_by_table = {row.table_id: int(row.posted) for row in session.execute(posted_counts)}
    games = sqlalchemy.select(ledger_games.c.table_id, ledger_games.c.instruction_count).where(
        ledger_games.c.table_id.in_(sorted(posted_by_table)) if window else sqlalchemy.true()
    )
    for row in session.execute(games.order_by(ledger_games.c.table_id)):
        posted = posted_by_table.get(row.table_id, 0)
        if posted != row.instruction_count:
            findings.add(
                POSTED_ONCE,
                f"table {row.table_id}",
                f"GameSettled announced {row.instruction_count} instructions, the ledger posted {posted}",
            )
    return sum(posted_by_table.values())


def _check_matches_scoring(
    session: Session,
    window: list[ColumnElement[bool]],
    instructed: Mapping[str, InstructedBeans],
    findings: _Findings,
) -> None:
    query = sqlalchemy.select(
        ledger_transfers.c.order_key, ledger_transfers.c.table_id, ledger_transfers.c.requested_beans
    ).where(*window, ledger_transfers.c.kind == TransferKind.SETTLEMENT.value)
    posted = {row.order_key: (row.table_id, int(row.requested_beans)) for row in session.execute(query)}
    for instruction_id in _sorted(instructed):
        expected = instructed[instruction_id]
        if instruction_id not in posted:
            findings.add(
                MATCHES_SCORING,
                f"instruction {instruction_id!r}",
                f"in scoring (table {expected.table_id}) but never posted",
            )
            continue
        table_id, requested_beans = posted[instruction_id]
        if (table_id, requested_beans) != (expected.table_id, expected.requested_beans):
            findings.add(
                MATCHES_SCORING,
                f"instruction {instruction_id!r}",
                f"scoring asked {expected.requested_beans} beans at table {expected.table_id}, "
                f"the ledger recorded {requested_beans} at table {table_id}",
            )
    for instruction_id in _sorted(set(posted) - set(instructed)):
        findings.add(
            MATCHES_SCORING, f"instruction {instruction_id!r}", "posted by the ledger but unknown to scoring"
        )


def _sorted(keys: Iterable[str]) -> list[str]:
    return sorted(keys)
