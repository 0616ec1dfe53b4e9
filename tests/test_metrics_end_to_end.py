"""Metrics on the real servers (issue 13): four bots play a game through every service on the real
broker and PostgreSQL, then each service's /metrics endpoint is scraped over HTTP and the figures
the game must have moved have moved: Act calls, events appended, events applied by each consumer,
the outbox relayed, postings and beans, the settlement lag, and nothing dead-lettered."""

from __future__ import annotations

import dataclasses
import time
import urllib.request
from collections.abc import Callable, Iterator

import grpc
import pytest
from mahjong.v1 import ledger_service_pb2_grpc
from mahjong_ledger.app import LedgerProcess
from mahjong_ledger.settings import load_ledger_settings
from mahjong_matchmaking.__main__ import DEFINITION as MATCHMAKING
from mahjong_platform.auth import mint_token
from mahjong_platform.config import Settings, load_settings
from mahjong_platform.grpc_client import open_channel
from mahjong_platform.service_runtime import RunningService, start_service
from mahjong_scoring.__main__ import DEFINITION as SCORING
from mahjong_table.__main__ import definition as table_definition
from mjctl.bots import run_bots
from prometheus_client.parser import text_string_to_metric_families

from .test_end_to_end import balances_after, check_rake, wait_for_rake

pytestmark = pytest.mark.integration
SECRET = "metrics-end-to-end-secret-0123456789abcdef"
SCRAPE_PATIENCE_SECONDS = 120.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


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
def services(settings: Settings) -> Iterator[dict[str, RunningService]]:
    """Every service on free ports (gRPC and metrics)."""
    ledger = LedgerProcess(settings, load_ledger_settings({})).start(address="127.0.0.1:0")
    assert ledger.running is not None
    running = {
        "ledger": ledger.running,
        "scoring": start_service(SCORING, settings, address="127.0.0.1:0"),
        "table": start_service(table_definition(settings), settings, address="127.0.0.1:0"),
    }
    matchmaking_settings = dataclasses.replace(
        settings, grpc_targets={**settings.grpc_targets, "ledger": f"127.0.0.1:{ledger.running.port}"}
    )
    running["matchmaking"] = start_service(MATCHMAKING, matchmaking_settings, address="127.0.0.1:0")
    yield running
    for name, service in running.items():
        if name != "ledger":
            service.stop(0)
    ledger.stop()


def scrape(port: int) -> Samples:
    """Every sample of the endpoint, keyed by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(
        value
        for (sample, sample_labels), value in samples.items()
        if sample == name and wanted <= sample_labels
    )


def has(samples: Samples, name: str) -> bool:
    return any(sample == name for sample, _ in samples)


def scrape_until(port: int, settled: Callable[[Samples], bool]) -> Samples:
    """Scrape until ``settled`` holds (consumers and relays finish on their own time); the last scrape."""
    deadline = time.monotonic() + SCRAPE_PATIENCE_SECONDS
    samples = scrape(port)
    while not settled(samples) and time.monotonic() < deadline:
        time.sleep(0.2)
        samples = scrape(port)
    return samples


def test_a_played_game_moves_every_services_metrics(services: dict[str, RunningService]) -> None:
    ports = {name: service.port for name, service in services.items()}

    def channel_for(service: str, player_id: str) -> grpc.Channel:
        return open_channel(f"127.0.0.1:{ports[service]}", mint_token(SECRET, player_id))

    report = run_bots("sichuan-novice", 4, 1, channel_for, log=lambda _line: None)
    assert len(report.table_ids) == 1

    table = scrape_until(
        services["table"].metrics_port,
        lambda s: total(s, "mahjong_outbox_unsent_messages") == 0
        and total(s, "mahjong_outbox_published_total") > 0,
    )
    assert total(table, "mahjong_grpc_server_handled_total", method="TableService/Act", code="OK") > 0
    assert total(table, "mahjong_grpc_server_handling_seconds_count", method="TableService/Act") > 0
    assert total(table, "mahjong_events_appended_total", event_type="TableOpened") == 1
    # Each relay round sends at least one message: never more rounds than messages.
    assert 1 <= total(table, "mahjong_outbox_rounds_total") <= total(table, "mahjong_outbox_published_total")
    assert total(table, "mahjong_events_appended_total", event_type="GameEnded") == 1
    assert total(table, "mahjong_events_appended_total") > 50
    assert (
        total(table, "mahjong_consumer_events_total", consumer_group="table-openings", outcome="applied") >= 1
    )
    assert total(table, "mahjong_table_open_tables") == 0  # the game has ended
    assert total(table, "mahjong_grpc_server_open_streams") >= 0
    assert has(table, "mahjong_outbox_oldest_unsent_age_seconds")
    assert has(table, "mahjong_consumer_lag_messages")

    ledger = scrape_until(
        services["ledger"].metrics_port,
        lambda s: total(s, "mahjong_settlement_lag_seconds_count") >= 1
        and has(s, "mahjong_consumer_lag_messages")
        and total(s, "mahjong_consumer_lag_messages") == 0,
    )
    assert total(ledger, "mahjong_settlement_lag_seconds_count") == 1
    # The counters agree with the ledger's own statement of the game; its rake is RULES.md 1.9's
    # (A = 50 from each seated player, capped by balance: `check_rake`).
    finance = ledger_service_pb2_grpc.LedgerServiceStub(
        open_channel(f"127.0.0.1:{ports['ledger']}", mint_token(SECRET, "finance-desk", ["finance"]))
    )
    statement = wait_for_rake(finance, report.table_ids[0])
    rakes = [transfer for transfer in statement.transfers if transfer.reason == "rake"]
    rake_postings = sum(len(transfer.postings) for transfer in rakes)  # 8: 4 payers, 4 rake credits
    assert total(ledger, "mahjong_ledger_postings_total", reason="rake") == rake_postings
    collected = check_rake(statement, balances_after(finance, statement), rake_beans=50)
    assert total(ledger, "mahjong_ledger_beans_moved_total", reason="rake") == collected
    assert total(ledger, "mahjong_ledger_postings_total") > 8  # the starting grants, the game's payments
    assert (
        total(ledger, "mahjong_grpc_server_handled_total", method="LedgerService/GetBalance", code="OK") > 0
    )
    assert total(ledger, "mahjong_consumer_lag_messages") == 0

    scoring = scrape_until(
        services["scoring"].metrics_port,
        lambda s: total(s, "mahjong_events_appended_total", event_type="GameSettled") >= 1,
    )
    assert total(scoring, "mahjong_consumer_events_total", outcome="applied") > 50
    # Each batch is one transaction of at least one applied event.
    assert (
        1
        <= total(scoring, "mahjong_consumer_batches_total")
        <= total(scoring, "mahjong_consumer_events_total", outcome="applied")
    )
    assert total(scoring, "mahjong_events_appended_total", event_type="SettlementInstructed") > 0
    assert total(scoring, "mahjong_events_appended_total", event_type="GameSettled") == 1

    matchmaking = scrape(services["matchmaking"].metrics_port)
    assert (
        total(
            matchmaking, "mahjong_grpc_server_handled_total", method="MatchmakingService/Enqueue", code="OK"
        )
        >= 4
    )
    assert total(matchmaking, "mahjong_events_appended_total") > 0

    for samples in (table, ledger, scoring, matchmaking):
        assert total(samples, "mahjong_consumer_dead_letters_total") == 0
        assert total(samples, "mahjong_consumer_events_total", outcome="dead_lettered") == 0
