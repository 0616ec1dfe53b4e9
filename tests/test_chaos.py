"""A short seeded ``mjctl chaos`` (``make chaos`` runs the long one): bots play while every service
and the Kafka broker are SIGKILLed and restarted, the broker is paused, and the scoring service runs
on a full disk for a moment; afterwards no game is lost or settled twice, no bot failed, the books
reconcile and both projections rebuild identical from the topics."""

from __future__ import annotations

from pathlib import Path

import pytest
from mjctl.chaos import run_chaos

pytestmark = pytest.mark.integration

EVERY_FAULT = {
    "kill matchmaking",
    "kill table",
    "kill scoring",
    "kill ledger",
    "kill broker",
    "pause broker",
    "full disk scoring",
}


def test_bot_games_survive_every_service_and_the_broker_failing_and_the_books_stay_exact(
    tmp_path: Path,
) -> None:
    report = run_chaos(tmp_path, seed=12, games=2, players=4, rounds=1, gap_seconds=1.5)
    print("\n".join(report.lines()))
    assert {str(fault) for _, fault in report.faults} == EVERY_FAULT
    assert report.bot_failures == []
    assert report.games >= 2
    assert report.books.lost == [] and report.books.doubled == [] and report.books.unended == []
    assert report.books.tables_opened == report.books.tables_ended == report.books.settled_once
    assert report.checks == {
        "mjctl reconcile": "ok",
        "mjctl rebuild scoring": "ok",
        "mjctl rebuild ledger": "ok",
    }
    assert report.restarts.keys() == {"matchmaking", "table", "scoring", "ledger"}
