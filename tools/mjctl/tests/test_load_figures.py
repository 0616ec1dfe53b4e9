"""`mjctl.load`'s per-kind Act figures (what `make bench-system` prints under each run's table),
and the environment its bot processes start with."""

from __future__ import annotations

import os
import queue
import subprocess
import sys

import pytest
from mjctl.load import _collect, act_by_kind, act_kind_lines


def test_act_by_kind_counts_each_kind_with_its_percentiles_and_all_last() -> None:
    samples = [("discard", 0.010 * n, 0.010 * n + 0.1) for n in range(1, 101)]
    samples += [("exchange_three refused", 0.2, 0.3), ("exchange_three refused", 0.4, 0.5)]
    table = act_by_kind(samples)
    assert list(table) == ["discard", "exchange_three refused", "all"]  # most frequent first
    assert table["discard"]["count"] == 100
    assert table["discard"]["p50_ms"] == pytest.approx(505.0)  # median of 10..1000 ms
    assert table["discard"]["p99_ms"] == pytest.approx(1000.0)
    assert table["discard"]["read_p99_ms"] == pytest.approx(1100.0)
    assert table["exchange_three refused"]["p50_ms"] == pytest.approx(300.0)
    assert table["all"]["count"] == 102
    lines = act_kind_lines(table)
    assert lines[2] == "| discard | 100 | 505.0 | 1000.0 | 605.0 / 1100.0 |"
    assert lines[-1].startswith("| all | 102 |")


def test_act_by_kind_of_no_samples_is_an_empty_all_row() -> None:
    assert act_by_kind([]) == {
        "all": {"count": 0, "p50_ms": 0.0, "p99_ms": 0.0, "read_p50_ms": 0.0, "read_p99_ms": 0.0}
    }


def test_collect_stops_at_the_first_failed_process_instead_of_waiting_for_the_others() -> None:
    # The bots of every process share matchmaking's queue: once one process stops, another's
    # players may wait for a fourth player forever (a bench run hung so). The run stops instead.
    messages: queue.Queue[tuple[object, ...]] = queue.Queue()
    messages.put(("line", "table t1 ended"))
    messages.put(("error", "BelowEntryFloorError('bot-7')"))
    messages.put(("report", {"games": 3}))  # read only after the error: the run has stopped
    reports, errors = _collect(messages, workers=2, probe=None)
    assert errors == ["BelowEntryFloorError('bot-7')"]
    assert reports == []
    assert messages.qsize() == 1


def test_bot_processes_start_with_the_bots_grpc_experiments(monkeypatch: pytest.MonkeyPatch) -> None:
    from mjctl import load

    monkeypatch.delenv("GRPC_EXPERIMENTS", raising=False)
    with load.bot_process_environment():  # a process started here (spawned, as the bots are) sees it
        seen = subprocess.run(
            [sys.executable, "-c", "import os; print(os.environ.get('GRPC_EXPERIMENTS'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    assert seen == load.BOT_GRPC_EXPERIMENTS == "-event_engine_client"
    assert "GRPC_EXPERIMENTS" not in os.environ  # this process's environment is restored


def test_grpc_experiments_set_by_the_user_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from mjctl import load

    monkeypatch.setenv("GRPC_EXPERIMENTS", "tcp_rcv_lowat")
    with load.bot_process_environment():
        assert os.environ["GRPC_EXPERIMENTS"] == "tcp_rcv_lowat"
    assert os.environ["GRPC_EXPERIMENTS"] == "tcp_rcv_lowat"


def test_the_bots_command_line_does_not_import_the_bots() -> None:
    """The parent of ``mjctl bots --processes`` parses its options without importing the bots
    (gRPC and the stubs, 0.4 s of CPU counted as the bots'): the bot processes import them."""
    code = (
        "import sys; from mjctl.__main__ import build_parser; build_parser('bots'); "
        "print('mjctl.bots' in sys.modules, 'grpc' in sys.modules)"
    )
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert imported.stdout.split() == ["False", "False"]
