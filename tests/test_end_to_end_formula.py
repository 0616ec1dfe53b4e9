"""End to end for a formula (公式) room (issue 6) on the real broker and PostgreSQL: a non-member of
the Happy Points program is refused the members-only room (RULES.md 3); four new members find a
`formula-fan` table through matchmaking, play it through the table engine, scoring settles it with
the formula rules (bird, dealer doubling, fan_term, rake) and the ledger posts it: the game's
postings sum to zero and the ledger reconciles."""

from __future__ import annotations

import grpc
import pytest
from mahjong.v1 import (
    ledger_service_pb2,
    ledger_service_pb2_grpc,
    matchmaking_service_pb2,
    matchmaking_service_pb2_grpc,
)
from mahjong_platform.auth import mint_token
from mahjong_platform.config import Settings
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_client import open_channel
from mjctl.bots import run_bots

from .test_end_to_end import SECRET, balances_after, check_rake, describe, services, settings, wait_for_rake

pytestmark = pytest.mark.integration
__all__ = ["services", "settings"]  # the fixtures, shared with the Sichuan end-to-end test


def test_four_bots_play_a_formula_room_and_the_books_reconcile(
    settings: Settings, services: dict[str, int]
) -> None:
    ports = services

    def channel_for(service: str, player_id: str) -> grpc.Channel:
        return open_channel(f"127.0.0.1:{ports[service]}", mint_token(SECRET, player_id, member=True))

    outsider = matchmaking_service_pb2_grpc.MatchmakingServiceStub(
        open_channel(f"127.0.0.1:{ports['matchmaking']}", mint_token(SECRET, "outsider"))
    )
    with pytest.raises(grpc.RpcError) as refused:
        outsider.Enqueue(matchmaking_service_pb2.EnqueueRequest(room_id="formula-fan", idempotency_key="k"))
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "Happy Points" in refused.value.details()

    report = run_bots("formula-fan", 4, 1, channel_for, log=lambda _line: None)
    assert len(report.table_ids) == 1
    table_id = report.table_ids[0]
    database = create_engine_for(settings.database_url("table"))
    with transaction(create_session_factory(database)) as session:
        stored = EventStore().load(session, table_id)
    database.dispose()
    kinds = [envelope.WhichOneof("payload") for envelope in stored]
    assert kinds[-1] == "game_ended"
    assert stored[0].table_opened.wildcard  # RULES.md 2.1: the wildcard is recorded and public
    assert "exchange_picked" not in kinds and "missing_suit_chosen" not in kinds
    if "player_won" in kinds:
        assert kinds[-2] == "bird_revealed"  # RULES.md 2.3

    ledger = ledger_service_pb2_grpc.LedgerServiceStub(
        open_channel(f"127.0.0.1:{ports['ledger']}", mint_token(SECRET, "finance-desk", ["finance"]))
    )
    statement = wait_for_rake(ledger, table_id)
    net = {posting.account: posting.beans for posting in statement.net}
    assert sum(net.values()) == 0, describe(statement)
    # RULES.md 2.3: everyone pays the rake A; capped by balance as in 1.9.
    collected = check_rake(statement, balances_after(ledger, statement), rake_beans=rake_of(stored))
    assert net["house:rake"] == collected, describe(statement)
    win_transfers = [transfer for transfer in statement.transfers if transfer.reason == "win"]
    assert bool(win_transfers) == ("player_won" in kinds)  # a drawn hand pays only the rake
    reconciled = ledger.Reconcile(ledger_service_pb2.ReconcileRequest())
    assert reconciled.ok, reconciled.findings
    assert reconciled.accounts_sum_beans == 0
    assert reconciled.scoring_checked and reconciled.instructions_checked > 0  # postings = scoring


def rake_of(stored: list) -> int:  # type: ignore[type-arg]
    return int(stored[0].table_opened.rules.rake_beans)
