"""``mjctl replay``: a real table's events (the table aggregate's greedy game) with the settlement
lines scoring derived from them, read from the event stores and from the real broker's topics."""

from __future__ import annotations

import dataclasses
import datetime
import json
import pathlib
import uuid

import pytest
import sqlalchemy
from mahjong.v1 import envelope_pb2
from mahjong_platform.config import load_settings
from mahjong_platform.database import create_engine_for, create_session_factory, sqlite_url, transaction
from mahjong_platform.envelopes import new_envelope, parse_envelope, serialize_envelope
from mahjong_platform.event_store import EventStore
from mahjong_platform.migrations import upgrade
from mahjong_platform.outbox import create_idempotent_producer
from mahjong_platform.schema import stored_events
from mahjong_platform.service_runtime import ServiceDefinition, migrate, start_service
from mahjong_platform.topics import Topics, ensure_topics
from mahjong_platform.tracked_consumer import MessagePosition
from mahjong_rules.room_rules import RoomRules
from mahjong_scoring.__main__ import DEFINITION as SCORING
from mahjong_scoring.projection import SettlementProjection
from mahjong_table import codec
from mahjong_table.__main__ import definition as table_definition
from mahjong_table.selfplay import greedy_command
from mahjong_table.sichuan.decide import execute, open_table
from mahjong_table.sichuan.evolve import fold
from mjctl.__main__ import main

START = datetime.datetime(2026, 3, 1, 12, tzinfo=datetime.UTC)
TABLE_ID = "table-replayed"


def played_game(table_id: str = TABLE_ID, seed: int = 7) -> list[envelope_pb2.Envelope]:
    """A greedy game of the table aggregate, as the table service's envelopes."""
    events = open_table(table_id, "sichuan-test", RoomRules(coefficient=10), ("ann", "bo", "cy", "di"), seed)
    state = fold(events)
    while not state.is_over:
        new, state = execute(state, greedy_command(state))
        events.extend(new)
    return [
        new_envelope(
            codec.to_message(event),
            clock=lambda sequence=sequence: START + datetime.timedelta(seconds=sequence),
            stream_id=table_id,
            sequence=sequence,
            event_id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{table_id}/{sequence}")),
            correlation_id=table_id,
        )
        for sequence, event in enumerate(events, start=1)
    ]


def stores(tmp_path: pathlib.Path, games: list[list[envelope_pb2.Envelope]]) -> tuple[str, str]:
    """A table event store holding the games and a scoring database that settled them."""
    table_url, scoring_url = sqlite_url(tmp_path, "table"), sqlite_url(tmp_path, "scoring")
    upgrade(table_url, "mahjong_table:alembic", version_table="alembic_version_table")
    migrate(SCORING, scoring_url)
    table_engine, scoring_engine = create_engine_for(table_url), create_engine_for(scoring_url)
    projection = SettlementProjection(EventStore(Topics()))
    try:
        for game in games:
            with transaction(create_session_factory(table_engine)) as session:
                EventStore(Topics()).append(session, game[0].stream_id, 0, [_unnumbered(e) for e in game])
            with transaction(create_session_factory(scoring_engine)) as session:
                for envelope in game:
                    projection(session, envelope, MessagePosition("table", 0, 0))
    finally:
        table_engine.dispose()
        scoring_engine.dispose()
    return table_url, scoring_url


def _unnumbered(envelope: envelope_pb2.Envelope) -> envelope_pb2.Envelope:
    copy = envelope_pb2.Envelope()
    copy.CopyFrom(envelope)
    copy.stream_id, copy.sequence = "", 0
    return copy


def settlement_events(scoring_url: str) -> list[envelope_pb2.Envelope]:
    engine = create_engine_for(scoring_url)
    try:
        with engine.connect() as connection:
            query = sqlalchemy.select(stored_events.c.envelope).order_by(
                stored_events.c.stream_id, stored_events.c.sequence
            )
            return [parse_envelope(bytes(row.envelope)) for row in connection.execute(query)]
    finally:
        engine.dispose()


def assert_full_story(output: str, game: list[envelope_pb2.Envelope]) -> None:
    lines = output.splitlines()
    table_lines = [line for line in lines if line.startswith("#")]
    assert len(table_lines) == len(game)
    assert "opened in room sichuan-test" in table_lines[0] and "seat 0 (ann)" in table_lines[0]
    assert any(" draws " in line for line in table_lines)
    assert any(" discards " in line for line in table_lines)
    wins = [line for line in table_lines if " wins " in line]
    assert wins and all("×" in line for line in wins)
    assert any("paid, line 1 " in line and "beans" in line for line in lines)
    assert any(line.strip().startswith("settled:") for line in lines)
    # Each payment sits under the event that caused it: indented, after a table event.
    first_paid = next(index for index, line in enumerate(lines) if "paid, line 1 " in line)
    assert first_paid > 0 and lines[first_paid].startswith("        ")


def test_replay_from_the_event_stores_tells_the_whole_game_with_what_was_paid(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    game = played_game()
    table_url, scoring_url = stores(tmp_path, [game, played_game("table-other", 8)])
    assert (
        main(["replay", "--table", TABLE_ID, "--database", table_url, "--scoring-database", scoring_url]) == 0
    )
    assert_full_story(capsys.readouterr().out, game)


def test_replay_json_prints_one_protobuf_json_object_per_event(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    game = played_game()
    table_url, scoring_url = stores(tmp_path, [game])
    arguments = [
        "replay",
        "--table",
        TABLE_ID,
        "--json",
        "--database",
        table_url,
        "--scoring-database",
        scoring_url,
    ]
    assert main(arguments) == 0
    documents = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    settlements = settlement_events(scoring_url)
    assert len(documents) == len(game) + len(settlements)
    assert documents[0]["table_opened"]["table_id"] == TABLE_ID
    assert [
        document["event_id"]
        for document in documents
        if "settlement_instructed" not in document and "game_settled" not in document
    ] == [envelope.event_id for envelope in game]
    assert documents[-1]["game_settled"]["table_id"] == TABLE_ID


def test_replay_of_an_unknown_table_fails(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    table_url, scoring_url = stores(tmp_path, [played_game()])
    assert (
        main(["replay", "--table", "nope", "--database", table_url, "--scoring-database", scoring_url]) == 1
    )
    assert "no events for table 'nope'" in capsys.readouterr().err


@pytest.mark.integration
def test_replay_from_kafka_reads_the_key_partition_and_drops_re_sent_events(
    kafka_bootstrap_servers: str,
    unique_prefix: str,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topics = Topics.with_prefix(unique_prefix)
    ensure_topics(kafka_bootstrap_servers, topics.all_names(), partitions=5)
    games = [played_game(), *(played_game(f"table-{index}", index) for index in range(4))]
    _, scoring_url = stores(tmp_path, games)
    producer = create_idempotent_producer(
        kafka_bootstrap_servers, client_id="replay-test", delivery_timeout_ms=30_000
    )
    try:
        for envelope in [event for game in games for event in game] + games[0][3:6]:  # three re-sent
            producer.send(topics.table, key=envelope.stream_id.encode(), value=serialize_envelope(envelope))
        for envelope in settlement_events(scoring_url):
            producer.send(
                topics.settlement, key=envelope.stream_id.encode(), value=serialize_envelope(envelope)
            )
        producer.flush(timeout=30)
    finally:
        producer.close()
    monkeypatch.setenv("MAHJONG_KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap_servers)
    monkeypatch.setenv("MAHJONG_TOPIC_PREFIX", unique_prefix)
    assert main(["replay", "--table", TABLE_ID, "--kafka"]) == 0
    assert_full_story(capsys.readouterr().out, games[0])
    # Kafka's time index bounds the read: from before the records were written, the whole game;
    # from after, nothing.
    since = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)).isoformat()
    assert main(["replay", "--table", TABLE_ID, "--kafka", "--since", since]) == 0
    assert_full_story(capsys.readouterr().out, games[0])
    later = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=5)).isoformat()
    assert main(["replay", "--table", TABLE_ID, "--kafka", "--since", later]) == 1
    assert "no events" in capsys.readouterr().err
    assert main(["replay", "--table", TABLE_ID, "--kafka", "--json"]) == 0
    documents = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert documents[0]["table_opened"]["table_id"] == TABLE_ID
    assert sum(
        1
        for document in documents
        if "settlement_instructed" not in document and "game_settled" not in document
    ) == len(games[0])


@pytest.mark.integration
def test_replay_by_default_reads_the_game_through_the_services_with_an_ops_token(
    kafka_bootstrap_servers: str,
    unique_prefix: str,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    game = played_game()
    table_url, scoring_url = stores(tmp_path, [game, played_game("table-other", 8)])
    environment = {
        "MAHJONG_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap_servers,
        "MAHJONG_TOPIC_PREFIX": unique_prefix,
        "MAHJONG_JWT_SECRET": "replay-test-secret-0123456789abcdef01234",
        "MAHJONG_TABLE_DATABASE_URL": table_url,
        "MAHJONG_SCORING_DATABASE_URL": scoring_url,
    }
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    running = [
        start_service(serving_only(table_definition(settings)), settings, address="127.0.0.1:0"),
        start_service(serving_only(SCORING), settings, address="127.0.0.1:0"),
    ]
    try:
        monkeypatch.setenv("MAHJONG_TABLE_GRPC_TARGET", f"127.0.0.1:{running[0].port}")
        monkeypatch.setenv("MAHJONG_SCORING_GRPC_TARGET", f"127.0.0.1:{running[1].port}")
        assert main(["replay", "--table", TABLE_ID]) == 0
        assert_full_story(capsys.readouterr().out, game)
        assert main(["replay", "--table", TABLE_ID, "--json"]) == 0
        from_services = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert main(["replay", "--table", TABLE_ID, "--json", "--database", table_url]) == 0
        from_stores = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        payloads = [sorted(set(document) - ENVELOPE_HEADERS) for document in from_stores]
        assert [sorted(set(document) - ENVELOPE_HEADERS) for document in from_services] == payloads
        assert [d for d in from_services if "table_opened" in d] == [
            d for d in from_stores if "table_opened" in d
        ]
        assert main(["replay", "--table", "nope"]) == 1
        assert "no events for table 'nope'" in capsys.readouterr().err
        assert main(["replay", "--table", TABLE_ID, "--token", "not-a-token"]) == 1
        assert "UNAUTHENTICATED" in capsys.readouterr().err
    finally:
        for service in running:
            service.stop(0)


def serving_only(definition: ServiceDefinition) -> ServiceDefinition:
    """The service's real gRPC server over its database, without its Kafka workers (the stores
    already hold the games): starts and stops in a moment. Without its consumer no partition is
    ever assigned to a table engine, so it serves every table itself (no owner routing) and says
    SERVING from the start."""
    return dataclasses.replace(
        definition,
        consumers=lambda *_: (),
        relays_outbox=False,
        extra_workers=lambda *_: (),
        extra_interceptors=lambda: (),
        serving_when=None,
    )


ENVELOPE_HEADERS = {"event_id", "stream_id", "sequence", "occurred_at", "correlation_id", "causation_id"}
