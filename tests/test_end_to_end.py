"""End to end on the real broker and PostgreSQL (issues 4 and 5): four new players get their
starting beans, find a table through matchmaking and play a full game through the table engine;
the table's stream on Kafka equals its event store, event for event; scoring settles the game and
the ledger posts it: the books balance and reconcile."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from kafka import KafkaConsumer, TopicPartition
from mahjong.v1 import ledger_service_pb2, ledger_service_pb2_grpc
from mahjong_ledger.app import LedgerProcess
from mahjong_ledger.settings import load_ledger_settings
from mahjong_matchmaking.__main__ import DEFINITION as MATCHMAKING
from mahjong_platform.auth import mint_token
from mahjong_platform.config import Settings, load_settings
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.envelopes import parse_envelope
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_client import open_channel
from mahjong_platform.service_runtime import start_service
from mahjong_scoring.__main__ import DEFINITION as SCORING
from mahjong_table.__main__ import definition as table_definition
from mjctl.bots import run_bots
from mjctl.summary import wait_for_settlement

pytestmark = pytest.mark.integration
SECRET = "end-to-end-secret-0123456789abcdef0123"


@pytest.fixture
def settings(
    kafka_bootstrap_servers: str, unique_prefix: str, postgres_database_factory: Callable[[str], str]
) -> Settings:
    return load_settings(
        {
            "MAHJONG_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap_servers,
            "MAHJONG_TOPIC_PREFIX": unique_prefix,
            "MAHJONG_TOPIC_PARTITIONS": "3",
            "MAHJONG_JWT_SECRET": SECRET,
            "MAHJONG_TABLE_DATABASE_URL": postgres_database_factory("table"),
            "MAHJONG_MATCHMAKING_DATABASE_URL": postgres_database_factory("matchmaking"),
            "MAHJONG_SCORING_DATABASE_URL": postgres_database_factory("scoring"),
            "MAHJONG_LEDGER_DATABASE_URL": postgres_database_factory("ledger"),
        }
    )


@pytest.fixture
def services(settings: Settings) -> Iterator[dict[str, int]]:
    """Every service on a free port (the ledger runs as its own process object); yields the ports."""
    running = {"scoring": start_service(SCORING, settings, address="127.0.0.1:0")}
    # The ledger's Reconcile asks scoring for its instructions: point it at scoring's free port.
    ledger_settings = dataclasses.replace(
        settings, grpc_targets={**settings.grpc_targets, "scoring": f"127.0.0.1:{running['scoring'].port}"}
    )
    ledger = LedgerProcess(ledger_settings, load_ledger_settings({})).start(address="127.0.0.1:0")
    assert ledger.server is not None
    running["table"] = start_service(table_definition(settings), settings, address="127.0.0.1:0")
    # Matchmaking dials the ledger for balances: point it at the ledger's free port.
    matchmaking_settings = dataclasses.replace(
        settings, grpc_targets={**settings.grpc_targets, "ledger": f"127.0.0.1:{ledger.server.port}"}
    )
    running["matchmaking"] = start_service(MATCHMAKING, matchmaking_settings, address="127.0.0.1:0")
    ports = {name: service.port for name, service in running.items()} | {"ledger": ledger.server.port}
    yield ports
    for service in running.values():
        service.stop(0)
    ledger.stop()


def table_topic_events(settings: Settings, table_id: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=list(settings.kafka_bootstrap_servers), enable_auto_commit=False, group_id=None
    )
    topic = settings.topic_prefix + "mahjong.table.v1"
    partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    found: list[bytes] = []
    for _ in range(100):
        for records in consumer.poll(timeout_ms=500).values():
            found.extend(record.value for record in records if record.key.decode() == table_id)
        if len(found) >= expected:
            break
    consumer.close()
    return found


def test_four_bots_play_a_full_game_and_kafka_carries_the_event_store(
    settings: Settings, services: dict[str, int]
) -> None:
    ports = services

    def channel_for(service: str, player_id: str) -> grpc.Channel:
        return open_channel(f"127.0.0.1:{ports[service]}", mint_token(SECRET, player_id))

    report = run_bots("sichuan-novice", 4, 1, channel_for, log=lambda _line: None)
    assert len(report.table_ids) == 1
    table_id = report.table_ids[0]
    database = create_engine_for(settings.database_url("table"))
    with transaction(create_session_factory(database)) as session:
        stored = EventStore().load(session, table_id)
    database.dispose()
    assert stored[-1].WhichOneof("payload") == "game_ended"
    on_kafka = [parse_envelope(value) for value in table_topic_events(settings, table_id, len(stored))]
    # The relay may re-send after a crash; consumers dedupe by event id, and so does this check.
    unique = list({envelope.event_id: envelope for envelope in on_kafka}.values())
    assert [e.SerializeToString() for e in unique] == [e.SerializeToString() for e in stored]

    ledger = ledger_service_pb2_grpc.LedgerServiceStub(
        open_channel(f"127.0.0.1:{ports['ledger']}", mint_token(SECRET, "finance-desk", ["finance"]))
    )
    statement = wait_for_rake(ledger, table_id)
    net = {posting.account: posting.beans for posting in statement.net}
    assert sum(net.values()) == 0, describe(statement)  # every transfer of the game is double entry
    balances = balances_after(ledger, statement)
    assert all(balance >= 0 for balance in balances.values()), describe(statement)
    # Every player started with the grant; what they hold now is the grant plus the game's net.
    assert sum(balances.values()) == 4 * 100_000 + sum(
        v for k, v in net.items() if k.startswith("player:")
    ), describe(statement)
    collected = check_rake(statement, balances, rake_beans=50)  # sichuan-novice: A = 50 (RULES.md 1.9)
    assert net["house:rake"] == collected, describe(statement)
    reconciled = ledger.Reconcile(ledger_service_pb2.ReconcileRequest())
    assert reconciled.ok, reconciled.findings
    assert reconciled.accounts_sum_beans == 0
    assert reconciled.scoring_checked and reconciled.instructions_checked > 0  # postings = scoring
    assert {rake.room_id for rake in reconciled.rake} == {"sichuan-novice"}  # per UTC day of posting
    assert sum(rake.rake_beans for rake in reconciled.rake) == collected


def wait_for_rake(
    ledger: ledger_service_pb2_grpc.LedgerServiceStub, table_id: str
) -> ledger_service_pb2.GetGameStatementResponse:
    """The game's statement once its four rake transfers (the last lines of a game) are posted."""
    statement = wait_for_settlement(ledger, table_id, seats=4, timeout_seconds=120)
    assert statement is not None, "the ledger did not post the game's rake in 120 s"
    assert sum(transfer.reason == "rake" for transfer in statement.transfers) == 4
    return statement


def balances_after(
    ledger: ledger_service_pb2_grpc.LedgerServiceStub, statement: ledger_service_pb2.GetGameStatementResponse
) -> dict[str, int]:
    """The balance now of every player the game's statement names."""
    players = {
        posting.account
        for transfer in statement.transfers
        for posting in transfer.postings
        if posting.account.startswith("player:")
    }
    return {
        account: ledger.GetBalance(ledger_service_pb2.GetBalanceRequest(account=account)).balance_beans
        for account in sorted(players)
    }


def check_rake(
    statement: ledger_service_pb2.GetGameStatementResponse, balances: dict[str, int], rake_beans: int
) -> int:
    """RULES.md 1.9: after the game every seated player pays the rake A to the house, capped by
    balance. Each rake transfer asked for A; it posted A, or less only when that emptied its payer
    (the rake is a game's last lines and each player here plays one game, so `balances`, read
    after the game, are the balances after the rake). Returns the rake the house collected."""
    rakes = [transfer for transfer in statement.transfers if transfer.reason == "rake"]
    assert len(rakes) == 4, describe(statement)
    paid_in_full = set()
    for transfer in rakes:
        assert transfer.requested_beans == rake_beans, describe(statement)
        assert 0 <= transfer.posted_beans <= rake_beans, describe(statement)
        # A transfer that moved nothing has no postings (its payer had 0 beans), so no payer here.
        payers = [posting.account for posting in transfer.postings if posting.beans < 0]
        if transfer.posted_beans == rake_beans:
            paid_in_full.update(payers)
        else:
            assert all(balances[payer] == 0 for payer in payers), describe(statement)
    unpaid = [player for player in balances if player not in paid_in_full]
    assert len(paid_in_full) + len(unpaid) == 4, describe(statement)
    assert all(balances[player] == 0 for player in unpaid), describe(statement)
    return sum(transfer.posted_beans for transfer in rakes)


def describe(statement: ledger_service_pb2.GetGameStatementResponse) -> str:
    """A game's statement, a line per transfer, for a failing assertion's message."""
    lines = [f"statement of {statement.table_id}:"]
    for transfer in statement.transfers:
        postings = ", ".join(f"{posting.account} {posting.beans:+d}" for posting in transfer.postings)
        amounts = f"requested {transfer.requested_beans}, posted {transfer.posted_beans}"
        lines.append(f"  {transfer.reason}: {amounts}: {postings}")
    lines.append("  net: " + ", ".join(f"{posting.account} {posting.beans:+d}" for posting in statement.net))
    return "\n".join(lines)


@pytest.mark.parametrize("lag_source", ["ledger topic", "ledger polls"])
def test_bots_spread_over_processes_with_think_time_report_their_figures(
    services: dict[str, int], settings: Settings, tmp_path: pathlib.Path, lag_source: str
) -> None:
    """`mjctl bots --processes 2 --think-ms N --json` (what `make bench-system` runs): one game
    played by bots in two processes, its Act and WatchView delivery latencies and its settlement
    lag measured, the client's CPU reported. The lag is read from the ledger topic after the run
    when the bots reach Kafka (as `make bench-system`'s do), with its hops from the seats and
    settlement topics, else by polling the ledger (bots that reach only the services' gRPC ports,
    as here without the broker's address)."""
    output = tmp_path / "bots.json"
    environment = {
        **os.environ,
        "MAHJONG_JWT_SECRET": SECRET,
        **{f"MAHJONG_{name.upper()}_GRPC_TARGET": f"127.0.0.1:{port}" for name, port in services.items()},
    }
    if lag_source == "ledger topic":
        environment["MAHJONG_KAFKA_BOOTSTRAP_SERVERS"] = ",".join(settings.kafka_bootstrap_servers)
        environment["MAHJONG_TOPIC_PREFIX"] = settings.topic_prefix
    else:
        environment["MAHJONG_KAFKA_BOOTSTRAP_SERVERS"] = "127.0.0.1:9"  # nothing listens there
    command = [sys.executable, "-m", "mjctl", "bots", "--players", "4", "--games", "1", "--processes", "2"]
    command += ["--think-ms", "5", "--settlement-lag", "--json", str(output)]
    finished = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    figures = json.loads(output.read_text())
    assert figures["games"] == 1 and figures["processes"] == 2 and figures["unsettled"] == 0
    assert figures["lag_source"] == lag_source
    assert figures["act_calls"] > 0 and figures["delivery_p99_ms"] > 0 and figures["lag_p99_ms"] > 0
    if lag_source == "ledger topic":  # the lag by hop, read from the seats and settlement topics too
        hops = figures["lag_hops"]
        assert list(hops) == ["table", "scoring", "ledger", "slowest"]
        assert sum(hops["slowest"].values()) == pytest.approx(figures["lag_max_ms"], abs=1)
    else:
        assert figures["lag_hops"] == {}
    assert figures["client_cpu_seconds"] > 0
    kinds = figures["act_by_kind"]  # every answered command counted once, under its kind
    assert kinds["all"]["count"] == figures["act_calls"]
    assert sum(row["count"] for kind, row in kinds.items() if kind != "all") == figures["act_calls"]
    assert kinds["exchange_three"]["count"] >= 4 and kinds["declare_missing_suit"]["count"] >= 4
    assert kinds["discard"]["count"] > 0


def test_bots_on_one_event_loop_play_a_game_on_play_streams_and_it_settles(
    services: dict[str, int],
) -> None:
    """`bots.run_bots_async` (what `mjctl bots --processes` runs in each process): four bots on one
    event loop and one grpc.aio channel per service play their table on Play streams; every
    command is answered, the game ends and the ledger posts it."""
    import asyncio

    import grpc.aio
    from mjctl.bots import run_bots_async

    async def run() -> Any:
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{services['matchmaking']}") as matchmaking,
            grpc.aio.insecure_channel(f"127.0.0.1:{services['table']}") as table,
        ):
            return await run_bots_async(
                "sichuan-novice",
                4,
                1,
                matchmaking,
                table,
                lambda player: mint_token(SECRET, player),
                log=lambda _line: None,
            )

    report = asyncio.run(run())
    assert len(report.table_ids) == 1 and len(report.games) == 1
    assert "ended" in report.games[0]
    assert len(report.act_latencies_seconds) > 20  # one per answered command
    assert len(report.act_samples) == len(report.act_latencies_seconds)
    assert {"exchange_three", "declare_missing_suit", "discard"} <= {s.kind for s in report.act_samples}
    assert all(0 < s.arrived_seconds <= s.read_seconds for s in report.act_samples)
    ledger = ledger_service_pb2_grpc.LedgerServiceStub(
        open_channel(f"127.0.0.1:{services['ledger']}", mint_token(SECRET, "finance-desk", ["finance"]))
    )
    statement = wait_for_rake(ledger, report.table_ids[0])
    assert sum(posting.beans for posting in statement.net) == 0


def test_every_service_process_serves_the_dead_letter_service_for_its_own_consumer_groups(
    services: dict[str, int],
) -> None:
    """Issue 14: a dead letter is re-driven by the service that runs its consumer group, on the
    thread-pool servers and on the table engine's asyncio server alike; ops only."""
    from mahjong.v1 import dead_letter_service_pb2, dead_letter_service_pb2_grpc

    groups = {
        "matchmaking": ["matchmaking-seats"],
        "table": ["table-openings"],
        "scoring": ["scoring-settlement"],
        "ledger": ["mahjong-ledger"],
    }
    ops = mint_token(SECRET, "operator", ["ops"])
    player = mint_token(SECRET, "alice", [])
    for service, port in services.items():
        with open_channel(f"127.0.0.1:{port}", lambda: ops) as channel:
            stub = dead_letter_service_pb2_grpc.DeadLetterServiceStub(channel)
            answer = stub.ListRedrives(dead_letter_service_pb2.ListRedrivesRequest(), timeout=30)
            assert list(answer.consumer_groups) == groups[service] and not answer.redrives, service
            with pytest.raises(grpc.RpcError) as absent:
                request = dead_letter_service_pb2.RedriveDeadLetterRequest(entry_id="0:424242")
                stub.RedriveDeadLetter(request, timeout=60)
            assert absent.value.code() == grpc.StatusCode.NOT_FOUND, service
        with open_channel(f"127.0.0.1:{port}", lambda: player) as channel:
            stub = dead_letter_service_pb2_grpc.DeadLetterServiceStub(channel)
            with pytest.raises(grpc.RpcError) as denied:
                stub.ListRedrives(dead_letter_service_pb2.ListRedrivesRequest(), timeout=30)
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED, service
