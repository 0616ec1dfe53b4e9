"""Two replicas of every service (the table engine too) on one PostgreSQL and the real Kafka
broker (README "Scale-out: replicas"): bots play while one replica of each is SIGKILLed in the
middle of the games (the supervisor of ``mjctl run`` starts it again); the table engine killed is
the owner of a table being played. Every game ends and is settled exactly once, no bot fails,
``mjctl reconcile`` passes, and ``mjctl rebuild`` of scoring and ledger is identical.

The bots' calls go to either replica (by player), so a table's four tickets arrive through both
matchmaking replicas (the room queue's row lock is the one writer of each queue) and half of a
table's players call the table engine that does not own it (their calls are forwarded). The
killed owner's partitions are taken over by the other table engine once the group notices it is
gone (the session timeout): it reloads their tables from the event store and fires their timers.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
import sqlalchemy
from mahjong_infra.kafka import free_port
from mahjong_platform.auth import mint_token
from mahjong_platform.config import (
    database_url_variable,
    grpc_address_variable,
    load_settings,
    metrics_address_variable,
)
from mahjong_platform.database import create_engine_for
from mahjong_platform.grpc_client import check_health, open_channel
from mahjong_table.models import table_partition_owners, table_status
from mahjong_table.ownership import partition_of
from mjctl.bots import run_bots
from mjctl.chaos import _environment, read_books, settle_and_check
from mjctl.run import REPLICATED_SERVICES, SERVICES, ServiceProcesses, replica_names, service_of

pytestmark = pytest.mark.integration

REPLICAS = 2
PLAYERS = 8
HEALTH_TIMEOUT_SECONDS = 120.0
KILL_DEADLINE_SECONDS = 120.0


@pytest.fixture
def replicated_system(
    tmp_path: Path,
    kafka_bootstrap_servers: str,
    unique_prefix: str,
    postgres_database_factory: Callable[[str], str],
) -> Iterator[tuple[dict[str, str], dict[str, str], ServiceProcesses]]:
    """Every service (two replicas of the replicated ones) as supervised processes; the
    environment, each process's gRPC address, and the supervisor."""
    env = _environment(tmp_path, kafka_bootstrap_servers)
    env["MAHJONG_TOPIC_PREFIX"] = unique_prefix
    for name in REPLICATED_SERVICES:
        env[database_url_variable(name)] = postgres_database_factory(name)  # type: ignore[arg-type]
    names = replica_names(list(SERVICES), REPLICAS)
    addresses = {name: env[grpc_address_variable(name)] for name in SERVICES}  # type: ignore[arg-type]
    own: dict[str, dict[str, str]] = {}
    for name in names:
        if name in SERVICES:
            own[name] = {metrics_address_variable(name): f"127.0.0.1:{free_port()}"}  # type: ignore[arg-type]
            continue
        service = service_of(name)
        addresses[name] = f"127.0.0.1:{free_port()}"
        own[name] = {
            grpc_address_variable(service): addresses[name],  # type: ignore[arg-type]
            metrics_address_variable(service): f"127.0.0.1:{free_port()}",  # type: ignore[arg-type]
        }
    logs = tmp_path / "logs"
    logs.mkdir()
    processes = ServiceProcesses(names, logs, echo=print, env=env, env_for=lambda name: own[name])
    processes.start()
    try:
        _wait_healthy(addresses)
        yield env, addresses, processes
    finally:
        processes.stop()


def _wait_healthy(addresses: dict[str, str]) -> None:
    deadline = time.monotonic() + HEALTH_TIMEOUT_SECONDS
    for name, target in addresses.items():
        while not check_health(target, timeout_seconds=1.0):
            assert time.monotonic() < deadline, f"{name} did not report SERVING at {target}"
            time.sleep(0.2)


def _owner_of_a_live_table(env: dict[str, str]) -> str | None:
    """The address of the table engine that owns a table being played now, as the owner directory
    names it (None when no table is being played)."""
    engine = create_engine_for(load_settings(env).database_url("table"))
    try:
        with engine.connect() as connection:
            owner = connection.execute(
                sqlalchemy.select(table_partition_owners.c.owner_address)
                .join(table_status, table_status.c.match_partition == table_partition_owners.c.partition)
                .where(table_status.c.ended.is_(False))
                .limit(1)
            ).scalar_one_or_none()
    finally:
        engine.dispose()
    return None if owner is None else str(owner)


def _kill_one_replica_of_each_mid_game(
    env: dict[str, str],
    addresses: dict[str, str],
    processes: ServiceProcesses,
    killed: list[str],
    stop: threading.Event,
) -> None:
    deadline = time.monotonic() + KILL_DEADLINE_SECONDS
    owner = None
    while not stop.is_set() and time.monotonic() < deadline:
        books = read_books(env)
        owner = _owner_of_a_live_table(env)
        if books.tables_opened > books.tables_ended and owner is not None:  # A game is being played.
            break
        time.sleep(0.3)
    else:
        return
    table_engine = next(name for name, address in addresses.items() if address == owner)
    for service in REPLICATED_SERVICES:
        name = table_engine if service == "table" else f"{service}-2"
        pid = processes.pid(name)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.append(name)
    # For the log reader (when the survivors took over: their "table partitions assigned" lines).
    print(f"replicas: SIGKILLed {', '.join(killed)} at {datetime.datetime.now(datetime.UTC).isoformat()}")


def test_replicas_of_every_service_survive_a_sigkill_mid_game_with_exact_books(
    replicated_system: tuple[dict[str, str], dict[str, str], ServiceProcesses],
) -> None:
    env, addresses, processes = replicated_system
    secret = env["MAHJONG_JWT_SECRET"]

    def channel_for(service: str, player_id: str) -> grpc.Channel:
        replica = zlib.crc32(player_id.encode()) % REPLICAS + 1
        name = service if replica == 1 or service not in REPLICATED_SERVICES else f"{service}-{replica}"
        token = mint_token(secret, player_id, ttl_seconds=3600, member=True)
        return open_channel(addresses[name], token)

    killed: list[str] = []
    stop = threading.Event()
    killer = threading.Thread(
        target=_kill_one_replica_of_each_mid_game, args=(env, addresses, processes, killed, stop)
    )
    killer.start()
    try:
        report = run_bots("sichuan-novice", PLAYERS, PLAYERS // 4, channel_for, log=lambda _line: None)
    finally:
        stop.set()
        killer.join()
    assert [service_of(name) for name in killed] == list(REPLICATED_SERVICES)
    assert len(report.games) == PLAYERS // 4  # and no bot failed: run_bots raises if one does
    _wait_healthy(addresses)  # The killed replicas are back (restarted by the supervisor).
    books, checks = settle_and_check(env, print)
    assert books.lost == [] and books.doubled == [] and books.unended == []
    assert books.tables_opened == books.tables_ended == books.settled_once == PLAYERS // 4
    assert checks == {"mjctl reconcile": "ok", "mjctl rebuild scoring": "ok", "mjctl rebuild ledger": "ok"}
    assert {name for name, count in processes.restarts.items() if count} == set(killed)
    # Every table was opened by the owner of the partition Kafka put its TableAssigned on.
    engine = create_engine_for(load_settings(env).database_url("table"))
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                sqlalchemy.select(table_status.c.table_id, table_status.c.match_partition)
            ).all()
    finally:
        engine.dispose()
    partitions = int(env["MAHJONG_TOPIC_PARTITIONS"])
    assert rows and all(row.match_partition == partition_of(row.table_id, partitions) for row in rows)
