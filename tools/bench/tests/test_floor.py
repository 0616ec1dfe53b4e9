"""The stack floor benchmark (`python -m mahjong_bench.floor`): its arithmetic, and each
measurement run for real at a small size (gRPC and SQLite here; Kafka on the session's broker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mahjong_bench import floor
from mahjong_infra.kafka import KafkaBroker


def _floors() -> tuple[floor.GrpcFloor, floor.KafkaFloor, floor.SqliteFloor]:
    return (
        floor.GrpcFloor(
            commands=1_000,
            streams=8,
            responses_per_command=2.5,
            seconds=1.0,
            server_cpu_seconds=0.3,
            client_cpu_seconds=0.4,
        ),
        floor.KafkaFloor(
            records=2_000,
            relay_batch=20,
            seconds=2.0,
            producer_cpu_seconds=0.4,
            consumer_cpu_seconds=0.2,
            broker_cpu_seconds=0.6,
        ),
        floor.SqliteFloor(
            transactions=100, commands_per_batch=10.0, rows_per_transaction=45, cpu_seconds=0.2
        ),
    )


def test_the_floor_of_a_game_is_each_unit_times_its_count() -> None:
    counts = floor.GameCounts(
        commands=70.0, responses_per_command=2.5, records=130.0, commands_per_batch=10.0
    )
    per_game = floor.floor_per_game(counts, *_floors())
    assert per_game["grpc server"] == pytest.approx(70 * 0.3 / 1_000)
    assert per_game["grpc client"] == pytest.approx(70 * 0.4 / 1_000)
    assert per_game["kafka producer"] == pytest.approx(130 * 0.4 / 2_000)
    assert per_game["kafka consumer"] == pytest.approx(130 * 0.2 / 2_000)
    assert per_game["kafka broker"] == pytest.approx(130 * 0.6 / 2_000)
    assert per_game["sqlite"] == pytest.approx(7 * 0.2 / 100)  # 70 commands in batches of 10
    parts = [value for name, value in per_game.items() if name != "floor"]
    assert per_game["floor"] == pytest.approx(sum(parts))


def test_a_broker_not_measured_counts_nothing() -> None:
    grpc_floor, kafka_floor, sqlite_floor = _floors()
    remote = floor.KafkaFloor(**{**kafka_floor.__dict__, "broker_cpu_seconds": None})
    per_game = floor.floor_per_game(floor.GameCounts(), grpc_floor, remote, sqlite_floor)
    assert per_game["kafka broker"] == 0.0


def test_the_ratio_budget_is_forty_engines_on_two_cores() -> None:
    # 0.05 of the engine's games/s with 2 CPU s a second: 2 / cpu = 0.05 / engine_cpu.
    assert floor.ratio_budget(0.005) == pytest.approx(0.2)
    assert floor.ratio_budget(0.005, ratio=0.1, cores=4) == pytest.approx(0.2)


def test_each_process_is_set_against_the_floor_it_pays() -> None:
    per_game = floor.floor_per_game(floor.GameCounts(), *_floors())
    measured = {"table": 0.2, "bots": 0.09, "scoring": 0.04, "ledger": 0.03, "everything": 0.45}
    rows = floor.against_measured(per_game, measured)
    table_floor = per_game["grpc server"] + per_game["kafka producer"] + per_game["sqlite"]
    assert rows["table"] == pytest.approx({"measured": 0.2, "floor": table_floor, "above": 0.2 - table_floor})
    assert rows["bots"]["floor"] == pytest.approx(per_game["grpc client"])
    assert rows["scoring"]["floor"] == pytest.approx(per_game["kafka consumer"])
    assert rows["ledger"] == {"measured": 0.03, "floor": 0.0, "above": 0.03}
    assert rows["everything"]["floor"] == pytest.approx(per_game["floor"])
    assert "kafka broker" not in rows  # not in this run's figures


def test_the_report_prints_every_unit_and_the_share_of_the_budget(tmp_path: Path) -> None:
    figures = floor.report(floor.GameCounts(), *_floors(), engine_cpu_per_game=0.005, measured={"table": 0.2})
    text = floor.markdown(figures)
    for unit in ("gRPC server", "gRPC client", "Kafka producer", "Kafka consumer", "Kafka broker", "SQLite"):
        assert f"| {unit}" in text
    assert f"| floor ÷ budget | | | {figures['floor_share_of_budget']:.2f} |" in text
    assert "| table | 0.2000 |" in text
    json.dumps(figures)  # what --json writes


def test_grpc_measures_both_processes_cpu_per_command() -> None:
    result = floor.measure_grpc(commands=400, streams=4, responses_per_command=2.5)
    assert result.commands == 400
    assert result.server_cpu_seconds > 0 and result.client_cpu_seconds > 0
    assert result.seconds > 0


def test_sqlite_writes_group_commit_batches() -> None:
    result = floor.measure_sqlite(transactions=20, commands_per_batch=10.0, events_per_command=2.0)
    assert result.transactions == 20
    assert result.rows_per_transaction == 10 + 2 * 20  # answers, events and their outbox rows
    assert result.cpu_seconds > 0


@pytest.mark.integration
def test_kafka_measures_producer_consumer_and_broker(
    kafka_bootstrap_servers: str, kafka_broker: KafkaBroker, unique_prefix: str
) -> None:
    broker_pid = kafka_broker.running_pid()
    result = floor.measure_kafka(
        kafka_bootstrap_servers,
        broker_pid,
        records=400,
        relay_batch=20,
        records_per_second=2_000,
        topic_prefix=unique_prefix,
    )
    assert result.records == 400
    assert result.producer_cpu_seconds > 0 and result.consumer_cpu_seconds > 0
    assert broker_pid is not None and result.broker_cpu_seconds is not None
    assert result.broker_cpu_seconds > 0
