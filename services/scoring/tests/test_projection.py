"""The settlement projection on SQLite (and its batches on PostgreSQL): rows, outbox, idempotency,
rebuild equals live, memory safety."""

from __future__ import annotations

import pathlib

import pytest
import sqlalchemy
from mahjong.v1 import envelope_pb2
from mahjong_platform.database import SessionFactory, create_session_factory, sqlite_url, transaction
from mahjong_platform.event_store import EventStore
from mahjong_platform.outbox import count_unsent_outbox_messages
from mahjong_platform.schema import stored_events
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import Delivery, MessagePosition
from mahjong_scoring.game_facts import GameFactsError
from mahjong_scoring.game_settlement import new_game_settlement, settle_table_events
from mahjong_scoring.models import PROJECTION_TABLES, scoring_games, scoring_lines, scoring_metadata
from mahjong_scoring.projection import SettlementProjection
from mahjong_scoring.testing import TableScript, room_rules
from sqlalchemy.engine import Engine

from .conftest import migrated_engine

POSITION = MessagePosition("mahjong.table.v1", 0, 0)
DEAL = ["11234567888m99p5s", "123456789p2255s", "11335779s24699m", "123m1122456p789s"]


def whole_game(table_id: str = "table-1") -> TableScript:
    """Concealed kong, then the wall-exhausted checks (flower pig, not ready, kong refund), rake."""
    script = TableScript(table_id=table_id, rules=room_rules(coefficient=100, rake_beans=50)).open(
        DEAL, "smpm"
    )
    script.discard(0, "5s")
    script.draw(1, "1s")
    script.discard(1, "1s")
    script.draw(0, "8m")
    script.kong(0, "8m", "concealed")
    script.draw(0, "4p", from_tail=True)
    script.discard(0, "9p")
    script.wall_exhausted()
    script.ended("wall_exhausted")
    return script


def apply_all(
    session_factory: SessionFactory, projection: SettlementProjection, events: list[envelope_pb2.Envelope]
) -> None:
    for envelope in events:
        with transaction(session_factory) as session:
            projection(session, envelope, POSITION)


def projection_rows(session_factory: SessionFactory) -> dict[str, list[tuple[object, ...]]]:
    with transaction(session_factory) as session:
        rows = {
            table.name: [
                tuple(row) for row in session.execute(sqlalchemy.select(table).order_by(*table.primary_key))
            ]
            for table in PROJECTION_TABLES
        }
        rows["stored_events"] = [
            (row.stream_id, row.sequence, row.event_id, bytes(row.envelope))
            for row in session.execute(
                sqlalchemy.select(stored_events).order_by(stored_events.c.stream_id, stored_events.c.sequence)
            )
        ]
    return rows


def test_each_settlement_event_is_stored_and_queued_for_the_settlement_topic(
    session_factory: SessionFactory,
) -> None:
    script = whole_game()
    apply_all(session_factory, SettlementProjection(EventStore(Topics.with_prefix("t."))), script.events)
    _, expected = settle_table_events(new_game_settlement(), script.events)
    rows = projection_rows(session_factory)
    assert [row[2] for row in rows["stored_events"]] == [envelope.event_id for envelope in expected.envelopes]
    with transaction(session_factory) as session:
        assert count_unsent_outbox_messages(session) == len(expected.envelopes)
        topics = set(session.execute(sqlalchemy.select(stored_events.c.topic)).scalars())
        game = session.execute(sqlalchemy.select(scoring_games)).one()
    assert topics == {"t.mahjong.settlement.v1"}
    assert game.settled and game.line_count == len(expected.instructions)


def test_the_same_table_event_twice_adds_nothing(session_factory: SessionFactory) -> None:
    script = whole_game()
    projection = SettlementProjection(EventStore())
    apply_all(session_factory, projection, script.events)
    before = projection_rows(session_factory)
    apply_all(session_factory, projection, script.events[3:6])
    apply_all(session_factory, SettlementProjection(EventStore()), script.events[-2:])
    assert projection_rows(session_factory) == before


def test_a_rebuilt_projection_from_the_same_events_has_identical_rows(
    session_factory: SessionFactory, tmp_path: pathlib.Path
) -> None:
    script = whole_game()
    apply_all(session_factory, SettlementProjection(EventStore()), script.events)
    rebuilt_engine: Engine = migrated_engine(sqlite_url(tmp_path / "rebuild", "scoring"))
    try:
        rebuilt = create_session_factory(rebuilt_engine)
        # Rebuilt without the in-memory fold: every event folds the game again from the inbox.
        apply_all(rebuilt, SettlementProjection(EventStore(), games_in_memory_max=1), script.events)
        assert projection_rows(rebuilt) == projection_rows(session_factory)
    finally:
        rebuilt_engine.dispose()


def test_a_rolled_back_event_does_not_leak_from_memory_into_the_next(session_factory: SessionFactory) -> None:
    script = whole_game()
    projection = SettlementProjection(EventStore())
    apply_all(session_factory, projection, script.events[:5])
    kong_event = script.events[7]
    assert kong_event.WhichOneof("payload") == "kong_declared"
    try:
        with transaction(session_factory) as session:
            projection(session, script.events[5], POSITION)
            raise RuntimeError("crash before commit")
    except RuntimeError:
        pass
    apply_all(session_factory, projection, script.events[5:])
    reference = projection_rows(session_factory)
    other_engine_rows = _fresh_rows(script.events)
    assert reference["scoring_lines"] == other_engine_rows["scoring_lines"]


def _fresh_rows(events: list[envelope_pb2.Envelope]) -> dict[str, list[tuple[object, ...]]]:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        engine = migrated_engine(sqlite_url(pathlib.Path(directory), "scoring"))
        try:
            factory = create_session_factory(engine)
            apply_all(factory, SettlementProjection(EventStore()), events)
            return projection_rows(factory)
        finally:
            engine.dispose()


def test_the_migrated_database_matches_the_metadata(scoring_engine: Engine) -> None:
    inspector = sqlalchemy.inspect(scoring_engine)
    for table in scoring_metadata.sorted_tables:
        columns = {column["name"] for column in inspector.get_columns(table.name)}
        assert columns == {column.name for column in table.columns}, table.name


def _two_games_interleaved() -> list[envelope_pb2.Envelope]:
    first = whole_game().events
    second = TableScript(rules=room_rules(coefficient=100, rake_beans=50), table_id="table-two")
    second.open(DEAL, "smpm")
    second.discard(0, "5s")
    second.wall_exhausted()
    second.ended("wall_exhausted")
    events: list[envelope_pb2.Envelope] = []
    for index in range(max(len(first), len(second.events))):
        events.extend(first[index : index + 1] + second.events[index : index + 1])
    return events


def _apply_in_batches(
    session_factory: SessionFactory, events: list[envelope_pb2.Envelope], batch_size: int
) -> None:
    projection = SettlementProjection(EventStore())
    for start in range(0, len(events), batch_size):
        batch = [Delivery(envelope, POSITION) for envelope in events[start : start + batch_size]]
        with transaction(session_factory) as session:
            projection.apply_batch(session, batch)


def test_batches_of_any_size_give_the_rows_of_one_event_at_a_time(tmp_path: pathlib.Path) -> None:
    """Two games interleaved, a re-sent event inside a batch: batches of 1, 3, 10 and all at once."""
    events = _two_games_interleaved()
    events.insert(6, events[4])  # A duplicate the relay re-sent, inside what becomes one batch.
    reference = _fresh_rows(events)
    assert len(reference["scoring_games"]) == 2 and reference["scoring_lines"]
    for batch_size in (1, 3, 10, len(events)):
        engine = migrated_engine(sqlite_url(tmp_path / f"batch-{batch_size}", "scoring"))
        try:
            factory = create_session_factory(engine)
            _apply_in_batches(factory, events, batch_size)
            assert projection_rows(factory) == reference, batch_size
        finally:
            engine.dispose()


def _inbox_lookups(engine: Engine) -> list[str]:
    """Record the statements that look an event id up in the inbox (`_received`)."""
    lookups: list[str] = []

    @sqlalchemy.event.listens_for(engine, "before_cursor_execute")
    def _note(_connection: object, _cursor: object, statement: str, *_rest: object) -> None:
        if statement.startswith("SELECT scoring_table_events.event_id"):
            lookups.append(statement)

    return lookups


def test_new_events_are_not_looked_up_in_the_inbox_and_a_resent_one_is_skipped(
    scoring_engine: Engine, session_factory: SessionFactory
) -> None:
    """The tracked consumer has already skipped the ids it applied (in the same transaction), so a
    batch of new events costs no inbox lookup; an event at or before its game's last sequence
    (a duplicate the consumer's check did not catch) is looked up, and skipped."""
    script = whole_game()
    lookups = _inbox_lookups(scoring_engine)
    projection = SettlementProjection(EventStore())
    batch = [Delivery(envelope, POSITION) for envelope in script.events[:6]]
    with transaction(session_factory) as session:
        projection.apply_batch(session, batch + batch[2:3])  # a repeat within the batch: skipped
    assert lookups == []
    before = projection_rows(session_factory)
    with transaction(session_factory) as session:
        projection.apply_batch(session, batch[4:6])
    assert len(lookups) == 2
    assert projection_rows(session_factory) == before
    apply_all(session_factory, projection, script.events[6:])
    assert len(lookups) == 2
    assert projection_rows(session_factory) == _fresh_rows(script.events)


def test_another_event_at_a_sequence_already_applied_is_refused(session_factory: SessionFactory) -> None:
    script = whole_game()
    projection = SettlementProjection(EventStore())
    apply_all(session_factory, projection, script.events[:5])
    before = projection_rows(session_factory)
    impostor = envelope_pb2.Envelope()
    impostor.CopyFrom(script.events[3])
    impostor.event_id = "another-event-id"
    refused = pytest.raises(GameFactsError, match="already applied with another event id")
    with refused, transaction(session_factory) as session:
        projection(session, impostor, POSITION)
    assert projection_rows(session_factory) == before


def apply_in_batches(
    session_factory: SessionFactory, events: list[envelope_pb2.Envelope], batch_size: int
) -> dict[str, list[tuple[object, ...]]]:
    projection = SettlementProjection(EventStore())
    for start in range(0, len(events), batch_size):
        with transaction(session_factory) as session:
            projection.apply_batch(
                session, [Delivery(envelope, POSITION) for envelope in events[start : start + batch_size]]
            )
    return projection_rows(session_factory)


@pytest.mark.integration
def test_postgresql_batches_of_several_games_leave_the_rows_sqlite_does(
    session_factory: SessionFactory, postgres_database_url: str
) -> None:
    """The same interleaved events of three tables, in batches that move several games at once
    (`insert_rows` and the array parameters take other statements on each database) leave
    identical projection rows and settlement events on both."""
    scripts = [whole_game(f"table-{number}") for number in range(3)]
    events = [
        envelope for moment in zip(*(script.events for script in scripts), strict=True) for envelope in moment
    ]
    expected = apply_in_batches(session_factory, events, batch_size=5)
    assert len(expected["scoring_games"]) == 3 and all(row[-1] for row in expected["scoring_games"])
    engine = migrated_engine(postgres_database_url)
    try:
        assert apply_in_batches(create_session_factory(engine), events, batch_size=5) == expected
    finally:
        engine.dispose()


def test_the_live_consumer_keeps_no_processed_ids_and_applies_re_sent_events_once(
    scoring_engine: Engine, session_factory: SessionFactory
) -> None:
    """The consumer the service runs (`app.consumers`) leaves re-sent events to the inbox check:
    two games in batches of 4, every fifth event sent again at a later offset (some within a batch,
    some in a later one), give the rows of each event applied once, and no `processed_events`;
    each is applied once and counted a duplicate every other time."""
    from mahjong_platform.config import load_settings
    from mahjong_platform.schema import processed_events
    from mahjong_platform.testing import batch_applier_of
    from mahjong_scoring.app import consumers

    (definition,) = consumers(scoring_engine, load_settings({}), Topics())
    events = _two_games_interleaved()
    sent = [envelope for index, envelope in enumerate(events) for _ in range(2 if index % 5 == 3 else 1)]
    sent += events[::7]
    deliveries = [Delivery(event, MessagePosition("table", 0, offset)) for offset, event in enumerate(sent)]
    failures: list[str] = []
    applier = batch_applier_of(definition, session_factory, lambda delivery, error: failures.append(error))
    applied: list[str] = []
    duplicates = 0
    for start in range(0, len(deliveries), 4):
        batch = deliveries[start : start + 4]
        outcome = applier.apply(batch, [delivery.position for delivery in batch])
        applied += [envelope.event_id for envelope in outcome.applied_events]
        duplicates += outcome.duplicates
    assert failures == []
    assert applied == [envelope.event_id for envelope in events]
    assert duplicates == len(sent) - len(events)
    assert projection_rows(session_factory) == _fresh_rows(events)
    with transaction(session_factory) as session:
        assert session.execute(sqlalchemy.select(processed_events)).all() == []


def _game_row_writes(engine: Engine) -> list[str]:
    """Record the statements that write a game's row or its seats."""
    writes: list[str] = []

    @sqlalchemy.event.listens_for(engine, "before_cursor_execute")
    def _note(_connection: object, _cursor: object, statement: str, *_rest: object) -> None:
        if statement.startswith(("UPDATE scoring_games", "UPDATE scoring_players")):
            writes.append(statement.split()[1])

    return writes


def test_a_game_row_is_written_only_when_its_figures_change(
    scoring_engine: Engine, session_factory: SessionFactory
) -> None:
    """Draws and discards change no figure of the game's row: a batch of only those writes no row
    (it used to update the game on every batch); the kong's batch writes the game and its seats,
    and `last_sequence` is the kong's, the event that changed the row, whatever the batches."""
    script = whole_game()
    writes = _game_row_writes(scoring_engine)
    projection = SettlementProjection(EventStore())
    payloads = [envelope.WhichOneof("payload") for envelope in script.events]
    kong = payloads.index("kong_declared")
    quiet = [Delivery(envelope, POSITION) for envelope in script.events[3:kong]]
    assert {payloads[index] for index in range(3, kong)} <= {"tile_discarded", "tile_drawn"}
    for batch in (script.events[:3], script.events[3:kong]):
        with transaction(session_factory) as session:
            projection.apply_batch(session, [Delivery(envelope, POSITION) for envelope in batch])
    assert quiet and writes == []
    with transaction(session_factory) as session:
        projection.apply_batch(
            session, [Delivery(envelope, POSITION) for envelope in script.events[kong : kong + 3]]
        )
        game = session.execute(sqlalchemy.select(scoring_games)).one()
        lines = session.execute(
            sqlalchemy.select(sqlalchemy.func.count()).select_from(scoring_lines)
        ).scalar()
    assert writes == ["scoring_games", "scoring_players"]
    assert game.line_count == lines > 0 and game.last_sequence == script.events[kong].sequence


def test_the_last_sequences_query_does_not_read_every_event_of_a_game(tmp_path: pathlib.Path) -> None:
    """Each batch asks for its games' last received sequences: SQLite answers it from the end of
    each game's range of the inbox key, so its work (virtual machine steps, counted by the
    driver's progress handler: no clock) is the same for games of 400 events as for games of 4.
    The GROUP BY it replaced read every event received of each game."""
    from mahjong_scoring.models import scoring_table_events
    from mahjong_scoring.projection import _last_sequences

    table_ids = [f"table-{number}" for number in range(32)]

    def steps_with(events_per_game: int) -> int:
        engine = migrated_engine(sqlite_url(tmp_path / str(events_per_game), "scoring"))
        try:
            with engine.begin() as connection:
                connection.execute(
                    scoring_table_events.insert(),
                    [
                        {
                            "table_id": table_id,
                            "sequence": sequence,
                            "event_id": f"{table_id}/{sequence}",
                            "envelope": b"",
                        }
                        for table_id in table_ids
                        for sequence in range(1, events_per_game + 1)
                    ],
                )
            with transaction(create_session_factory(engine)) as session:
                driver = session.connection().connection.dbapi_connection
                steps = [0]

                def count_step() -> int:
                    steps[0] += 1
                    return 0

                driver.set_progress_handler(count_step, 1)
                sequences = _last_sequences(session, [*table_ids, "table-unseen"])
                driver.set_progress_handler(None, 1)
            assert sequences == {**dict.fromkeys(table_ids, events_per_game), "table-unseen": 0}
            return steps[0]
        finally:
            engine.dispose()

    assert steps_with(400) == steps_with(4)


def test_a_sqlite_batch_runs_a_fixed_list_of_statements_without_a_savepoint(
    scoring_engine: Engine, session_factory: SessionFactory
) -> None:
    """On SQLite a batch's statements are one each: the games' last sequences, the inbox rows, the
    output streams' versions (read in the batch's transaction, so the append checks them no more),
    its outbox and event rows, the lines, the games' and seats' updates; no SAVEPOINT around the
    append (every caller rolls the whole transaction back on an error, and the batch is then
    applied one event at a time)."""
    script = whole_game()
    projection = SettlementProjection(EventStore())
    with transaction(session_factory) as session:
        projection.apply_batch(session, [Delivery(envelope, POSITION) for envelope in script.events[:5]])
    statements: list[str] = []

    @sqlalchemy.event.listens_for(scoring_engine, "before_cursor_execute")
    def _note(_connection: object, _cursor: object, statement: str, *_rest: object) -> None:
        statements.append(statement.split(" WHERE")[0].split(" (")[0])

    with transaction(session_factory) as session:  # the concealed kong: a settlement line
        projection.apply_batch(session, [Delivery(envelope, POSITION) for envelope in script.events[5:8]])
    assert not [statement for statement in statements if "SAVEPOINT" in statement.upper()]
    assert statements == [
        "BEGIN IMMEDIATE",
        "SELECT ids.value AS table_id,",
        "INSERT INTO scoring_table_events",
        "SELECT stream_id, max(sequence) FROM stored_events",
        "INSERT INTO outbox_messages",
        "INSERT INTO stored_events",
        "INSERT INTO scoring_lines",
        "UPDATE scoring_games SET room_id = ?, coefficient = ?, settles = ?, last_sequence = ?, "
        "line_count = ?, settled = ?",
        "UPDATE scoring_players SET points = ?, beans = ?, rake_beans = ?",
    ], statements
