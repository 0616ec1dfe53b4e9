"""The event store contract, run against every backend: SQLite and the real PostgreSQL.

Each test runs once per backend through the parametrized `migrated_engine` fixture.
"""

from __future__ import annotations

import datetime
import threading

import pytest
import sqlalchemy
from mahjong.v1 import envelope_pb2, match_events_pb2, table_events_pb2
from mahjong_platform import event_store
from mahjong_platform.database import create_session_factory, transaction
from mahjong_platform.envelopes import new_envelope, serialize_envelope
from mahjong_platform.event_store import EventStore, WrongExpectedVersionError
from mahjong_platform.schema import outbox_messages, stored_events
from mahjong_platform.topics import Topics
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

FIXED_TIME = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
TOPICS = Topics.with_prefix("contract.")


def fixed_clock() -> datetime.datetime:
    return FIXED_TIME


def table_event(table_id: str = "table-1") -> envelope_pb2.Envelope:
    return new_envelope(table_events_pb2.TableOpened(table_id=table_id), clock=fixed_clock)


def ticket_event() -> envelope_pb2.Envelope:
    return new_envelope(match_events_pb2.TicketQueued(ticket_id="ticket-1"), clock=fixed_clock)


class _CrashError(Exception):
    pass


@pytest.fixture
def store() -> EventStore:
    return EventStore(topics=TOPICS, clock=fixed_clock)


def row_counts(engine: Engine) -> tuple[int, int]:
    with engine.connect() as connection:
        events = connection.execute(sqlalchemy.select(sqlalchemy.func.count()).select_from(stored_events))
        outbox = connection.execute(sqlalchemy.select(sqlalchemy.func.count()).select_from(outbox_messages))
        return events.scalar_one(), outbox.scalar_one()


def test_append_to_a_new_stream_numbers_events_from_one(migrated_engine: Engine, store: EventStore) -> None:
    events = [table_event(), table_event(), table_event()]
    with transaction(create_session_factory(migrated_engine)) as session:
        last_sequence = store.append(session, "table-1", 0, events)
    assert last_sequence == 3
    with transaction(create_session_factory(migrated_engine)) as session:
        loaded = store.load(session, "table-1")
        assert store.stream_version(session, "table-1") == 3
    assert [event.sequence for event in loaded] == [1, 2, 3]
    assert [event.stream_id for event in loaded] == ["table-1"] * 3
    assert [event.event_id for event in loaded] == [event.event_id for event in events]
    assert loaded[0].table_opened.table_id == "table-1"
    assert loaded[0].occurred_at.ToDatetime(tzinfo=datetime.UTC) == FIXED_TIME


def test_append_continues_from_the_expected_version(migrated_engine: Engine, store: EventStore) -> None:
    session_factory = create_session_factory(migrated_engine)
    with transaction(session_factory) as session:
        store.append(session, "table-1", 0, [table_event(), table_event()])
    with transaction(session_factory) as session:
        assert store.append(session, "table-1", 2, [table_event()]) == 3
    with transaction(session_factory) as session:
        assert [event.sequence for event in store.load(session, "table-1", after_sequence=1)] == [2, 3]
        assert store.load(session, "table-1", after_sequence=3) == []
        assert [event.sequence for event in store.load(session, "table-1", limit=2)] == [1, 2]


def test_an_unknown_stream_is_empty_at_version_zero(migrated_engine: Engine, store: EventStore) -> None:
    with transaction(create_session_factory(migrated_engine)) as session:
        assert store.load(session, "no-such-stream") == []
        assert store.stream_version(session, "no-such-stream") == 0


def test_streams_are_independent(migrated_engine: Engine, store: EventStore) -> None:
    with transaction(create_session_factory(migrated_engine)) as session:
        store.append(session, "table-1", 0, [table_event()])
        store.append(session, "table-2", 0, [table_event(), table_event()])
        assert store.stream_version(session, "table-1") == 1
        assert store.stream_version(session, "table-2") == 2


def test_a_conflicting_append_raises_a_typed_error_and_writes_nothing(
    migrated_engine: Engine, store: EventStore
) -> None:
    session_factory = create_session_factory(migrated_engine)
    with transaction(session_factory) as session:
        store.append(session, "table-1", 0, [table_event(), table_event()])
    with pytest.raises(WrongExpectedVersionError) as raised, transaction(session_factory) as session:
        store.append(session, "table-1", 1, [table_event()])
    assert (raised.value.stream_id, raised.value.expected_version, raised.value.actual_version) == (
        "table-1",
        1,
        2,
    )
    assert row_counts(migrated_engine) == (2, 2)


@pytest.mark.parametrize("streams", [3, 300], ids=["a few streams", "more than one version query"])
@pytest.mark.parametrize("offset", [-1, 1], ids=["expected behind", "expected ahead"])
@pytest.mark.parametrize("savepoint", [True, False], ids=["in a savepoint", "without one"])
def test_a_batch_appends_every_stream_at_its_version_or_none_when_one_is_elsewhere(
    migrated_engine: Engine, store: EventStore, streams: int, offset: int, savepoint: bool
) -> None:
    session_factory = create_session_factory(migrated_engine)
    stream_ids = [f"table-{index}" for index in range(streams)]
    with transaction(session_factory) as session:  # every other stream already has two events
        store.append_batch(
            session, [(stream_id, 0, [table_event(), table_event()]) for stream_id in stream_ids[::2]]
        )
    versions = {stream_id: 0 if index % 2 else 2 for index, stream_id in enumerate(stream_ids)}
    # Behind: a stream with events; ahead: one without (the unique key alone would not see that).
    wrong = [stream_id for stream_id in stream_ids if (versions[stream_id] > 0) == (offset < 0)][-1]
    appends = [
        (stream_id, versions[stream_id] + (offset if stream_id == wrong else 0), [table_event()])
        for stream_id in stream_ids
    ]
    with pytest.raises(WrongExpectedVersionError) as raised, transaction(session_factory) as session:
        store.append_batch(session, appends, savepoint=savepoint)
    assert (raised.value.stream_id, raised.value.actual_version) == (wrong, versions[wrong])
    assert row_counts(migrated_engine) == (len(stream_ids[::2]) * 2,) * 2
    right = [(stream_id, versions[stream_id], events) for stream_id, _, events in appends]
    with transaction(session_factory) as session:
        store.append_batch(session, right, savepoint=savepoint)
    with transaction(session_factory) as session:
        assert store.stream_versions(session, stream_ids) == {
            stream_id: version + 1 for stream_id, version in versions.items()
        }


class _StaleVersionCheckStore(EventStore):
    """Sees the stream as it was before a competing writer committed: its first version check is
    stale, as when two writers read concurrently. Only the unique key can stop this writer."""

    def __init__(self, stale_version: int) -> None:
        super().__init__(topics=TOPICS, clock=fixed_clock)
        object.__setattr__(self, "_stale_versions", [stale_version])

    def stream_version(self, session: Session, stream_id: str) -> int:
        stale_versions: list[int] = self._stale_versions  # type: ignore[attr-defined]
        if stale_versions:
            return stale_versions.pop()
        return super().stream_version(session, stream_id)


def test_a_writer_that_raced_past_the_version_check_loses_on_the_unique_key(
    migrated_engine: Engine, store: EventStore
) -> None:
    session_factory = create_session_factory(migrated_engine)
    with transaction(session_factory) as session:
        store.append(session, "table-1", 0, [table_event(), table_event()])
    racing_store = _StaleVersionCheckStore(stale_version=1)
    with transaction(session_factory) as session:
        with pytest.raises(WrongExpectedVersionError) as raised:
            racing_store.append(session, "table-1", 1, [table_event()])
        assert (raised.value.expected_version, raised.value.actual_version) == (1, 2)
        # The caller's transaction is still usable after the lost race.
        store.append(session, "table-2", 0, [table_event("table-2")])
    assert row_counts(migrated_engine) == (3, 3)


def test_a_batch_without_a_savepoint_that_raced_past_the_version_check_fails_and_writes_nothing(
    migrated_engine: Engine, store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`savepoint=False` (the group commit's): the unique key stops a writer whose version check
    was stale; the error leaves the transaction to its caller, whose rollback drops the rows the
    batch inserted before it (another stream's event, every outbox row)."""
    session_factory = create_session_factory(migrated_engine)
    with transaction(session_factory) as session:
        store.append(session, "table-1", 0, [table_event(), table_event()])
    # The check sees table-1 at version 1, as it was before that commit (two writers reading at once).
    monkeypatch.setattr(
        event_store, "_at_expected_versions_sqlite", lambda _session, _appends, _condition=None: True
    )
    monkeypatch.setattr(
        EventStore, "stream_versions", lambda _self, _session, ids: {i: int(i == "table-1") for i in ids}
    )
    appends = [("table-2", 0, [table_event("table-2")]), ("table-1", 1, [table_event()])]
    with pytest.raises(IntegrityError), transaction(session_factory) as session:
        store.append_batch(session, appends, savepoint=False)
    assert row_counts(migrated_engine) == (2, 2)


def test_appending_an_event_id_twice_is_an_integrity_error_not_a_version_conflict(
    migrated_engine: Engine, store: EventStore
) -> None:
    event = table_event()
    session_factory = create_session_factory(migrated_engine)
    with transaction(session_factory) as session:
        store.append(session, "table-1", 0, [event])
    with pytest.raises(IntegrityError), transaction(session_factory) as session:
        store.append(session, "table-2", 0, [event])
    assert row_counts(migrated_engine) == (1, 1)


def test_an_event_naming_another_stream_or_position_is_rejected(
    migrated_engine: Engine, store: EventStore
) -> None:
    with transaction(create_session_factory(migrated_engine)) as session:
        other_stream = table_event()
        other_stream.stream_id = "table-9"
        with pytest.raises(ValueError, match="names stream"):
            store.append(session, "table-1", 0, [other_stream])
        wrong_sequence = table_event()
        wrong_sequence.sequence = 7
        with pytest.raises(ValueError, match="sequence 7"):
            store.append(session, "table-1", 0, [wrong_sequence])
        with pytest.raises(ValueError, match="events"):
            store.append(session, "table-1", 0, [])
    assert row_counts(migrated_engine) == (0, 0)


def test_appending_writes_one_outbox_message_per_event_keyed_by_stream(
    migrated_engine: Engine, store: EventStore
) -> None:
    events = [table_event(), table_event()]
    with transaction(create_session_factory(migrated_engine)) as session:
        store.append(session, "table-1", 0, events)
        store.append(session, "ticket-1", 0, [ticket_event()])
    with migrated_engine.connect() as connection:
        outbox_rows = connection.execute(
            sqlalchemy.select(outbox_messages).order_by(outbox_messages.c.id)
        ).all()
        stored_rows = connection.execute(
            sqlalchemy.select(stored_events).order_by(stored_events.c.stream_id, stored_events.c.sequence)
        ).all()
    assert [(row.topic, row.message_key, row.sent_at) for row in outbox_rows] == [
        (TOPICS.table, "table-1", None),
        (TOPICS.table, "table-1", None),
        (TOPICS.match, "ticket-1", None),
    ]
    assert [row.event_id for row in outbox_rows[:2]] == [event.event_id for event in events]
    # The outbox carries exactly the stored bytes, which are the stamped envelope.
    assert [bytes(row.message_value) for row in outbox_rows] == [bytes(row.envelope) for row in stored_rows]
    stamped = envelope_pb2.Envelope()
    stamped.CopyFrom(events[0])
    stamped.stream_id, stamped.sequence = "table-1", 1
    assert bytes(outbox_rows[0].message_value) == serialize_envelope(stamped)
    assert [(row.event_type, row.topic) for row in stored_rows] == [
        ("TableOpened", TOPICS.table),
        ("TableOpened", TOPICS.table),
        ("TicketQueued", TOPICS.match),
    ]


def test_a_seat_releasing_event_is_queued_for_the_table_and_the_seats_topic_in_its_transaction(
    migrated_engine: Engine, store: EventStore
) -> None:
    """GameEnded and PlayerLeft (`releases_seat`) get a second outbox message for the seats topic:
    the same stored bytes (same event id, so a consumer dedupes a re-send as before), written by
    the append itself; the event is stored once, under its table topic. The batch append too."""
    ended = new_envelope(table_events_pb2.GameEnded(), clock=fixed_clock)
    left = new_envelope(table_events_pb2.PlayerLeft(seat=2), clock=fixed_clock)
    with transaction(create_session_factory(migrated_engine)) as session:
        store.append(session, "table-1", 0, [table_event(), ended])
        store.append_batch(session, [("table-2", 0, [table_event("table-2"), left])])
    with migrated_engine.connect() as connection:
        outbox_rows = connection.execute(
            sqlalchemy.select(outbox_messages).order_by(outbox_messages.c.id)
        ).all()
        stored = {row.event_id: row for row in connection.execute(sqlalchemy.select(stored_events)).all()}
    assert [(row.topic, row.message_key) for row in outbox_rows] == [
        (TOPICS.table, "table-1"),
        (TOPICS.table, "table-1"),
        (TOPICS.seats, "table-1"),
        (TOPICS.table, "table-2"),
        (TOPICS.table, "table-2"),
        (TOPICS.seats, "table-2"),
    ]
    assert len(stored) == 4
    for copy, original in [(outbox_rows[2], outbox_rows[1]), (outbox_rows[5], outbox_rows[4])]:
        assert copy.event_id == original.event_id
        assert (
            bytes(copy.message_value)
            == bytes(original.message_value)
            == bytes(stored[copy.event_id].envelope)
        )
        assert stored[copy.event_id].topic == TOPICS.table
    assert [outbox_rows[2].event_id, outbox_rows[5].event_id] == [ended.event_id, left.event_id]


def test_a_failing_transaction_leaves_neither_events_nor_outbox_messages(
    migrated_engine: Engine, store: EventStore
) -> None:
    with pytest.raises(_CrashError), transaction(create_session_factory(migrated_engine)) as session:
        store.append(session, "table-1", 0, [table_event(), table_event()])
        raise _CrashError
    assert row_counts(migrated_engine) == (0, 0)
    with transaction(create_session_factory(migrated_engine)) as session:
        assert store.stream_version(session, "table-1") == 0


@pytest.mark.integration
def test_two_concurrent_postgresql_writers_never_fork_a_stream(postgresql_engine: Engine) -> None:
    """Real concurrency: the second writer passes its version check before the first commits,
    blocks on the unique key, and loses with a conflict once the first commits."""
    store = EventStore(topics=TOPICS, clock=fixed_clock)
    session_factory = create_session_factory(postgresql_engine)
    first_appended = threading.Event()
    second_checked = threading.Event()
    outcomes: dict[str, object] = {}

    def first_writer() -> None:
        with transaction(session_factory) as session:
            store.append(session, "table-1", 0, [table_event()])
            first_appended.set()
            assert second_checked.wait(timeout=10)
        outcomes["first"] = "committed"

    def second_writer() -> None:
        assert first_appended.wait(timeout=10)
        try:
            with transaction(session_factory) as session:
                assert store.stream_version(session, "table-1") == 0  # The first has not committed.
                second_checked.set()
                store.append(session, "table-1", 0, [table_event()])
            outcomes["second"] = "committed"
        except WrongExpectedVersionError as error:
            outcomes["second"] = (error.expected_version, error.actual_version)

    threads = [threading.Thread(target=first_writer), threading.Thread(target=second_writer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert outcomes == {"first": "committed", "second": (0, 1)}
    assert row_counts(postgresql_engine) == (1, 1)


def test_a_further_sqlite_condition_is_asked_in_the_statement_that_checks_the_versions(
    sqlite_engine: Engine, store: EventStore
) -> None:
    """`append_batch(sqlite_condition=...)` (the table engine's ownership fence): no statement of
    its own (each is a GIL release in the driver); a false one appends nothing, before any version
    conflict is named."""
    session_factory = create_session_factory(sqlite_engine)
    statements: list[str] = []

    def record(_connection: object, _cursor: object, statement: str, *_rest: object) -> None:
        statements.append(statement)

    sqlalchemy.event.listen(sqlite_engine, "before_cursor_execute", record)
    try:
        with transaction(session_factory) as session:
            store.append_batch(session, [("table-1", 0, [table_event()])], sqlite_condition=("(? = 7)", (7,)))
        checks = [statement for statement in statements if statement.startswith("SELECT")]
        assert len(checks) == 1 and checks[0].endswith(", (? = 7)")
        for appends in ([("table-2", 0, [table_event("table-2")])], [("table-1", 0, [table_event()])]):
            with pytest.raises(event_store.ConditionUnmetError), transaction(session_factory) as session:
                store.append_batch(session, appends, savepoint=False, sqlite_condition=("(? = 7)", (8,)))
    finally:
        sqlalchemy.event.remove(sqlite_engine, "before_cursor_execute", record)
    assert row_counts(sqlite_engine) == (1, 1)


def test_append_after_current_without_a_savepoint_appends_after_each_stream_in_the_callers_statements(
    migrated_engine: Engine, store: EventStore
) -> None:
    """`append_after_current(savepoint=False)` (the ledger's and scoring's append): each stream's
    events after its current version, one version query and no SAVEPOINT or RELEASE of its own."""
    session_factory = create_session_factory(migrated_engine)
    with transaction(session_factory) as session:
        store.append(session, "table-1", 0, [table_event(), table_event()])
    statements: list[str] = []

    def record(_connection: object, _cursor: object, statement: str, *_rest: object) -> None:
        statements.append(statement)

    sqlalchemy.event.listen(migrated_engine, "before_cursor_execute", record)
    try:
        with transaction(session_factory) as session:
            store.append_after_current(
                session,
                [("table-1", [table_event()]), ("table-2", [table_event("table-2"), table_event("table-2")])],
                savepoint=False,
            )
    finally:
        sqlalchemy.event.remove(migrated_engine, "before_cursor_execute", record)
    assert not [statement for statement in statements if "SAVEPOINT" in statement.upper()], statements
    selects = [statement for statement in statements if statement.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 1, statements
    with transaction(session_factory) as session:
        assert [event.sequence for event in store.load(session, "table-1")] == [1, 2, 3]
        assert [event.sequence for event in store.load(session, "table-2")] == [1, 2]
    assert row_counts(migrated_engine) == (5, 5)


def test_append_after_current_without_a_savepoint_that_raced_fails_on_the_unique_key_and_writes_nothing(
    migrated_engine: Engine, store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that appended between `append_after_current`'s version read and its insert: the
    stream's unique key refuses the insert (an `IntegrityError`, which the callers retry), and the
    caller's rollback drops what the batch inserted before it."""
    session_factory = create_session_factory(migrated_engine)
    with transaction(session_factory) as session:
        store.append(session, "table-1", 0, [table_event(), table_event()])
    monkeypatch.setattr(
        EventStore, "stream_versions", lambda _self, _session, ids: {i: int(i == "table-1") for i in ids}
    )
    with pytest.raises(IntegrityError), transaction(session_factory) as session:
        store.append_after_current(
            session, [("table-2", [table_event("table-2")]), ("table-1", [table_event()])], savepoint=False
        )
    assert row_counts(migrated_engine) == (2, 2)


def test_stream_versions_reads_every_stream_at_once(migrated_engine: Engine, store: EventStore) -> None:
    session_factory = create_session_factory(migrated_engine)
    with transaction(session_factory) as session:
        store.append(session, "table-1", 0, [table_event(), table_event()])
        store.append(session, "table-3", 0, [table_event("table-3")])
    with transaction(session_factory) as session:
        versions = store.stream_versions(session, ["table-3", "table-2", "table-1", "table-3"])
    assert versions == {"table-1": 2, "table-2": 0, "table-3": 1}
