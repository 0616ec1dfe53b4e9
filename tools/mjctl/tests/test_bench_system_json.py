"""`bench_system --json` writes each run's figures as its table prints them (`run_summary`, computed
once for both), so `mjctl.bench_pair` reads the same numbers a reader sees in the table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mjctl import bench_system

FIGURES: dict[str, Any] = {
    "games": 128,
    "tables": 32,
    "processes": 2,
    "think_ms": 0,
    "hold_idle_updates_ms": 250,
    "act_p50_ms": 43.21,
    "act_p99_ms": 122.46,
    "act_calls": 40000,
    "delivery_p99_ms": 88.88,
    "decision_delivery_p99_ms": 77.7,
    "act_by_kind": {
        "discard": {"count": 3, "p50_ms": 1.0, "p99_ms": 2.0, "read_p50_ms": 1.5, "read_p99_ms": 2.5},
    },
    "enqueue_refused": 13,
    "play_opens": 600,
    "play_responses": 90000,
    "play_riding_answers": 20000,
    "client_cpu_seconds": 8.04,
    "lag_p50_ms": 120.4,
    "lag_p90_ms": 250.6,
    "lag_p99_ms": 317.2,
    "lag_max_ms": 799.9,
    "unsettled": 1,
    "games_settled_per_second": 6.0912,
    "lag_hops": {
        "table": {"p50_ms": 50.1, "p99_ms": 120.2},
        "scoring": {"p50_ms": 40.0, "p99_ms": 100.0},
        "ledger": {"p50_ms": 30.0, "p99_ms": 90.0},
        "slowest": {"table": 300.0, "scoring": 400.0, "ledger": 99.9},
    },
    "server_cpu_seconds": {
        "ledger": 2.9,
        "scoring": 3.1,
        "table": 15.0,
        "matchmaking": 3.3,
        "kafka broker": 3.9,
    },
    "load_average": (2.7, 3.1, 3.71),
    "engine_games_per_second": 180.5,
    "traffic": {
        "ledger": {
            "calls": 512.0,
            "records produced": 1548.8,
            "relay rounds": 256.0,
            "records consumed": 1548.8,
            "consumer batches": 300.0,
        },
        "table": {
            "calls": 512.0,
            "records produced": 16499.2,
            "relay rounds": 1280.0,
            "records consumed": 640.0,
            "consumer batches": 100.0,
        },
    },
}


def _printed_rows(summary: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    bench_system._print_run(summary, "sqlite")
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 2:
            rows[cells[0]] = cells[1]
    return rows


def test_the_json_holds_each_run_keyed_by_kind_and_reads_back_unchanged(tmp_path: Path) -> None:
    summaries = {"saturation": bench_system.run_summary(FIGURES), "think": bench_system.run_summary(FIGURES)}
    path = tmp_path / "runs.json"
    bench_system.write_json(path, summaries)
    assert json.loads(path.read_text()) == summaries


def test_the_json_says_what_the_table_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.json"
    bench_system.write_json(path, {"saturation": bench_system.run_summary(FIGURES)})
    run = json.loads(path.read_text())["saturation"]
    rows = _printed_rows(run, capsys)
    assert rows["games settled / s"] == f"{run['games_settled_per_second']:.2f} (128 games, 1 unsettled)"
    assert rows["Act p50 / p99"] == f"{run['act_p50_ms']:.1f} ms / {run['act_p99_ms']:.1f} ms"
    assert rows["WatchView delivery p99"] == f"{run['delivery_p99_ms']:.1f} ms"
    lag = " / ".join(f"{run[f'lag_{name}_ms']:.0f}" for name in ("p50", "p90", "p99", "max"))
    assert rows["settlement lag p50 / p90 / p99 / max"] == lag + " ms"
    hops = rows["settlement lag by hop, p50 / p99: table; scoring; ledger"]
    assert hops == "50 / 120; 40 / 100; 30 / 90 ms"
    assert rows["Enqueue refused / game (seat not freed yet)"] == f"{run['enqueue_refused_per_game']:.2f}"
    assert rows["Play streams opened / game; responses / command (answers riding)"] == (
        f"{run['play_opens_per_game']:.2f}; {run['responses_per_command']:.2f} "
        f"({run['riding_answers_per_command']:.2f})"
    )
    cpu = run["cpu_seconds_per_game"]
    for name in FIGURES["server_cpu_seconds"]:
        assert rows[f"CPU s / game: {name}"] == f"{cpu[name]:.3f}"
    assert rows["CPU s / game: bots (2 processes)"] == f"{cpu['bots']:.3f}"
    assert rows["CPU s / game: everything (services, broker, bots)"] == f"{cpu['everything']:.3f}"
    assert rows["pure engine (same run)"] == f"{run['engine_games_per_second']:.1f} games/s"
    assert rows["full system / pure engine"] == f"{run['full_over_engine']:.4f}"
    assert rows["load average (1/5/15 min)"] == "2.70 3.10 3.71"


def test_the_figures_per_game_are_the_runs_totals_divided_once() -> None:
    run = bench_system.run_summary(FIGURES)
    cpu = run["cpu_seconds_per_game"]
    assert list(cpu) == ["ledger", "scoring", "table", "matchmaking", "kafka broker", "bots", "everything"]
    assert cpu["table"] == 15.0 / 128
    assert cpu["bots"] == 8.04 / 128
    assert cpu["everything"] == pytest.approx((2.9 + 3.1 + 15.0 + 3.3 + 3.9 + 8.04) / 128)
    assert run["full_over_engine"] == 6.0912 / 180.5
    assert run["responses_per_command"] == 90000 / 40000
    assert run["load_average"] == [2.7, 3.1, 3.71]


def test_each_services_traffic_is_printed_and_kept_a_game(capsys: pytest.CaptureFixture[str]) -> None:
    run = bench_system.run_summary(FIGURES)
    assert run["traffic_per_game"]["table"] == {
        "calls": 4.0,
        "records produced": pytest.approx(128.9),
        "relay rounds": 10.0,
        "records consumed": 5.0,
        "consumer batches": 100.0 / 128,
    }
    rows = _printed_rows(run, capsys)
    row = "{} / game: calls; records out (relay rounds), in; consumer batches"
    assert rows[row.format("table")] == "4.0; 128.9 (10.0), 5.0; 0.8"
    assert rows[row.format("ledger")] == "4.0; 12.1 (2.0), 12.1; 2.3"


def test_a_run_kept_before_the_relay_rounds_counter_prints_none(capsys: pytest.CaptureFixture[str]) -> None:
    run = bench_system.run_summary(FIGURES)
    del run["traffic_per_game"]["table"]["relay rounds"]
    rows = _printed_rows(run, capsys)
    assert (
        rows["table / game: calls; records out (relay rounds), in; consumer batches"]
        == "4.0; 128.9 (–), 5.0; 0.8"
    )


METRICS = """# HELP mahjong_grpc_server_handled_total gRPC calls finished, by method and status code.
# TYPE mahjong_grpc_server_handled_total counter
mahjong_grpc_server_handled_total{code="OK",method="/mahjong.v1.TableService/Play"} 8.0
mahjong_grpc_server_handled_total{code="CANCELLED",method="/mahjong.v1.TableService/Play"} 2.0
mahjong_grpc_server_handled_total{code="OK",method="/grpc.health.v1.Health/Check"} 5.0
# HELP mahjong_outbox_published_total Outbox messages the relay published to Kafka and marked sent.
# TYPE mahjong_outbox_published_total counter
mahjong_outbox_published_total 258.0
# HELP mahjong_outbox_rounds_total Relay rounds that sent outbox messages to Kafka.
# TYPE mahjong_outbox_rounds_total counter
mahjong_outbox_rounds_total 12.0
# HELP mahjong_consumer_events_total Events a tracked consumer handled.
# TYPE mahjong_consumer_events_total counter
mahjong_consumer_events_total{consumer_group="table-openings",outcome="applied"} 9.0
mahjong_consumer_events_total{consumer_group="table-openings",outcome="duplicate"} 1.0
# HELP mahjong_consumer_batches_total Poll batches a tracked consumer applied events in.
# TYPE mahjong_consumer_batches_total counter
mahjong_consumer_batches_total{consumer_group="table-openings"} 4.0
# HELP mahjong_events_appended_total Events appended.
# TYPE mahjong_events_appended_total counter
mahjong_events_appended_total{event_type="TileDrawn"} 100.0
"""


def test_the_traffic_counters_are_summed_over_their_labels_health_checks_apart() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    counts = bench_system.traffic_counts(text_string_to_metric_families(METRICS))
    assert counts == {
        "calls": 10.0,
        "records produced": 258.0,
        "relay rounds": 12.0,
        "records consumed": 10.0,
        "consumer batches": 4.0,
    }
