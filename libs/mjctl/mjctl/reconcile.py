"""``mjctl reconcile [--from DATE --to DATE] [--format table|csv|json]``: prove the books balance.

Runs the ledger's own `mahjong_ledger.reconcile.reconcile` (trial balance, balances against
postings, running balances, no negative balance, per-transfer and per-game sums, every
instruction posted exactly once) directly against the ledger database, with the scoring database
behind its `ScoringInstructions` hook for "ledger postings equal the scoring projection"; and
reports the rake per room per day. Exit code 1 when anything does not reconcile, naming every
failing check on stderr.

Why the databases and not ``LedgerService.Reconcile`` over gRPC: the comparison with scoring needs
the scoring projection, which the ledger service cannot read (services never share a database);
this command may read both. Read-only: one transaction per database, nothing written.

The window [from, to) selects transfers by the time they were posted (the settlement event's
occurrence time) and scoring instructions by the same time; a bare date for ``--to`` includes
that whole day. Account-wide checks always cover the whole history.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import sys
from collections.abc import Mapping
from typing import Any, Final, TextIO

import sqlalchemy
from mahjong_ledger.domain import HOUSE_RAKE_ACCOUNT, TransferKind
from mahjong_ledger.models import ledger_postings, ledger_transfers
from mahjong_ledger.reconcile import (
    BALANCE_MATCHES_POSTINGS,
    GAME_SUM,
    KONG_INCOME,
    MATCHES_SCORING,
    NOT_NEGATIVE,
    POSTED_ONCE,
    RUNNING_BALANCE,
    TRANSFER_SUM,
    TRIAL_BALANCE,
    InstructedBeans,
    ReconcileReport,
    reconcile,
)
from mahjong_platform.config import load_settings
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.envelopes import parse_envelope
from mahjong_platform.schema import stored_events
from mahjong_scoring.models import scoring_lines
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

CHECKS: Final = (
    TRIAL_BALANCE,
    BALANCE_MATCHES_POSTINGS,
    RUNNING_BALANCE,
    NOT_NEGATIVE,
    TRANSFER_SUM,
    KONG_INCOME,
    GAME_SUM,
    POSTED_ONCE,
    MATCHES_SCORING,
)
FORMATS: Final = ("table", "csv", "json")
SETTLEMENT_INSTRUCTED_TYPE: Final = "SettlementInstructed"


class ScoringDatabaseInstructions:
    """`ScoringInstructions` read from the scoring database: the projection's lines, in the window.

    Without a window, every ``scoring_lines`` row. With one, the lines whose ``SettlementInstructed``
    event (in the scoring event store) occurred in it: the same time the ledger stamps on the
    transfer, so both sides select the same instructions.
    """

    def __init__(self, session: Session) -> None:
        self._session = session

    def instructions(
        self, from_time: datetime.datetime | None, to_time: datetime.datetime | None
    ) -> Mapping[str, InstructedBeans]:
        """Every instruction id in the window, with its game and requested beans."""
        query = sqlalchemy.select(
            scoring_lines.c.instruction_id, scoring_lines.c.table_id, scoring_lines.c.total_beans
        )
        lines = {
            row.instruction_id: InstructedBeans(row.table_id, int(row.total_beans))
            for row in self._session.execute(query)
        }
        if from_time is None and to_time is None:
            return lines
        in_window = self._instruction_ids_between(from_time, to_time)
        return {
            instruction_id: lines[instruction_id] for instruction_id in in_window if instruction_id in lines
        }

    def _instruction_ids_between(
        self, from_time: datetime.datetime | None, to_time: datetime.datetime | None
    ) -> set[str]:
        query = sqlalchemy.select(stored_events.c.envelope).where(
            stored_events.c.event_type == SETTLEMENT_INSTRUCTED_TYPE
        )
        if from_time is not None:
            query = query.where(stored_events.c.occurred_at >= from_time)
        if to_time is not None:
            query = query.where(stored_events.c.occurred_at < to_time)
        return {
            parse_envelope(bytes(row.envelope)).settlement_instructed.instruction_id
            for row in self._session.execute(query)
        }


@dataclasses.dataclass(frozen=True)
class RakeLine:
    """The rake one room took on one (UTC) day."""

    day: str
    room_id: str
    rake_beans: int
    games: int


def rake_per_room_per_day(
    session: Session, from_time: datetime.datetime | None, to_time: datetime.datetime | None
) -> list[RakeLine]:
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
        )
    )
    if from_time is not None:
        query = query.where(ledger_transfers.c.posted_at >= from_time)
    if to_time is not None:
        query = query.where(ledger_transfers.c.posted_at < to_time)
    beans: dict[tuple[str, str], int] = {}
    games: dict[tuple[str, str], set[str]] = {}
    for row in session.execute(query):
        posted_at: datetime.datetime = row.posted_at
        if posted_at.tzinfo is not None:
            posted_at = posted_at.astimezone(datetime.UTC)
        key = (posted_at.date().isoformat(), row.room_id)
        beans[key] = beans.get(key, 0) + int(row.beans)
        games.setdefault(key, set()).add(row.table_id)
    return [
        RakeLine(day, room_id, beans[(day, room_id)], len(games[(day, room_id)]))
        for day, room_id in sorted(beans)
    ]


def register(subparsers: Any) -> None:
    """Add ``reconcile`` to the ``mjctl`` command."""
    parser = subparsers.add_parser(
        "reconcile",
        help="trial balance, per-game sums, postings equal scoring, rake per room per day (finance)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--from", dest="from_time", type=parse_moment, metavar="DATE", help="window start (UTC)"
    )
    parser.add_argument("--to", dest="to_time", type=_parse_end, metavar="DATE", help="window end (UTC)")
    parser.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    parser.add_argument("--ledger-database", metavar="URL", help="default: the configured ledger database")
    parser.add_argument("--scoring-database", metavar="URL", help="default: the configured scoring database")
    parser.set_defaults(handler=run)


def parse_moment(text: str) -> datetime.datetime:
    """An ISO date (midnight UTC) or date-time (UTC unless it says otherwise)."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO date or date-time: {text!r}") from None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=datetime.UTC)
    return moment.astimezone(datetime.UTC)


def _parse_end(text: str) -> datetime.datetime:
    moment = parse_moment(text)
    if len(text.strip()) == len("2026-01-31"):
        return moment + datetime.timedelta(days=1)  # A bare date includes its day.
    return moment


def run(arguments: argparse.Namespace) -> int:
    """The ``reconcile`` subcommand: 0 when everything reconciles, 1 naming what does not."""
    if arguments.from_time and arguments.to_time and arguments.from_time > arguments.to_time:
        print("mjctl reconcile: --from is after --to", file=sys.stderr)
        return 2
    settings = load_settings()
    ledger_engine = create_engine_for(arguments.ledger_database or settings.database_url("ledger"))
    scoring_engine = create_engine_for(arguments.scoring_database or settings.database_url("scoring"))
    try:
        report, rake = reconcile_databases(
            ledger_engine, scoring_engine, arguments.from_time, arguments.to_time
        )
    finally:
        ledger_engine.dispose()
        scoring_engine.dispose()
    write = {"table": write_table, "csv": write_csv, "json": write_json}[arguments.format]
    write(report, rake, sys.stdout)
    failing = failing_checks(report)
    if failing:
        print("reconcile FAILED: " + ", ".join(failing), file=sys.stderr)
        return 1
    return 0


def reconcile_databases(
    ledger_engine: Engine,
    scoring_engine: Engine,
    from_time: datetime.datetime | None,
    to_time: datetime.datetime | None,
) -> tuple[ReconcileReport, list[RakeLine]]:
    """The ledger's reconcile with the scoring hook, and the rake per room per day (read-only)."""
    with (
        transaction(create_session_factory(ledger_engine)) as ledger_session,
        transaction(create_session_factory(scoring_engine)) as scoring_session,
    ):
        report = reconcile(
            ledger_session,
            from_time=from_time,
            to_time=to_time,
            scoring=ScoringDatabaseInstructions(scoring_session),
        )
        rake = rake_per_room_per_day(ledger_session, from_time, to_time)
        ledger_session.rollback()
        scoring_session.rollback()
    return report, rake


def failing_checks(report: ReconcileReport) -> list[str]:
    """The names of the checks with findings, in check order."""
    failed = {finding.check for finding in report.findings}
    return [check for check in CHECKS if check in failed] + sorted(failed - set(CHECKS))


def _check_counts(report: ReconcileReport) -> dict[str, int]:
    counts = dict.fromkeys(CHECKS, 0)
    for finding in report.findings:
        counts[finding.check] = counts.get(finding.check, 0) + 1
    return counts


def write_table(report: ReconcileReport, rake: list[RakeLine], output: TextIO) -> None:
    """The human report: checks, findings, totals, rake per room per day."""
    output.write(f"{'check':<26} {'result':<7} findings\n")
    for check, count in _check_counts(report).items():
        output.write(f"{check:<26} {'ok' if count == 0 else 'FAILED':<7} {count}\n")
    output.write(
        f"accounts sum {report.accounts_sum_beans} beans; {report.games_checked} games and "
        f"{report.instructions_checked} instructions checked\n"
    )
    for finding in report.findings:
        output.write(f"  {finding.check}: {finding.subject}: {finding.detail}\n")
    if report.findings_truncated:
        output.write(f"  (findings cut at {len(report.findings)})\n")
    output.write(f"\n{'day':<10}  {'room':<24} {'rake beans':>12} {'games':>6}\n")
    for line in rake:
        output.write(f"{line.day:<10}  {line.room_id:<24} {line.rake_beans:>12} {line.games:>6}\n")
    if not rake:
        output.write("(no rake in the window)\n")
    output.write("reconciled: ok\n" if report.ok else "reconciled: FAILED\n")


def write_csv(report: ReconcileReport, rake: list[RakeLine], output: TextIO) -> None:
    """One CSV: ``record`` says what a row is (check, finding, total, rake)."""
    writer = csv.writer(output, lineterminator="\n")
    writer.writerow(["record", "name", "subject", "value", "detail"])
    for check, count in _check_counts(report).items():
        writer.writerow(["check", check, "", "ok" if count == 0 else "failed", count])
    for finding in report.findings:
        writer.writerow(["finding", finding.check, finding.subject, "", finding.detail])
    writer.writerow(["total", "accounts_sum_beans", "", report.accounts_sum_beans, ""])
    writer.writerow(["total", "games_checked", "", report.games_checked, ""])
    writer.writerow(["total", "instructions_checked", "", report.instructions_checked, ""])
    for line in rake:
        writer.writerow(["rake", line.room_id, line.day, line.rake_beans, f"{line.games} games"])


def write_json(report: ReconcileReport, rake: list[RakeLine], output: TextIO) -> None:
    """One JSON document with everything."""
    document = {
        "ok": report.ok,
        "failing_checks": failing_checks(report),
        "checks": {
            check: {"ok": count == 0, "findings": count} for check, count in _check_counts(report).items()
        },
        "findings": [dataclasses.asdict(finding) for finding in report.findings],
        "findings_truncated": report.findings_truncated,
        "accounts_sum_beans": report.accounts_sum_beans,
        "games_checked": report.games_checked,
        "instructions_checked": report.instructions_checked,
        "rake_per_room_per_day": [dataclasses.asdict(line) for line in rake],
    }
    output.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
