"""``mjctl reconcile`` against the real ledger and scoring services: games played by the table
aggregate, settled by the scoring projection, posted by the ledger projection into SQLite
databases; both services serve them (the ledger as its process wires it, asking scoring's
ListSettlementInstructions), and the command prints the ledger's answer. Then a posting or a
scoring line is tampered with in the database and the command names the broken checks; a
scoring service that does not answer, or a caller without the finance role, is no pass."""

from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib
import shutil
from collections.abc import Iterator

import pytest
import sqlalchemy
from mahjong.v1 import envelope_pb2
from mahjong_ledger.app import definition as ledger_definition
from mahjong_ledger.app import migrate as migrate_ledger
from mahjong_ledger.models import ledger_postings
from mahjong_ledger.projection import SettlementProjection as LedgerProjection
from mahjong_ledger.repository import LedgerRepository
from mahjong_ledger.servicer import ERROR_MAPPING as LEDGER_ERRORS
from mahjong_ledger.servicer import METHOD_ROLES as LEDGER_ROLES
from mahjong_ledger.settings import LedgerSettings
from mahjong_platform.auth import AuthInterceptor, mint_token
from mahjong_platform.config import load_settings
from mahjong_platform.database import create_engine_for, create_session_factory, sqlite_url, transaction
from mahjong_platform.envelopes import parse_envelope
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_server import RunningServer, serve
from mahjong_platform.schema import stored_events
from mahjong_platform.service_runtime import migrate
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import MessagePosition
from mahjong_rules.room_rules import RoomRules
from mahjong_scoring.__main__ import DEFINITION as SCORING
from mahjong_scoring.models import scoring_lines
from mahjong_scoring.projection import SettlementProjection as ScoringProjection
from mahjong_scoring.servicer import METHOD_ROLES as SCORING_ROLES
from mahjong_scoring.servicer import registration as scoring_registration
from mahjong_table.testing import greedy_game_envelopes
from mjctl.__main__ import main

GAMES_START = datetime.datetime(2026, 3, 1, 12, tzinfo=datetime.UTC)
GRANT_TIME = datetime.datetime(2026, 2, 1, tzinfo=datetime.UTC)
PLAYERS = ("ann", "bo", "cy", "di")
RULES = RoomRules(coefficient=100, rake_beans=50)
GRANT_BEANS = 3_000
POSITION = MessagePosition("mahjong.table.v1", 0, 0)
SECRET = "reconcile-command-test-secret-0123456789abcdef"
FINANCE_TOKEN = mint_token(SECRET, "auditor", ["finance"], ttl_seconds=3_600)


def settle_and_post(scoring_url: str, ledger_url: str, games: list[list[envelope_pb2.Envelope]]) -> None:
    """Scoring's and the ledger's projections applied by hand (no Kafka), grants first."""
    migrate(SCORING, scoring_url)
    migrate_ledger(ledger_url)
    scoring_engine, ledger_engine = create_engine_for(scoring_url), create_engine_for(ledger_url)
    try:
        scoring_sessions = create_session_factory(scoring_engine)
        projection = ScoringProjection(EventStore(Topics()))
        for game in games:
            for envelope in game:
                with transaction(scoring_sessions) as session:
                    projection(session, envelope, POSITION)
        with transaction(scoring_sessions) as session:
            rows = session.execute(sqlalchemy.select(stored_events.c.envelope)).all()
        settlements = sorted(
            (parse_envelope(bytes(row.envelope)) for row in rows),
            key=lambda envelope: (envelope.occurred_at.ToDatetime(), envelope.stream_id, envelope.sequence),
        )
        repository = LedgerRepository(EventStore(Topics()), clock=lambda: GRANT_TIME)
        ledger_sessions = create_session_factory(ledger_engine)
        with transaction(ledger_sessions) as session:
            for player in PLAYERS:
                repository.ensure_starting_grant(session, f"player:{player}", GRANT_BEANS)
        ledger = LedgerProjection(repository)
        for envelope in settlements:
            with transaction(ledger_sessions) as session:
                ledger.handle(session, envelope, POSITION)
    finally:
        scoring_engine.dispose()
        ledger_engine.dispose()


@pytest.fixture(scope="module")
def settled_template(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """Three settled games, once per module; each test gets a copy (some tamper with it)."""
    directory = tmp_path_factory.mktemp("settled")
    settle_and_post(
        sqlite_url(directory, "scoring"),
        sqlite_url(directory, "ledger"),
        greedy_game_envelopes(3, players=PLAYERS, rules=RULES, start=GAMES_START),
    )
    return directory


@pytest.fixture
def databases(settled_template: pathlib.Path, tmp_path: pathlib.Path) -> tuple[str, str]:
    for path in settled_template.iterdir():
        shutil.copy(path, tmp_path / path.name)
    return sqlite_url(tmp_path, "scoring"), sqlite_url(tmp_path, "ledger")


@dataclasses.dataclass
class Services:
    """The scoring and ledger services serving the test databases; `ledger` is its host:port."""

    scoring: RunningServer
    ledger: str


@pytest.fixture
def services(databases: tuple[str, str]) -> Iterator[Services]:
    scoring_url, ledger_url = databases
    settings = load_settings({"MAHJONG_JWT_SECRET": SECRET})
    scoring_engine, ledger_engine = create_engine_for(scoring_url), create_engine_for(ledger_url)
    scoring = serve(
        [scoring_registration(create_session_factory(scoring_engine))],
        "127.0.0.1:0",
        settings,
        interceptors=[AuthInterceptor(SECRET, SCORING_ROLES)],
    )
    with_scoring = load_settings(
        {"MAHJONG_JWT_SECRET": SECRET, "MAHJONG_SCORING_GRPC_TARGET": f"127.0.0.1:{scoring.port}"}
    )
    ledger = serve(
        ledger_definition(LedgerSettings()).registrations(ledger_engine, with_scoring, Topics()),
        "127.0.0.1:0",
        with_scoring,
        interceptors=[AuthInterceptor(SECRET, LEDGER_ROLES)],
        extra_error_mapping=LEDGER_ERRORS,
    )
    try:
        yield Services(scoring, f"127.0.0.1:{ledger.port}")
    finally:
        ledger.stop(0)
        scoring.stop(0)
        scoring_engine.dispose()
        ledger_engine.dispose()


def reconcile_command(services: Services, *extra: str, token: str = FINANCE_TOKEN) -> list[str]:
    return ["reconcile", "--ledger", services.ledger, "--token", token, *extra]


def execute_sql(url: str, statement: str) -> None:
    engine = create_engine_for(url)
    try:
        with transaction(create_session_factory(engine)) as session:
            session.execute(sqlalchemy.text(statement))
    finally:
        engine.dispose()


def test_a_clean_ledger_reconciles_with_the_rake_per_room_and_day(
    services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(reconcile_command(services)) == 0
    output = capsys.readouterr().out
    assert "reconciled: ok" in output
    assert "matches_scoring            ok" in output
    assert "2026-03-01  sichuan-test" in output


def test_the_json_format_says_ok_and_lists_the_rake(
    services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(reconcile_command(services, "--format", "json")) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is True and document["failing_checks"] == []
    assert document["games_checked"] == 3
    [rake] = document["rake_per_room_per_day"]
    assert rake["room_id"] == "sichuan-test" and rake["rake_beans"] > 0 and rake["games"] == 3


def test_the_csv_format_has_one_row_per_check_and_rake_line(
    services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(reconcile_command(services, "--format", "csv")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "record,name,subject,value,detail"
    assert "check,game_sum,,ok,0" in lines
    assert any(line.startswith("rake,sichuan-test,2026-03-01,") for line in lines)


def test_a_window_outside_the_games_checks_no_game(
    services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(reconcile_command(services, "--from", "2026-04-01", "--to", "2026-04-30", "--format", "json"))
        == 0
    )
    document = json.loads(capsys.readouterr().out)
    assert document["games_checked"] == 0 and document["rake_per_room_per_day"] == []


def test_a_window_on_the_games_day_checks_every_game(
    services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(reconcile_command(services, "--from", "2026-03-01", "--to", "2026-03-01", "--format", "json"))
        == 0
    )
    document = json.loads(capsys.readouterr().out)
    assert document["games_checked"] == 3 and document["instructions_checked"] > 0


def test_a_tampered_posting_fails_naming_every_broken_check(
    databases: tuple[str, str], services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    _, ledger_url = databases
    execute_sql(
        ledger_url,
        f"UPDATE {ledger_postings.name} SET beans = beans + 7 WHERE posting_id = "
        f"(SELECT MAX(posting_id) FROM {ledger_postings.name} WHERE account = 'house:rake')",
    )
    assert main(reconcile_command(services)) == 1
    captured = capsys.readouterr()
    assert "reconciled: FAILED" in captured.out
    failed = captured.err.strip().removeprefix("reconcile FAILED: ").split(", ")
    assert {"trial_balance", "balance_matches_postings", "transfer_sum", "game_sum"} <= set(failed)
    assert "postings sum to 7 beans, not 0" in captured.out


def test_a_scoring_line_the_ledger_did_not_post_as_asked_fails_matches_scoring(
    databases: tuple[str, str], services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    scoring_url, _ = databases
    execute_sql(
        scoring_url,
        f"UPDATE {scoring_lines.name} SET total_beans = total_beans + 1 WHERE instruction_id = "
        f"(SELECT MIN(instruction_id) FROM {scoring_lines.name})",
    )
    assert main(reconcile_command(services)) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == "reconcile FAILED: matches_scoring"
    assert "matches_scoring: instruction" in captured.out


def test_a_scoring_service_that_does_not_answer_is_no_pass(
    services: Services, capsys: pytest.CaptureFixture[str]
) -> None:
    services.scoring.stop(0)
    assert main(reconcile_command(services)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "UNAVAILABLE" in captured.err and "could not be compared with scoring" in captured.err


def test_only_finance_or_ops_may_reconcile(services: Services, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(reconcile_command(services, token=mint_token(SECRET, "ann"))) == 2
    assert "PERMISSION_DENIED" in capsys.readouterr().err
