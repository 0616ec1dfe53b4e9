"""What happened at a table, in a few lines: the demo's and the operators' quick summary.

Reads the table's full event stream through TableService.Watch with an ops token (full
information), so it works against any running system.
"""

from __future__ import annotations

import time

import grpc
from mahjong.v1 import (
    common_pb2,
    envelope_pb2,
    ledger_service_pb2,
    ledger_service_pb2_grpc,
    table_service_pb2,
    table_service_pb2_grpc,
)

WIN_BY = {
    common_pb2.WIN_BY_SELF_DRAW: "self-draw",
    common_pb2.WIN_BY_DISCARD: "discard",
    common_pb2.WIN_BY_ROB_KONG: "robbing a kong",
}
EXPOSURE = {
    common_pb2.KONG_EXPOSURE_EXPOSED: "exposed",
    common_pb2.KONG_EXPOSURE_ADDED: "added",
    common_pb2.KONG_EXPOSURE_CONCEALED: "concealed",
}


def table_events(channel: grpc.Channel, table_id: str) -> list[envelope_pb2.Envelope]:
    stub = table_service_pb2_grpc.TableServiceStub(channel)
    return list(stub.Watch(table_service_pb2.WatchRequest(table_id=table_id), timeout=30))


def summary_lines(events: list[envelope_pb2.Envelope]) -> list[str]:
    """Who sat where, every kong, win (with fan names) and escape, and how the game ended."""
    lines: list[str] = []
    players: dict[int, str] = {}
    for envelope in events:
        kind = envelope.WhichOneof("payload")
        if kind == "table_opened":
            opened = envelope.table_opened
            players = {seat.seat: seat.player_id for seat in opened.seats}
            if opened.wildcard:  # Formula (RULES.md 2.1)
                rule = f"wildcard {opened.wildcard} (indicator {opened.wildcard_indicator})"
            else:  # Sichuan: the exchange direction, when the room plays exchange three (1.2)
                rule = f"exchange {opened.exchange_direction or 'off'}"
            lines.append(
                f"table {opened.table_id[:8]} room {opened.room_id}: dealer seat {opened.dealer_seat}, "
                f"{rule}, seats " + ", ".join(f"{seat} {player}" for seat, player in sorted(players.items()))
            )
        elif kind == "kong_declared":
            kong = envelope.kong_declared
            lines.append(f"  kong: seat {kong.seat} {EXPOSURE.get(kong.exposure, '?')} kong of {kong.tile}")
        elif kind == "player_won":
            won = envelope.player_won
            # Formula wins (RULES.md 2.2) add fans; Sichuan wins multiply (1.7).
            formula = won.fan_total > 0 and won.multiplier == 0
            fans = " · ".join(
                (f"{fan.name} {fan.multiplier}" + (f"×{fan.count}" if fan.count > 1 else ""))
                if formula
                else f"{fan.name} ×{fan.multiplier}"
                for fan in won.fans
            )
            total = f"{won.fan_total} fan" if formula else f"×{won.multiplier}"
            source = "" if won.from_seat < 0 else f" from seat {won.from_seat}"
            lines.append(
                f"  win {won.win_order}: seat {won.seat} ({players.get(won.seat, '?')}) by "
                f"{WIN_BY.get(won.win_by, '?')}{source} on {won.win_tile}: {fans} = {total}"
            )
        elif kind == "bird_revealed":
            bird = envelope.bird_revealed
            lines.append(f"  bird: {bird.tile} lands on seat {bird.seat}")
        elif kind == "player_left":
            left = envelope.player_left
            lines.append(f"  escape: seat {left.seat} ({left.reason}{', had won' if left.had_won else ''})")
        elif kind == "game_ended":
            lines.append(f"  ended: {envelope.game_ended.reason} after {envelope.sequence} events")
    return lines


def print_table_summary(channel: grpc.Channel, table_id: str) -> None:
    for line in summary_lines(table_events(channel, table_id)):
        print(line)


def wait_for_settlement(
    ledger: ledger_service_pb2_grpc.LedgerServiceStub,
    table_id: str,
    seats: int = 4,
    timeout_seconds: float = 60,
    poll_seconds: float = 0.2,
) -> ledger_service_pb2.GetGameStatementResponse | None:
    """The game's ledger statement once its rake transfers (the last lines of a game) are posted;
    None when the ledger has not posted them within the timeout."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        try:
            statement: ledger_service_pb2.GetGameStatementResponse = ledger.GetGameStatement(
                ledger_service_pb2.GetGameStatementRequest(table_id=table_id)
            )
            if sum(transfer.reason == "rake" for transfer in statement.transfers) >= seats:
                return statement
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise
        time.sleep(poll_seconds)
    return None


def money_lines(ledger_channel: grpc.Channel, table_ids: list[str]) -> list[str]:
    """Each game's net beans per account, every player's balance, and the reconcile summary."""
    ledger = ledger_service_pb2_grpc.LedgerServiceStub(ledger_channel)
    lines: list[str] = []
    players: set[str] = set()
    for table_id in table_ids:
        statement = wait_for_settlement(ledger, table_id)
        if statement is None:
            lines.append(f"table {table_id[:8]}: not settled by the ledger yet")
            continue
        net = sorted((posting.account, posting.beans) for posting in statement.net)
        players.update(account for account, _beans in net if account.startswith("player:"))
        lines.append(
            f"table {table_id[:8]} beans: " + ", ".join(f"{account} {beans:+,}" for account, beans in net)
        )
    for account in sorted(players):
        balance = ledger.GetBalance(ledger_service_pb2.GetBalanceRequest(account=account)).balance_beans
        lines.append(f"balance {account}: {balance:,} beans")
    report = ledger.Reconcile(ledger_service_pb2.ReconcileRequest())
    verdict = "ok" if report.ok else f"{len(report.findings)} problems"
    lines.append(
        f"reconcile: {verdict}; sum of all accounts {report.accounts_sum_beans} beans; "
        f"{report.games_checked} games, {report.instructions_checked} instructions checked"
    )
    lines.extend(f"  {finding.check} {finding.subject}: {finding.detail}" for finding in report.findings[:10])
    return lines


def shortfall_lines(ledger_channel: grpc.Channel, table_id: str) -> list[str]:
    """Every short payment of a settled game (RULES.md 1.9, 1.9a.1): who owed what, what moved.

    A transfer moved less than requested when its payer ran out of beans (1.9: the balance split
    among the payees) or, for a kong refund or call transfer, when the kong itself was paid short
    (1.9a.1: only the income received moves). Empty when the game had none or is not settled yet.
    """
    ledger = ledger_service_pb2_grpc.LedgerServiceStub(ledger_channel)
    statement = wait_for_settlement(ledger, table_id)
    if statement is None:
        return []
    lines = []
    for transfer in statement.transfers:
        if transfer.posted_beans >= transfer.requested_beans:
            continue
        payers = [posting.account for posting in transfer.postings if posting.beans < 0]
        payees = ", ".join(
            f"{posting.account} +{posting.beans:,}" for posting in transfer.postings if posting.beans > 0
        )
        owed = transfer.requested_beans
        reasons = []
        if transfer.HasField("income_limit_beans") and transfer.income_limit_beans < owed:
            owed = transfer.income_limit_beans
            reasons.append(f"only {owed:,} beans of kong income were received")
        if transfer.posted_beans < owed:
            reasons.append("the payer ran out of beans")
        why = "; ".join(reasons)
        lines.append(
            f"short payment at table {table_id[:8]} ({transfer.reason}): "
            f"{payers[0] if payers else 'the payer'} owed {transfer.requested_beans:,}, "
            f"{transfer.posted_beans:,} moved ({why})" + (f": {payees}" if payees else "")
        )
    return lines
