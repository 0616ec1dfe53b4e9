"""``mjctl reconcile [--from DATE --to DATE] [--format table|csv|json]``: prove the books balance.

Asks the ledger service (``LedgerService.Reconcile``, with a finance token) for its report: trial
balance, balances against postings, running balances, no negative balance, per-transfer and
per-game sums, every instruction posted exactly once, and "ledger postings equal the scoring
projection", which the ledger checks against the scoring service's own list of instructions
(``ScoringService.ListSettlementInstructions``); and the rake per room per day. This command
prints that answer; it computes nothing itself and reads no database. Exit code 1 when anything
does not reconcile, naming every failing check on stderr; 2 when the ledger could not answer.

The window [from, to) selects transfers by the time they were posted (the settlement event's
occurrence time) and scoring instructions by the same time; a bare date for ``--to`` includes
that whole day. Account-wide checks always cover the whole history. The ledger posts what scoring
instructs asynchronously: a window that ends now may name instructions not posted yet.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import sys
from typing import TYPE_CHECKING, Any, Final, TextIO

if TYPE_CHECKING:
    from mahjong.v1.ledger_service_pb2 import ReconcileResponse

CHECKS: Final = (
    "trial_balance",
    "balance_matches_postings",
    "running_balance",
    "not_negative",
    "transfer_sum",
    "kong_income",
    "game_sum",
    "posted_once",
    "matches_scoring",
)
"""The ledger's checks in report order (`ReconcileFinding.check`, mahjong_ledger.reconcile)."""
FORMATS: Final = ("table", "csv", "json")
TOKEN_TTL_SECONDS: Final = 600
RECONCILE_TIMEOUT_SECONDS: Final = 600.0


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
    parser.add_argument(
        "--ledger", metavar="HOST:PORT", help="the ledger service (default: MAHJONG_LEDGER_GRPC_TARGET)"
    )
    parser.add_argument(
        "--token", metavar="JWT", help="a finance or ops token (default: one minted with MAHJONG_JWT_SECRET)"
    )
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
    """The ``reconcile`` subcommand: 0 when everything reconciles, 1 naming what does not, 2 when
    the ledger did not answer."""
    import grpc
    from mahjong_platform.auth import ROLE_FINANCE, mint_token
    from mahjong_platform.config import load_settings

    if arguments.from_time and arguments.to_time and arguments.from_time > arguments.to_time:
        print("mjctl reconcile: --from is after --to", file=sys.stderr)
        return 2
    settings = load_settings()
    token = arguments.token or mint_token(
        settings.jwt_secret, "mjctl-reconcile", [ROLE_FINANCE], ttl_seconds=TOKEN_TTL_SECONDS
    )
    try:
        report = ask_ledger(
            arguments.ledger or settings.grpc_target("ledger"), token, arguments.from_time, arguments.to_time
        )
    except grpc.RpcError as error:
        said = f"{error.code().name}: {error.details()}"
        print(f"mjctl reconcile: the ledger did not reconcile: {said}", file=sys.stderr)
        return 2
    write = {"table": write_table, "csv": write_csv, "json": write_json}[arguments.format]
    write(report, sys.stdout)
    failing = failing_checks(report)
    if failing:
        print("reconcile FAILED: " + ", ".join(failing), file=sys.stderr)
        return 1
    return 0


def ask_ledger(
    target: str, token: str, from_time: datetime.datetime | None, to_time: datetime.datetime | None
) -> ReconcileResponse:
    """``LedgerService.Reconcile`` over [from, to): the ledger's `ReconcileResponse`."""
    from mahjong.v1 import ledger_service_pb2, ledger_service_pb2_grpc
    from mahjong_platform.grpc_client import open_channel

    request = ledger_service_pb2.ReconcileRequest()
    if from_time is not None:
        getattr(request, "from").FromDatetime(from_time)
    if to_time is not None:
        request.to.FromDatetime(to_time)
    with open_channel(target, lambda: token) as channel:
        response: ReconcileResponse = ledger_service_pb2_grpc.LedgerServiceStub(channel).Reconcile(
            request, timeout=RECONCILE_TIMEOUT_SECONDS
        )
    return response


def failing_checks(report: ReconcileResponse) -> list[str]:
    """The names of the checks with findings, in check order."""
    failed = {finding.check for finding in report.findings}
    return [check for check in CHECKS if check in failed] + sorted(failed - set(CHECKS))


def _check_counts(report: ReconcileResponse) -> dict[str, int]:
    counts = dict.fromkeys(CHECKS, 0)
    for finding in report.findings:
        counts[finding.check] = counts.get(finding.check, 0) + 1
    return counts


def write_table(report: ReconcileResponse, output: TextIO) -> None:
    """The human report: checks, findings, totals, rake per room per day."""
    output.write(f"{'check':<26} {'result':<7} findings\n")
    for check, count in _check_counts(report).items():
        result = "ok" if count == 0 else "FAILED"
        if check == "matches_scoring" and not report.scoring_checked:
            result = "skipped"
        output.write(f"{check:<26} {result:<7} {count}\n")
    output.write(
        f"accounts sum {report.accounts_sum_beans} beans; {report.games_checked} games and "
        f"{report.instructions_checked} instructions checked\n"
    )
    for finding in report.findings:
        output.write(f"  {finding.check}: {finding.subject}: {finding.detail}\n")
    if report.findings_truncated:
        output.write(f"  (findings cut at {len(report.findings)})\n")
    output.write(f"\n{'day':<10}  {'room':<24} {'rake beans':>12} {'games':>6}\n")
    for line in report.rake:
        output.write(f"{line.day:<10}  {line.room_id:<24} {line.rake_beans:>12} {line.games:>6}\n")
    if not report.rake:
        output.write("(no rake in the window)\n")
    output.write("reconciled: ok\n" if report.ok else "reconciled: FAILED\n")


def write_csv(report: ReconcileResponse, output: TextIO) -> None:
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
    for line in report.rake:
        writer.writerow(["rake", line.room_id, line.day, line.rake_beans, f"{line.games} games"])


def write_json(report: ReconcileResponse, output: TextIO) -> None:
    """One JSON document with everything."""
    document = {
        "ok": report.ok,
        "failing_checks": failing_checks(report),
        "checks": {
            check: {"ok": count == 0, "findings": count} for check, count in _check_counts(report).items()
        },
        "findings": [
            {"check": finding.check, "subject": finding.subject, "detail": finding.detail}
            for finding in report.findings
        ],
        "findings_truncated": report.findings_truncated,
        "scoring_checked": report.scoring_checked,
        "accounts_sum_beans": report.accounts_sum_beans,
        "games_checked": report.games_checked,
        "instructions_checked": report.instructions_checked,
        "rake_per_room_per_day": [
            {"day": line.day, "room_id": line.room_id, "rake_beans": line.rake_beans, "games": line.games}
            for line in report.rake
        ],
    }
    output.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
