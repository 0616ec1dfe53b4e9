"""``mjctl rebuild`` on the real broker and PostgreSQL: games go table topic → live scoring (tracked
consumer + outbox relay) → settlement topic → live ledger (with starting grants, relayed to the ledger
topic); the rebuilt projections equal the live ones, and a tampered live row is named."""

from __future__ import annotations

import datetime
from collections.abc import Callable

import pytest
import sqlalchemy
from mahjong_ledger.app import CONSUMER_GROUP as LEDGER_GROUP
from mahjong_ledger.app import migrate as migrate_ledger
from mahjong_ledger.domain import DepositOrder
from mahjong_ledger.projection import SettlementProjection as LedgerProjection
from mahjong_ledger.repository import LedgerRepository
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.event_store import EventStore
from mahjong_platform.schema import stored_events
from mahjong_platform.service_runtime import migrate
from mahjong_platform.testing import poll_until_handled, produce_envelopes, relay_until_drained
from mahjong_platform.topics import Topics, ensure_topics
from mahjong_platform.tracked_consumer import TrackedConsumer
from mahjong_rules.room_rules import RoomRules
from mahjong_scoring.__main__ import DEFINITION as SCORING
from mahjong_scoring.projection import CONSUMER_GROUP as SCORING_GROUP
from mahjong_scoring.projection import SettlementProjection as ScoringProjection
from mahjong_table.testing import greedy_game_envelopes
from mjctl.__main__ import main
from sqlalchemy.engine import Engine

GAMES_START = datetime.datetime(2026, 3, 1, 12, tzinfo=datetime.UTC)
GRANT_TIME = datetime.datetime(2026, 2, 1, tzinfo=datetime.UTC)
PLAYERS = ("ann", "bo", "cy", "di")
GRANT_BEANS = 3_000
GAME_COUNT = 4
RULES = RoomRules(coefficient=100, rake_beans=50)


def stored_event_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(
            connection.execute(
                sqlalchemy.select(sqlalchemy.func.count()).select_from(stored_events)
            ).scalar_one()
        )


@pytest.fixture
def live_system(
    kafka_bootstrap_servers: str,
    unique_prefix: str,
    postgres_database_factory: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[str, str]:
    """Live scoring and ledger databases (PostgreSQL) fed game by game through the real broker."""
    topics = Topics.with_prefix(unique_prefix)
    ensure_topics(kafka_bootstrap_servers, topics.all_names(), partitions=3)
    scoring_url, ledger_url = postgres_database_factory("scoring"), postgres_database_factory("ledger")
    migrate(SCORING, scoring_url)
    migrate_ledger(ledger_url)
    scoring_engine, ledger_engine = create_engine_for(scoring_url), create_engine_for(ledger_url)
    # Deposits arrive one by one over gRPC, each at its own time (the rebuild orders by that time).
    grant_times = (GRANT_TIME + datetime.timedelta(seconds=index) for index in range(1_000))
    repository = LedgerRepository(EventStore(topics), clock=lambda: next(grant_times))
    try:
        with transaction(create_session_factory(ledger_engine)) as session:
            for player in PLAYERS:
                repository.ensure_starting_grant(session, f"player:{player}", GRANT_BEANS)
            # A finance top-up with its own note: the note travels in TransferPosted and is compared.
            top_up = DepositOrder(f"player:{PLAYERS[0]}", 500, "top-up-1", memo="finance top-up, ticket 42")
            repository.deposit(session, top_up)
        relay_until_drained(ledger_engine, kafka_bootstrap_servers)
        with (
            TrackedConsumer(
                scoring_engine,
                kafka_bootstrap_servers,
                unique_prefix + SCORING_GROUP,
                [topics.table],
                ScoringProjection(EventStore(topics)),
                topics.dead_letter,
            ) as scoring,
            TrackedConsumer(
                ledger_engine,
                kafka_bootstrap_servers,
                unique_prefix + LEDGER_GROUP,
                [topics.settlement],
                LedgerProjection(repository).handle,
                topics.dead_letter,
            ) as ledger,
        ):
            for game in greedy_game_envelopes(
                GAME_COUNT, players=PLAYERS, rules=RULES, start=GAMES_START
            ):  # One game after the other, as they would be played.
                settled_before = stored_event_count(scoring_engine)
                produce_envelopes(kafka_bootstrap_servers, topics.table, game, client_id="rebuild-test")
                poll_until_handled(scoring, len(game))
                relay_until_drained(scoring_engine, kafka_bootstrap_servers)
                poll_until_handled(ledger, stored_event_count(scoring_engine) - settled_before)
                relay_until_drained(ledger_engine, kafka_bootstrap_servers)
    finally:
        scoring_engine.dispose()
        ledger_engine.dispose()
    monkeypatch.setenv("MAHJONG_KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap_servers)
    monkeypatch.setenv("MAHJONG_TOPIC_PREFIX", unique_prefix)
    monkeypatch.setenv("MAHJONG_SCORING_DATABASE_URL", scoring_url)
    monkeypatch.setenv("MAHJONG_LEDGER_DATABASE_URL", ledger_url)
    return scoring_url, ledger_url


def execute_sql(url: str, statement: str) -> None:
    engine = create_engine_for(url)
    try:
        with transaction(create_session_factory(engine)) as session:
            session.execute(sqlalchemy.text(statement))
    finally:
        engine.dispose()


@pytest.mark.integration
def test_rebuilt_scoring_and_ledger_equal_live_and_a_tampered_row_is_named(
    live_system: tuple[str, str],
    unique_prefix: str,
    postgres_database_factory: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    scoring_url, ledger_url = live_system
    assert main(["rebuild", "scoring", "--live-group", unique_prefix + SCORING_GROUP]) == 0
    captured = capsys.readouterr()
    print(captured.out)  # the replay speed, for the record (pytest -s)
    assert "identical: the rebuilt scoring projection equals the live one" in captured.out
    assert "0 failed in the handler" in captured.out and "warning" not in captured.out
    assert "events/s" in captured.err  # the progress bar

    rebuilt_ledger = postgres_database_factory("rebuilt_ledger")
    assert (
        main(
            ["rebuild", "ledger", "--database", rebuilt_ledger, "--live-group", unique_prefix + LEDGER_GROUP]
        )
        == 0
    )
    captured = capsys.readouterr()
    print(captured.out)
    assert "identical: the rebuilt ledger projection equals the live one" in captured.out

    # The rebuild database must be empty: the one just filled is refused.
    assert main(["rebuild", "ledger", "--database", rebuilt_ledger]) == 2
    assert "not empty" in capsys.readouterr().err

    execute_sql(
        scoring_url, "UPDATE scoring_players SET beans = beans + 1 WHERE table_id = 'table-1' AND seat = 2"
    )
    assert main(["rebuild", "scoring", "--live-group", unique_prefix + SCORING_GROUP]) == 1
    output = capsys.readouterr().out
    assert "different: table scoring_players, key table_id='table-1', seat=2, column beans: live " in output

    execute_sql(
        ledger_url, "UPDATE ledger_accounts SET balance_beans = balance_beans + 5 WHERE account = 'player:bo'"
    )
    assert main(["rebuild", "ledger", "--live-group", unique_prefix + LEDGER_GROUP]) == 1
    output = capsys.readouterr().out
    assert "different: table ledger_accounts, key account='player:bo', column balance_beans" in output


def test_mjctl_rebuild_runs_the_services_own_admin_command_with_the_same_options() -> None:
    """Issue 14: mjctl runs `python -m mahjong_<service> rebuild`, imports no service code."""
    import argparse
    import sys

    from mjctl.rebuild import service_command

    arguments = argparse.Namespace(
        service="ledger", database="postgresql://x/y", keep=True, live_database=None, live_group="g"
    )
    assert service_command(arguments) == [
        sys.executable,
        "-m",
        "mahjong_ledger",
        "rebuild",
        "--database",
        "postgresql://x/y",
        "--live-group",
        "g",
        "--keep",
    ]


def test_mjctl_rebuild_of_a_service_not_installed_here_is_a_usage_error_not_a_difference(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *rest: None if name == "mahjong_ledger" else real_find_spec(name, *rest),
    )
    assert main(["rebuild", "ledger"]) == 2
    assert "not installed here" in capsys.readouterr().err


def test_a_rebuild_that_cannot_reach_a_database_or_the_broker_exits_2_not_1_which_means_different(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """README "Ops and finance": exit 1 is a difference found; a rebuild that could not run is 2,
    with its reason on stderr (before: a traceback and Python's exit code 1)."""
    assert main(["rebuild", "scoring", "--database", "not-a-url"]) == 2
    error = capsys.readouterr().err
    assert "could not run: ArgumentError" in error and "Traceback" not in error

    import kafka.errors
    import mahjong_platform.rebuild
    from mahjong_scoring.rebuild import main as scoring_rebuild

    def no_broker(*arguments: object) -> None:
        raise kafka.errors.KafkaTimeoutError("Unable to bootstrap from ['127.0.0.1:1']")

    monkeypatch.setattr(mahjong_platform.rebuild, "read_topics", no_broker)
    assert scoring_rebuild([]) == 2
    assert "could not run: KafkaTimeoutError" in capsys.readouterr().err


def test_mjctl_rebuild_whose_command_is_killed_by_a_signal_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    import mjctl.rebuild

    monkeypatch.setattr(
        mjctl.rebuild,
        "service_command",
        lambda arguments: [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
    )
    assert main(["rebuild", "ledger"]) == 2
    assert "killed by signal 9" in capsys.readouterr().err
