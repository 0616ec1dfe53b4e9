"""How long ``mjctl replay --table ID`` takes, process start to exit, with hundreds of games
stored: it reads one game (TableService.Watch by table id, GetGameSettlement), not the history.

    .venv/bin/pytest tools/mjctl/tests/test_replay_benchmark.py -m benchmark -s

Prints the figure; asserts nothing about time (the box is shared)."""

from __future__ import annotations

import os
import pathlib
import statistics
import subprocess
import sys
import time

import pytest
from mahjong_platform.config import load_settings
from mahjong_platform.service_runtime import start_service
from mahjong_scoring.__main__ import DEFINITION as SCORING
from mahjong_table.__main__ import definition as table_definition
from mjctl.replay import _ops_token, read_from_services, read_settlement_from_services

from .test_replay import played_game, serving_only, stores

pytestmark = [pytest.mark.benchmark, pytest.mark.integration]
GAMES = 300
RUNS = 7


def test_replay_of_one_game_among_hundreds_through_the_services(
    kafka_bootstrap_servers: str, unique_prefix: str, tmp_path: pathlib.Path
) -> None:
    games = [played_game(f"table-{index}", index) for index in range(GAMES)]
    table_url, scoring_url = stores(tmp_path, games)
    environment = os.environ | {
        "MAHJONG_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap_servers,
        "MAHJONG_TOPIC_PREFIX": unique_prefix,
        "MAHJONG_JWT_SECRET": "replay-bench-secret-0123456789abcdef01234",
        "MAHJONG_TABLE_DATABASE_URL": table_url,
        "MAHJONG_SCORING_DATABASE_URL": scoring_url,
    }
    settings = load_settings(environment)
    running = [
        start_service(serving_only(table_definition(settings)), settings, address="127.0.0.1:0"),
        start_service(serving_only(SCORING), settings, address="127.0.0.1:0"),
    ]
    environment["MAHJONG_TABLE_GRPC_TARGET"] = f"127.0.0.1:{running[0].port}"
    environment["MAHJONG_SCORING_GRPC_TARGET"] = f"127.0.0.1:{running[1].port}"
    mjctl = str(pathlib.Path(sys.executable).with_name("mjctl"))
    try:
        seconds = []
        for run in range(RUNS):
            table_id = f"table-{(run * 37) % GAMES}"
            started = time.perf_counter()
            finished = subprocess.run(
                [mjctl, "replay", "--table", table_id], env=environment, capture_output=True, check=True
            )
            seconds.append(time.perf_counter() - started)
            assert b"settled:" in finished.stdout
        # The reads alone, in this (warm) process: what the services answer for one game.
        token = _ops_token(settings.jwt_secret)
        read_seconds = []
        for run in range(RUNS):
            table_id = f"table-{(run * 53) % GAMES}"
            started = time.perf_counter()
            events = read_from_services(environment["MAHJONG_TABLE_GRPC_TARGET"], token, table_id)
            lines = read_settlement_from_services(environment["MAHJONG_SCORING_GRPC_TARGET"], token, table_id)
            read_seconds.append(time.perf_counter() - started)
            assert events and lines
        help_seconds = []
        for _ in range(RUNS):
            started = time.perf_counter()
            subprocess.run([mjctl, "--help"], env=environment, capture_output=True, check=True)
            help_seconds.append(time.perf_counter() - started)
    finally:
        for service in running:
            service.stop(0)
    load = os.getloadavg()[0]
    print(
        f"\nmjctl replay --table ID with {GAMES} games stored: median {statistics.median(seconds):.3f} s, "
        f"max {max(seconds):.3f} s over {RUNS} runs; mjctl --help median "
        f"{statistics.median(help_seconds):.3f} s; the two reads alone (warm process) median "
        f"{statistics.median(read_seconds) * 1000:.0f} ms; load average {load:.1f}"
    )
