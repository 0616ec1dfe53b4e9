"""Seats are freed from `mahjong.seats.v1` alone, and a deployment that read the table topic before
applies what it left there, once (`table_topic_backlog`); on the real broker.

The seat rule is unchanged (README "Matchmaking"): a seated player's ticket is finished when the
table's `GameEnded` (every seat) or the seat's `PlayerLeft` is applied, exactly once per event id.
"""

from __future__ import annotations

import pathlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest
import sqlalchemy
from kafka import TopicPartition
from mahjong.v1 import envelope_pb2, table_events_pb2
from mahjong_matchmaking import table_topic_backlog, tickets
from mahjong_matchmaking.__main__ import DEFINITION, SEATS_GROUP, SEATS_KAFKA_GROUP
from mahjong_matchmaking.catalog import load_catalog
from mahjong_matchmaking.models import TICKET_FINISHED, TICKET_SEATED, retired_inputs
from mahjong_matchmaking.models import tickets as tickets_table
from mahjong_matchmaking.projection import releases_a_seat, seat_release_handler
from mahjong_matchmaking.table_topic_backlog import TableTopicBacklog
from mahjong_platform.config import load_settings
from mahjong_platform.database import (
    SessionFactory,
    create_engine_for,
    create_session_factory,
    read_transaction,
    sqlite_url,
    transaction,
)
from mahjong_platform.envelopes import new_envelope, utc_now
from mahjong_platform.event_store import EventStore
from mahjong_platform.schema import consumer_positions, processed_events
from mahjong_platform.service_runtime import ConsumerDefinition, migrate, start_service
from mahjong_platform.testing import FIRST_ASSIGNMENT_SECONDS, poll_until_handled, produce_envelopes
from mahjong_platform.topics import Topics, ensure_topics
from mahjong_platform.tracked_consumer import (
    BatchApplier,
    Delivery,
    Handler,
    MessagePosition,
    TrackedConsumer,
    per_event,
)
from sqlalchemy.engine import Engine

pytestmark = pytest.mark.integration
PARTITIONS = 2
TEST_CONSUMER_OPTIONS = {
    "session_timeout_ms": 6_000,
    "heartbeat_interval_ms": 500,
    "metadata_max_age_ms": 1_000,
}
SECRET = "seat-release-test-secret-0123456789abcdef"


@pytest.fixture
def topics(kafka_bootstrap_servers: str, unique_prefix: str) -> Topics:
    topics = Topics.with_prefix(unique_prefix)
    ensure_topics(kafka_bootstrap_servers, topics.all_names(), partitions=PARTITIONS)
    return topics


@pytest.fixture
def engine(tmp_path: pathlib.Path) -> Iterator[Engine]:
    database_url = sqlite_url(tmp_path, "matchmaking")
    migrate(DEFINITION, database_url)
    engine = create_engine_for(database_url)
    yield engine
    engine.dispose()


def seat_a_table(session_factory: SessionFactory, topics: Topics, name: str) -> str:
    """Four players enqueued in one room: seated at a new table, whose id is returned."""
    room = load_catalog()["sichuan-novice"]
    with transaction(session_factory) as session:
        for seat in range(4):
            _ticket, events = tickets.enqueue(session, EventStore(topics), room, f"{name}-{seat}", utc_now)
    assert events[-1].WhichOneof("payload") == "table_assigned"
    return str(events[-1].stream_id)


def game_ended(table_id: str) -> envelope_pb2.Envelope:
    return new_envelope(table_events_pb2.GameEnded(), stream_id=table_id, sequence=2, clock=utc_now)


def tile_drawn(table_id: str) -> envelope_pb2.Envelope:
    return new_envelope(table_events_pb2.TileDrawn(seat=0), stream_id=table_id, sequence=1, clock=utc_now)


def ticket_states(session_factory: SessionFactory, table_id: str) -> set[str]:
    with read_transaction(session_factory) as session:
        query = sqlalchemy.select(tickets_table.c.state).where(tickets_table.c.table_id == table_id)
        return set(session.execute(query).scalars())


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + FIRST_ASSIGNMENT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {FIRST_ASSIGNMENT_SECONDS} s"
        time.sleep(0.1)


def group_rows(session_factory: SessionFactory, table: sqlalchemy.Table, column: str) -> list[str]:
    with read_transaction(session_factory) as session:
        query = sqlalchemy.select(table.c[column]).where(table.c.consumer_group == SEATS_GROUP)
        return list(session.execute(query).scalars())


def seats_consumer(engine: Engine) -> ConsumerDefinition:
    """The service's seat-release consumer, as `DEFINITION` runs it."""
    (definition,) = DEFINITION.consumers(engine, load_settings({}), Topics())
    return definition


def apply_from(
    engine: Engine,
    bootstrap_servers: str,
    topics: Topics,
    topic: str,
    kafka_group: str,
    *,
    handled: int,
    on_released: Callable[[frozenset[str]], None] | None = None,
    as_the_service: bool = True,
) -> None:
    """A seat-release consumer of `topic` (group `SEATS_GROUP`, joining `kafka_group`) polled until
    it handled `handled` messages, then closed: as the service runs it, or (`as_the_service`
    False) as an older matchmaking did, recording processed ids."""
    consumer = TrackedConsumer(
        engine,
        bootstrap_servers,
        SEATS_GROUP,
        [topic],
        seat_release_handler(on_released=on_released),
        topics.dead_letter,
        wants=releases_a_seat,
        kafka_group_id=kafka_group,
        idempotent_handler=as_the_service and seats_consumer(engine).idempotent_handler,
        **TEST_CONSUMER_OPTIONS,  # type: ignore[arg-type]
    )
    try:
        poll_until_handled(consumer, handled)
    finally:
        consumer.close()


class BacklogThread:
    """`TableTopicBacklog.apply_backlog` of the seats group in a thread of its own, as the service
    runs it (`finished` gets its result)."""

    def __init__(self, engine: Engine, bootstrap_servers: str, topics: Topics, handler: Handler) -> None:
        self.backlog = TableTopicBacklog(
            engine,
            bootstrap_servers,
            topics,
            SEATS_GROUP,
            handler,
            wants=releases_a_seat,
            consumer_options=TEST_CONSUMER_OPTIONS,
        )
        self.stop = threading.Event()
        self.finished: list[bool] = []
        self.worker = threading.Thread(
            target=lambda: self.finished.append(self.backlog.apply_backlog(self.stop))
        )
        self.worker.start()

    def close(self) -> None:
        self.stop.set()
        self.worker.join(FIRST_ASSIGNMENT_SECONDS)
        self.backlog.close()


def test_the_service_frees_seats_from_the_seats_topic_and_reads_no_table_topic(
    tmp_path: pathlib.Path, kafka_bootstrap_servers: str, unique_prefix: str, topics: Topics
) -> None:
    database_url = sqlite_url(tmp_path, "matchmaking")
    settings = load_settings(
        {
            "MAHJONG_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap_servers,
            "MAHJONG_TOPIC_PREFIX": unique_prefix,
            "MAHJONG_TOPIC_PARTITIONS": str(PARTITIONS),
            "MAHJONG_JWT_SECRET": SECRET,
            "MAHJONG_MATCHMAKING_DATABASE_URL": database_url,
        }
    )
    service = start_service(DEFINITION, settings, address="127.0.0.1:0")
    engine = create_engine_for(database_url)
    try:
        session_factory = create_session_factory(engine)
        table_id = seat_a_table(session_factory, topics, "p")
        assert ticket_states(session_factory, table_id) == {TICKET_SEATED}
        # What the table's event store publishes for a game's end: the event on both topics.
        produce_envelopes(kafka_bootstrap_servers, topics.seats, [game_ended(table_id)], client_id="t")
        wait_until(lambda: ticket_states(session_factory, table_id) == {TICKET_FINISHED}, "seats freed")
        # A new deployment has no table-topic backlog: retired at once, and never read.
        wait_until(lambda: group_rows(session_factory, retired_inputs, "topic") == [topics.table], "retired")
        assert set(group_rows(session_factory, consumer_positions, "topic")) == {topics.seats}
    finally:
        service.stop(0)
        engine.dispose()


def test_an_upgraded_deployment_applies_the_releases_left_on_the_table_topic_once_then_retires_it(
    engine: Engine, kafka_bootstrap_servers: str, topics: Topics
) -> None:
    session_factory = create_session_factory(engine)
    released: list[frozenset[str]] = []
    handler = seat_release_handler(on_released=released.append)
    read_before, left_behind, both_topics = (seat_a_table(session_factory, topics, name) for name in "abc")
    # The old consumer (same group, table topic) applied the first game's end and stopped.
    read_before_end = game_ended(read_before)
    produce_envelopes(
        kafka_bootstrap_servers, topics.table, [tile_drawn(read_before), read_before_end], client_id="t"
    )
    apply_from(
        engine, kafka_bootstrap_servers, topics, topics.table, SEATS_GROUP, handled=2, as_the_service=False
    )
    assert ticket_states(session_factory, read_before) == {TICKET_FINISHED}
    # An old table engine then ended a game: on the table topic only, after the stored positions.
    left_behind_end = game_ended(left_behind)
    produce_envelopes(
        kafka_bootstrap_servers, topics.table, [tile_drawn(left_behind), left_behind_end], client_id="t"
    )

    running = BacklogThread(engine, kafka_bootstrap_servers, topics, handler)
    backlog, worker, finished = running.backlog, running.worker, running.finished
    try:
        wait_until(
            lambda: ticket_states(session_factory, left_behind) == {TICKET_FINISHED}, "backlog applied"
        )
        # The seats topic is empty: no table engine of this version writes there yet, so the table
        # topic is still read (an old engine's next release must not be missed).
        assert not backlog.retired() and worker.is_alive()
        # A table engine of this version ends a game: the event on both topics, one event id.
        ended = game_ended(both_topics)
        produce_envelopes(kafka_bootstrap_servers, topics.table, [ended], client_id="t")
        produce_envelopes(kafka_bootstrap_servers, topics.seats, [ended], client_id="t")
        apply_from(
            engine,
            kafka_bootstrap_servers,
            topics,
            topics.seats,
            SEATS_KAFKA_GROUP,
            handled=1,
            on_released=released.append,
        )
        worker.join(FIRST_ASSIGNMENT_SECONDS)
        assert finished == [True]
    finally:
        running.close()
    assert backlog.retired()
    assert ticket_states(session_factory, both_topics) == {TICKET_FINISHED}
    # Each release freed its seats once, though one was read on both topics (the second to apply
    # it found them free: the handler is idempotent, and only the old consumer kept processed ids).
    assert sorted(released) == sorted([frozenset({left_behind}), frozenset({both_topics})])
    applied = group_rows(session_factory, processed_events, "event_id")
    assert applied == [read_before_end.event_id]
    # Retired: a restart reads the table topic no more.
    again = TableTopicBacklog(engine, kafka_bootstrap_servers, topics, SEATS_GROUP, handler)
    assert again.apply_backlog(threading.Event()) is True
    assert again.stalled_seconds() == 0.0  # no consumer was made
    again.close()


def test_a_backlog_that_holds_no_release_is_applied_and_the_table_topic_retired(
    engine: Engine, kafka_bootstrap_servers: str, topics: Topics
) -> None:
    """After the old consumer's last stored position, the table topic holds only events that free
    no seat (games still being played): nothing to apply, but every poll stores its positions, so
    the backlog is seen applied up to the end offsets and the table topic retired. (Positions were
    stored only with a wanted event, so such a partition never reached its end offset.)"""
    session_factory = create_session_factory(engine)
    read_before_end = game_ended(seat_a_table(session_factory, topics, "a"))
    produce_envelopes(kafka_bootstrap_servers, topics.table, [read_before_end], client_id="t")
    apply_from(
        engine, kafka_bootstrap_servers, topics, topics.table, SEATS_GROUP, handled=1, as_the_service=False
    )
    playing = [tile_drawn(str(uuid.uuid4())) for _ in range(4 * PARTITIONS)]  # on every partition
    produce_envelopes(kafka_bootstrap_servers, topics.table, playing, client_id="t")
    # A table engine of this version wrote to the seats topic (the backlog's end offsets are taken then).
    produce_envelopes(kafka_bootstrap_servers, topics.seats, [game_ended(str(uuid.uuid4()))], client_id="t")
    running = BacklogThread(engine, kafka_bootstrap_servers, topics, seat_release_handler())
    try:
        running.worker.join(FIRST_ASSIGNMENT_SECONDS)
        assert running.finished == [True], "the table topic was not retired"
    finally:
        running.close()
    assert running.backlog.retired()
    assert group_rows(session_factory, processed_events, "event_id") == [read_before_end.event_id]


def backends_waiting_for_a_lock(engine: Engine) -> int:
    with engine.connect() as connection:
        query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        return int(connection.exec_driver_sql(query).scalar_one())


def test_the_seats_and_backlog_consumers_applying_one_release_at_once_on_postgresql_both_commit(
    postgres_database_url: str,
) -> None:
    """While the table topic is not retired, the seats topic's consumer and the backlog's (one
    group) can apply one release at the same time. The second waits for the first's locks on the
    seats, then finds them free: it commits, frees nothing and notifies nothing. (With processed
    ids, both checked them before either committed, and the second failed on the processed id's
    key, outside the handler's error handling: its consumer restarted.)"""
    migrate(DEFINITION, postgres_database_url)
    engine = create_engine_for(postgres_database_url)
    try:
        session_factory = create_session_factory(engine)
        table_id = seat_a_table(session_factory, Topics(), "race")
        ended = game_ended(table_id)
        released: list[frozenset[str]] = []
        handler = seat_release_handler(on_released=released.append)
        failures: list[str] = []
        first_holds_its_locks = threading.Event()
        first_may_commit = threading.Event()

        def hold(position: MessagePosition) -> None:
            first_holds_its_locks.set()
            assert first_may_commit.wait(FIRST_ASSIGNMENT_SECONDS)

        seats = BatchApplier(  # as the service's seats consumer applies a batch
            session_factory,
            SEATS_GROUP,
            per_event(handler),
            lambda delivery, error: failures.append(error),
            before_commit=hold,
            idempotent_handler=seats_consumer(engine).idempotent_handler,
        )
        backlog = BatchApplier(  # as `TableTopicBacklog` makes its consumer's
            session_factory,
            SEATS_GROUP,
            table_topic_backlog.wanted_only(handler, releases_a_seat),
            lambda delivery, error: failures.append(error),
            idempotent_handler=True,
        )
        outcomes: dict[str, BaseException | None] = {}

        def apply(name: str, applier: BatchApplier, topic: str) -> None:
            position = MessagePosition(topic, 0, 7)
            try:
                applier.apply([Delivery(ended, position)], [position])
                outcomes[name] = None
            except BaseException as error:  # reported by the test
                outcomes[name] = error

        first = threading.Thread(target=apply, args=("seats", seats, "seats"))
        first.start()
        assert first_holds_its_locks.wait(FIRST_ASSIGNMENT_SECONDS)
        second = threading.Thread(target=apply, args=("backlog", backlog, "table"))
        second.start()
        wait_until(lambda: backends_waiting_for_a_lock(engine) == 1, "the second waits for the seats")
        first_may_commit.set()
        first.join(FIRST_ASSIGNMENT_SECONDS)
        second.join(FIRST_ASSIGNMENT_SECONDS)
        assert outcomes == {"seats": None, "backlog": None} and failures == []
        assert released == [frozenset({table_id})]
        assert ticket_states(session_factory, table_id) == {TICKET_FINISHED}
        with read_transaction(session_factory) as session:
            stored = session.execute(
                sqlalchemy.select(consumer_positions.c.topic, consumer_positions.c.next_offset).where(
                    consumer_positions.c.consumer_group == SEATS_GROUP
                )
            ).all()
        assert sorted(stored) == [("seats", 8), ("table", 8)]
    finally:
        engine.dispose()


def test_a_deployment_that_never_read_the_table_topic_retires_it_without_reading(engine: Engine) -> None:
    backlog = TableTopicBacklog(engine, "127.0.0.1:1", Topics(), SEATS_GROUP, seat_release_handler())
    assert not backlog.retired()
    assert backlog.apply_backlog(threading.Event()) is True  # no broker was asked: none is there
    assert backlog.retired()
    backlog.close()


class FakeTableConsumer:
    """Stands in for the backlog's `TrackedConsumer` of the table topic: each poll runs `on_poll`;
    its stall report is what a consumer left unpolled would give a second later."""

    on_poll: ClassVar[Callable[[], None]] = staticmethod(lambda: None)
    made: ClassVar[list[FakeTableConsumer]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.closed = False
        FakeTableConsumer.made.append(self)

    def poll_once(self, timeout_ms: int) -> None:
        assert not self.closed, "polled after close"
        FakeTableConsumer.on_poll()

    def stalled_seconds(self) -> float:
        return 1.0

    def close(self) -> None:
        self.closed = True


class FakeOffsets:
    """Stands in for the offsets client: one partition per topic, one message on each (so the seats
    topic is written to, and the table topic ends at offset 1)."""

    made: ClassVar[list[FakeOffsets]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.closed = False
        FakeOffsets.made.append(self)

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0}

    def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(partitions, 0)

    def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(partitions, 1)

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("retired_by", ["this process", "another process"])
def test_once_the_table_topic_is_retired_its_consumer_is_closed_and_reports_no_stall(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, retired_by: str
) -> None:
    """After `apply_backlog` returns True, `run_forever` only waits for the stop: the table topic's
    consumer must leave its Kafka group and the supervisor must not see a stall growing (it would
    replace the worker after WORKER_STALL_SECONDS, logging an ERROR)."""
    monkeypatch.setattr(table_topic_backlog, "TrackedConsumer", FakeTableConsumer)
    monkeypatch.setattr(table_topic_backlog, "reading_consumer", FakeOffsets)
    monkeypatch.setattr(FakeTableConsumer, "made", [])
    monkeypatch.setattr(FakeOffsets, "made", [])
    topics = Topics()
    session_factory = create_session_factory(engine)
    # The old consumer stored a position on the table topic: at its end (1) if this process is to
    # find the backlog applied, before it (0) if another process is the one that retires it.
    with transaction(session_factory) as session:
        session.execute(
            consumer_positions.insert().values(
                consumer_group=SEATS_GROUP,
                topic=topics.table,
                partition=0,
                next_offset=1 if retired_by == "this process" else 0,
                updated_at=utc_now(),
            )
        )

    def another_process_retires_it() -> None:
        with transaction(session_factory) as session:
            session.execute(
                retired_inputs.insert().values(
                    consumer_group=SEATS_GROUP, topic=topics.table, retired_at=utc_now()
                )
            )

    if retired_by == "another process":
        monkeypatch.setattr(FakeTableConsumer, "on_poll", staticmethod(another_process_retires_it))
    backlog = TableTopicBacklog(engine, "127.0.0.1:1", topics, SEATS_GROUP, seat_release_handler())
    assert backlog.apply_backlog(threading.Event()) is True
    assert backlog.retired()
    (consumer,) = FakeTableConsumer.made
    (offsets,) = FakeOffsets.made
    assert consumer.closed and offsets.closed
    assert backlog.stalled_seconds() == 0.0
    backlog.close()  # the supervisor's close after the stop: nothing left to close
