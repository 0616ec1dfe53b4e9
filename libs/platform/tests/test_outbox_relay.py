"""The outbox relay against the real Kafka broker, with a tracked consumer reading what it sends.

Each test gets its own prefixed topics on the shared broker (see the `kafka_topics` fixture).
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Sequence

import pytest
import sqlalchemy
from kafka.errors import KafkaTimeoutError
from mahjong.v1 import envelope_pb2, table_events_pb2
from mahjong_platform import outbox
from mahjong_platform.database import create_session_factory, transaction
from mahjong_platform.envelopes import new_envelope, utc_now
from mahjong_platform.event_store import EventStore
from mahjong_platform.metrics import metrics_for_engine
from mahjong_platform.outbox import OutboxMessage, OutboxRelay, count_unsent_outbox_messages
from mahjong_platform.schema import consumer_positions, outbox_messages
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import TrackedConsumer
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

pytestmark = pytest.mark.integration

PUBLISH_TIMEOUT_MS = 10_000


class _RelayKilledError(Exception):
    pass


def table_events(count: int) -> list[envelope_pb2.Envelope]:
    return [
        new_envelope(table_events_pb2.TileDiscarded(seat=index % 4, tile=f"{index % 9 + 1}B"), clock=utc_now)
        for index in range(count)
    ]


def append_events(engine: Engine, topics: Topics, events_per_stream: dict[str, int]) -> list[str]:
    """Append events to several streams in one transaction; return the event ids in outbox order."""
    store = EventStore(topics=topics)
    event_ids = []
    with transaction(create_session_factory(engine)) as session:
        for stream_id, count in events_per_stream.items():
            events = table_events(count)
            store.append(session, stream_id, store.stream_version(session, stream_id), events)
            event_ids += [event.event_id for event in events]
    return event_ids


def append_without_savepoint(engine: Engine, topics: Topics, events_per_stream: dict[str, int]) -> list[str]:
    """`append_events` as a group commit appends (`append_batch` without a savepoint): outbox rows
    written outside any savepoint, which its commit hands to this process's relay (SQLite)."""
    store = EventStore(topics=topics)
    event_ids = []
    with transaction(create_session_factory(engine)) as session:
        versions = store.stream_versions(session, list(events_per_stream))
        appends = []
        for stream_id, count in events_per_stream.items():
            events = table_events(count)
            appends.append((stream_id, versions[stream_id], events))
            event_ids += [event.event_id for event in events]
        store.append_batch(session, appends, savepoint=False)
    return event_ids


def unsent_count(engine: Engine) -> int:
    with transaction(create_session_factory(engine)) as session:
        return count_unsent_outbox_messages(session)


def test_appended_events_are_consumed_exactly_once_into_the_projection(
    migrated_engine: Engine,
    kafka_bootstrap_servers: str,
    kafka_topics: Topics,
    unique_prefix: str,
    new_tracked_consumer: Callable[..., TrackedConsumer],
    poll_consumer_until: Callable[..., None],
    read_projection_event_ids: Callable[[Engine], list[str]],
    example_projection: sqlalchemy.Table,
) -> None:
    event_ids = append_events(migrated_engine, kafka_topics, {"table-1": 12, "table-2": 8, "table-3": 5})
    with OutboxRelay(
        migrated_engine, kafka_bootstrap_servers, batch_size=10, publish_timeout_ms=PUBLISH_TIMEOUT_MS
    ) as relay:
        published_counts = [relay.run_once() for _ in range(4)]
    assert published_counts == [10, 10, 5, 0]
    assert unsent_count(migrated_engine) == 0

    consumer = new_tracked_consumer(migrated_engine, group_id=unique_prefix + "projection")
    poll_consumer_until(consumer, lambda: len(read_projection_event_ids(migrated_engine)) >= len(event_ids))
    consumer.poll_once(timeout_ms=300)  # Nothing more may arrive.
    assert sorted(read_projection_event_ids(migrated_engine)) == sorted(event_ids)
    # Keyed by stream id: each stream sits in one partition, in sequence order.
    with migrated_engine.connect() as connection:
        rows = connection.execute(
            sqlalchemy.select(example_projection).order_by(example_projection.c.kafka_offset)
        ).all()
    for stream_id in ("table-1", "table-2", "table-3"):
        stream_rows = [row for row in rows if row.stream_id == stream_id]
        assert len({row.partition for row in stream_rows}) == 1
        assert [row.sequence for row in stream_rows] == list(range(1, len(stream_rows) + 1))


def test_a_relay_killed_between_publish_and_mark_sent_re_sends_and_duplicates_change_nothing(
    sqlite_engine: Engine,
    kafka_bootstrap_servers: str,
    kafka_topics: Topics,
    unique_prefix: str,
    new_tracked_consumer: Callable[..., TrackedConsumer],
    poll_consumer_until: Callable[..., None],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    event_ids = append_events(sqlite_engine, kafka_topics, {"table-1": 6, "table-2": 4})
    published_before_kill: list[OutboxMessage] = []

    def kill_after_publish(messages: Sequence[OutboxMessage]) -> None:
        published_before_kill.extend(messages)
        raise _RelayKilledError

    with (
        OutboxRelay(
            sqlite_engine,
            kafka_bootstrap_servers,
            publish_timeout_ms=PUBLISH_TIMEOUT_MS,
            before_mark_sent=kill_after_publish,
        ) as doomed_relay,
        pytest.raises(_RelayKilledError),
    ):
        doomed_relay.run_once()
    assert len(published_before_kill) == 10
    assert unsent_count(sqlite_engine) == 10  # Published, but not marked: the restart re-sends.

    with OutboxRelay(sqlite_engine, kafka_bootstrap_servers, publish_timeout_ms=PUBLISH_TIMEOUT_MS) as relay:
        assert relay.run_once() == 10
    assert unsent_count(sqlite_engine) == 0

    consumer = new_tracked_consumer(sqlite_engine, group_id=unique_prefix + "projection")
    # Every event is on the topic twice: wait until all 20 messages were read, then check once.
    poll_consumer_until(consumer, lambda: _stored_offsets_total(sqlite_engine) >= 20)
    assert sorted(read_projection_event_ids(sqlite_engine)) == sorted(event_ids)


def test_a_sqlite_relay_marks_the_rounds_of_its_mark_interval_at_once(
    sqlite_engine: Engine,
    kafka_bootstrap_servers: str,
    kafka_topics: Topics,
    unique_prefix: str,
    new_tracked_consumer: Callable[..., TrackedConsumer],
    poll_consumer_until: Callable[..., None],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    """`run_forever`'s rounds publish at once but mark sent at most every SQLITE_MARK_SENT_SECONDS
    (`mark_within_seconds`): meanwhile a round reads the unsent rows after the ones it published,
    so nothing goes twice, and the mark covers every round since the last one; closing marks
    what is left."""
    event_ids = append_events(sqlite_engine, kafka_topics, {"table-1": 6})
    registry = metrics_for_engine(sqlite_engine).registry

    def rounds() -> float | None:
        return registry.get_sample_value("mahjong_outbox_rounds_total")

    with OutboxRelay(
        sqlite_engine, kafka_bootstrap_servers, batch_size=4, publish_timeout_ms=PUBLISH_TIMEOUT_MS
    ) as relay:
        before = rounds() or 0.0
        assert relay.run_once(mark_within_seconds=3600) == 4
        assert relay.run_once(mark_within_seconds=3600) == 2  # the rows after those, not them again
        assert relay.run_once(mark_within_seconds=3600) == 0
        assert rounds() == before + 2  # the round that found nothing sent nothing
        assert unsent_count(sqlite_engine) == 6  # published, not marked yet
        event_ids += append_events(sqlite_engine, kafka_topics, {"table-2": 1})
        assert relay.run_once() == 1  # a mark due now covers every round since the last one
        assert unsent_count(sqlite_engine) == 0
        event_ids += append_events(sqlite_engine, kafka_topics, {"table-3": 2})
        assert relay.run_once(mark_within_seconds=3600) == 2
    assert unsent_count(sqlite_engine) == 0  # closing marks what it published

    consumer = new_tracked_consumer(sqlite_engine, group_id=unique_prefix + "projection")
    _each_consumed_once(sqlite_engine, consumer, poll_consumer_until, 9)
    assert sorted(read_projection_event_ids(sqlite_engine)) == sorted(event_ids)


def test_a_sqlite_relays_due_mark_rides_on_the_next_transaction_that_queues_outbox_rows(
    sqlite_engine: Engine,
    kafka_bootstrap_servers: str,
    kafka_topics: Topics,
    unique_prefix: str,
    new_tracked_consumer: Callable[..., TrackedConsumer],
    poll_consumer_until: Callable[..., None],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    """A due mark is offered to this process's writers: the next transaction that queues outbox
    messages marks the rows in its own commit (the relay takes no write lock for it); one that
    rolls back leaves it offered; one nobody takes within the interval the relay marks itself."""
    within = 0.05
    event_ids = append_events(sqlite_engine, kafka_topics, {"table-1": 3})
    with OutboxRelay(sqlite_engine, kafka_bootstrap_servers, publish_timeout_ms=PUBLISH_TIMEOUT_MS) as relay:
        assert relay.run_once(mark_within_seconds=within) == 3
        time.sleep(within)
        assert relay.run_once(mark_within_seconds=within) == 0  # due: offered, not marked
        assert unsent_count(sqlite_engine) == 3
        with pytest.raises(_RelayKilledError), transaction(create_session_factory(sqlite_engine)) as session:
            EventStore(topics=kafka_topics).append(session, "table-9", 0, table_events(1))
            raise _RelayKilledError  # a writer that rolls back carries nothing
        assert unsent_count(sqlite_engine) == 3
        event_ids += append_events(sqlite_engine, kafka_topics, {"table-2": 2})
        assert unsent_count(sqlite_engine) == 2  # the offered three marked in that commit
        assert relay.run_once(mark_within_seconds=within) == 2
        time.sleep(within)
        assert relay.run_once(mark_within_seconds=within) == 0  # offered
        time.sleep(within)
        assert relay.run_once(mark_within_seconds=within) == 0  # nobody took it: marked by the relay
        assert unsent_count(sqlite_engine) == 0
    consumer = new_tracked_consumer(sqlite_engine, group_id=unique_prefix + "projection")
    _each_consumed_once(sqlite_engine, consumer, poll_consumer_until, 5)
    assert sorted(read_projection_event_ids(sqlite_engine)) == sorted(event_ids)


def test_a_sqlite_relay_publishes_the_rows_this_process_committed_without_reading_them_back(
    sqlite_engine: Engine,
    kafka_bootstrap_servers: str,
    kafka_topics: Topics,
    unique_prefix: str,
    new_tracked_consumer: Callable[..., TrackedConsumer],
    poll_consumer_until: Callable[..., None],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    """A committed transaction hands its outbox rows and their ids to the relay (`_Feed`): a round
    that continues after the last id published sends them with no statement at all. Rows it was
    not given (a savepoint's, the first round's) are read from the outbox, in id order; a
    transaction that rolls back gives nothing (the next one's rows take its ids)."""
    statements: list[str] = []

    def record(_connection: object, _cursor: object, statement: str, *_rest: object) -> None:
        statements.append(statement)

    with OutboxRelay(
        sqlite_engine, kafka_bootstrap_servers, batch_size=4, publish_timeout_ms=PUBLISH_TIMEOUT_MS
    ) as relay:
        event_ids = append_without_savepoint(sqlite_engine, kafka_topics, {"table-1": 3})
        assert relay.run_once(mark_within_seconds=3600) == 3  # no id published yet: read
        assert (relay.rounds_read, relay.rounds_fed) == (1, 0)
        event_ids += append_without_savepoint(sqlite_engine, kafka_topics, {"table-1": 2, "table-2": 4})
        sqlalchemy.event.listen(sqlite_engine, "before_cursor_execute", record)
        try:
            assert relay.run_once(mark_within_seconds=3600) == 4  # a batch at most
            assert relay.run_once(mark_within_seconds=3600) == 2
        finally:
            sqlalchemy.event.remove(sqlite_engine, "before_cursor_execute", record)
        assert (relay.rounds_read, relay.rounds_fed, statements) == (1, 2, [])
        event_ids += append_events(sqlite_engine, kafka_topics, {"table-3": 2})  # in a savepoint
        event_ids += append_without_savepoint(sqlite_engine, kafka_topics, {"table-1": 1})
        assert relay.run_once(mark_within_seconds=3600) == 3  # a gap: read, the savepoint's first
        assert (relay.rounds_read, relay.rounds_fed) == (2, 2)
        with pytest.raises(_RelayKilledError), transaction(create_session_factory(sqlite_engine)) as session:
            EventStore(topics=kafka_topics).append_batch(
                session, [("table-4", 0, table_events(2))], savepoint=False
            )
            raise _RelayKilledError
        event_ids += append_without_savepoint(sqlite_engine, kafka_topics, {"table-5": 1})
        assert relay.run_once(mark_within_seconds=3600) == 1
        assert (relay.rounds_read, relay.rounds_fed) == (2, 3)
        assert relay.run_once(mark_within_seconds=3600) == 0  # nothing handed over: read
        assert unsent_count(sqlite_engine) == len(event_ids) == 13  # published, not marked yet
    assert unsent_count(sqlite_engine) == 0  # closing marks them

    consumer = new_tracked_consumer(sqlite_engine, group_id=unique_prefix + "projection")
    _each_consumed_once(sqlite_engine, consumer, poll_consumer_until, len(event_ids))
    assert sorted(read_projection_event_ids(sqlite_engine)) == sorted(event_ids)
    _each_stream_in_order(sqlite_engine)


def test_a_sqlite_relay_killed_after_publishing_handed_over_rows_re_sends_them(
    sqlite_engine: Engine,
    kafka_bootstrap_servers: str,
    kafka_topics: Topics,
    unique_prefix: str,
    new_tracked_consumer: Callable[..., TrackedConsumer],
    poll_consumer_until: Callable[..., None],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    """Rows published from the feed are marked as read ones are: a relay killed before the mark
    leaves them unsent, the next relay reads and re-sends them, and the consumer skips them."""
    publishes: list[int] = []

    def kill_at_the_second_publish(messages: Sequence[OutboxMessage]) -> None:
        publishes.append(len(messages))
        if len(publishes) == 2:
            raise _RelayKilledError

    with OutboxRelay(
        sqlite_engine,
        kafka_bootstrap_servers,
        publish_timeout_ms=PUBLISH_TIMEOUT_MS,
        before_mark_sent=kill_at_the_second_publish,
    ) as doomed_relay:
        event_ids = append_without_savepoint(sqlite_engine, kafka_topics, {"table-1": 2})
        assert doomed_relay.run_once() == 2  # read, published, marked
        event_ids += append_without_savepoint(sqlite_engine, kafka_topics, {"table-1": 3, "table-2": 1})
        with pytest.raises(_RelayKilledError):
            doomed_relay.run_once()
        assert (doomed_relay.rounds_read, doomed_relay.rounds_fed, publishes) == (1, 1, [2, 4])
    assert unsent_count(sqlite_engine) == 4  # published, not marked: the next relay re-sends them

    with OutboxRelay(sqlite_engine, kafka_bootstrap_servers, publish_timeout_ms=PUBLISH_TIMEOUT_MS) as relay:
        assert relay.run_once() == 4
    assert unsent_count(sqlite_engine) == 0
    consumer = new_tracked_consumer(sqlite_engine, group_id=unique_prefix + "projection")
    _each_consumed_once(sqlite_engine, consumer, poll_consumer_until, 2 + 4 + 4)
    assert sorted(read_projection_event_ids(sqlite_engine)) == sorted(event_ids)
    _each_stream_in_order(sqlite_engine)


def _each_stream_in_order(engine: Engine) -> None:
    """Each stream's projected events are in one partition, in sequence order (first sightings)."""
    with engine.connect() as connection:
        rows = (
            connection.execute(sqlalchemy.text("SELECT * FROM example_projection ORDER BY kafka_offset"))
            .mappings()
            .all()
        )
    for stream_id in {row["stream_id"] for row in rows}:
        stream_rows = [row for row in rows if row["stream_id"] == stream_id]
        assert len({row["partition"] for row in stream_rows}) == 1
        assert [row["sequence"] for row in stream_rows] == list(range(1, len(stream_rows) + 1))


def _outbox_sent_at(engine: Engine) -> list[datetime.datetime | None]:
    with engine.connect() as connection:
        return [
            row.sent_at
            for row in connection.execute(
                sqlalchemy.select(outbox_messages.c.sent_at).order_by(outbox_messages.c.id)
            )
        ]


def _aware(moment: datetime.datetime) -> datetime.datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)


def test_a_writer_carrying_a_sqlite_relays_mark_stamps_it_with_the_relays_clock(
    sqlite_engine: Engine, kafka_bootstrap_servers: str, kafka_topics: Topics
) -> None:
    """The offered mark's `sent_at` is the relay's injected clock's, as the relay's own mark is
    (the carrier stamped `utc_now()`)."""
    within = 0.05
    moment = datetime.datetime(2031, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    append_events(sqlite_engine, kafka_topics, {"table-1": 2})
    with OutboxRelay(
        sqlite_engine, kafka_bootstrap_servers, publish_timeout_ms=PUBLISH_TIMEOUT_MS, clock=lambda: moment
    ) as relay:
        assert relay.run_once(mark_within_seconds=within) == 2
        time.sleep(within)
        assert relay.run_once(mark_within_seconds=within) == 0  # due: offered
        append_events(sqlite_engine, kafka_topics, {"table-2": 1})  # carries the mark
        sent_at = _outbox_sent_at(sqlite_engine)
        assert [value is not None and _aware(value) for value in sent_at] == [moment, moment, False]


def test_a_new_sqlite_relay_withdraws_the_offer_a_closed_relay_left_to_a_writer(
    sqlite_engine: Engine,
    kafka_bootstrap_servers: str,
    kafka_topics: Topics,
    unique_prefix: str,
    new_tracked_consumer: Callable[..., TrackedConsumer],
    poll_consumer_until: Callable[..., None],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    """A relay closed while a writer holds its offered mark leaves the offer behind: the writer
    rolls back, and the offer is offered again with no relay to settle it. The next relay of the
    engine withdraws it; its own marks count the rows another writer still carrying an old
    offer marked first (at most the rows it published, not exactly them)."""
    within = 0.05
    session_factory = create_session_factory(sqlite_engine)
    event_ids = append_events(sqlite_engine, kafka_topics, {"table-1": 3})
    first = OutboxRelay(sqlite_engine, kafka_bootstrap_servers, publish_timeout_ms=PUBLISH_TIMEOUT_MS)
    assert first.run_once(mark_within_seconds=within) == 3
    time.sleep(within)
    assert first.run_once(mark_within_seconds=within) == 0  # due: offered
    with pytest.raises(_RelayKilledError), transaction(session_factory) as session:
        event_ids += [event.event_id for event in _append_one(session, kafka_topics, "table-2")]
        outbox._mark_an_offered_mark(session)  # the writer takes the offer (its commit would mark)
        first.close()  # cannot settle a taken offer
        raise _RelayKilledError  # the writer rolls back: the offer is offered again, ownerless
    event_ids = event_ids[:3]
    assert outbox._OFFERS.get(sqlite_engine) is not None
    with OutboxRelay(sqlite_engine, kafka_bootstrap_servers, publish_timeout_ms=PUBLISH_TIMEOUT_MS) as second:
        assert outbox._OFFERS.get(sqlite_engine) is None  # withdrawn
        assert second.run_once(mark_within_seconds=within) == 3  # unmarked: published again
        time.sleep(within)
        assert second.run_once(mark_within_seconds=within) == 0  # its own offer
        with transaction(session_factory) as session:
            event_ids += [event.event_id for event in _append_one(session, kafka_topics, "table-3")]
            outbox._mark_an_offered_mark(session)  # a writer takes it, and before its commit ...
            third = OutboxRelay(sqlite_engine, kafka_bootstrap_servers, publish_timeout_ms=PUBLISH_TIMEOUT_MS)
            assert third.run_once(mark_within_seconds=3600) == 3  # ... a new relay publishes them
        try:
            # The writer's commit marked the three; the new relay's mark covers them and the
            # writer's own row, of which only that one was still unsent.
            assert third.run_once() == 1
        finally:
            third.close()
    assert unsent_count(sqlite_engine) == 0
    consumer = new_tracked_consumer(sqlite_engine, group_id=unique_prefix + "projection")
    poll_consumer_until(consumer, lambda: _stored_offsets_total(sqlite_engine) >= 10)
    assert sorted(read_projection_event_ids(sqlite_engine)) == sorted(event_ids)


def _append_one(session: Session, topics: Topics, stream_id: str) -> list[envelope_pb2.Envelope]:
    events = table_events(1)
    EventStore(topics=topics).append(session, stream_id, 0, events)
    return events


def test_run_forever_spaces_the_rounds_that_publish(
    sqlite_engine: Engine, kafka_bootstrap_servers: str, kafka_topics: Topics
) -> None:
    """After a round that published, the next one waits for `round_interval_ms` from its start
    even when commits wake the relay sooner: commits made meanwhile go in one round."""
    published: list[tuple[float, int]] = []
    stop_event = threading.Event()
    relay = OutboxRelay(sqlite_engine, kafka_bootstrap_servers, publish_timeout_ms=PUBLISH_TIMEOUT_MS)
    relay.run_once()  # connect to the broker before timing anything
    original = relay.run_once

    def counted(mark_within_seconds: float = 0.0) -> int:
        started = time.monotonic()  # the spacing counts from a round's start
        count = original(mark_within_seconds)
        if count:
            published.append((started, count))
        return count

    relay.run_once = counted  # type: ignore[method-assign]
    thread = threading.Thread(target=relay.run_forever, args=(stop_event, 3_600_000, 2_000))
    thread.start()
    try:
        append_events(sqlite_engine, kafka_topics, {"table-1": 1})
        started = time.monotonic()
        while not published and time.monotonic() - started < 60:
            time.sleep(0.005)
        for stream in range(5):  # each its own commit, each waking the relay
            append_events(sqlite_engine, kafka_topics, {f"table-{stream + 2}": 1})
        while sum(count for _, count in published) < 6 and time.monotonic() - started < 60:
            time.sleep(0.005)
    finally:
        stop_event.set()
        thread.join(timeout=60)
        relay.close()
    assert not thread.is_alive()
    assert [count for _, count in published] == [1, 5]
    assert published[1][0] - published[0][0] >= 1.9


def _each_consumed_once(
    engine: Engine, consumer: TrackedConsumer, poll_consumer_until: Callable[..., None], count: int
) -> None:
    """The consumer finishes `count` messages and no more arrive: each one is on the topic once."""
    poll_consumer_until(consumer, lambda: _stored_offsets_total(engine) >= count)
    consumer.poll_once(timeout_ms=300)
    assert _stored_offsets_total(engine) == count


def _stored_offsets_total(engine: Engine) -> int:
    """How many messages consumers have finished, summed over partitions (offsets start at 0)."""
    total = sqlalchemy.func.coalesce(sqlalchemy.func.sum(consumer_positions.c.next_offset), 0)
    with engine.connect() as connection:
        return int(connection.execute(sqlalchemy.select(total)).scalar_one())


def test_two_postgresql_relays_never_send_the_same_rows_concurrently(
    postgresql_engine: Engine,
    kafka_bootstrap_servers: str,
    kafka_topics: Topics,
    unique_prefix: str,
    new_tracked_consumer: Callable[..., TrackedConsumer],
    poll_consumer_until: Callable[..., None],
) -> None:
    """The first relay holds the relay lock while it publishes and after; the second (another
    replica) publishes nothing until the first has closed, so each stream stays in order on Kafka."""
    append_events(postgresql_engine, kafka_topics, {"table-1": 5})
    first_published = threading.Event()
    second_finished = threading.Event()

    def hold_until_second_finished(_messages: Sequence[OutboxMessage]) -> None:
        first_published.set()
        assert second_finished.wait(timeout=20)

    first_relay = OutboxRelay(
        postgresql_engine,
        kafka_bootstrap_servers,
        publish_timeout_ms=PUBLISH_TIMEOUT_MS,
        before_mark_sent=hold_until_second_finished,
    )
    second_relay = OutboxRelay(
        postgresql_engine, kafka_bootstrap_servers, publish_timeout_ms=PUBLISH_TIMEOUT_MS
    )
    first_counts: list[int] = []
    first_thread = threading.Thread(target=lambda: first_counts.append(first_relay.run_once()))
    try:
        first_thread.start()
        assert first_published.wait(timeout=20)
        # Rows committed meanwhile are unsent, but the second relay waits its turn: publishing
        # them now could put them on Kafka ahead of the first relay's batch.
        append_events(postgresql_engine, kafka_topics, {"table-2": 3})
        assert second_relay.run_once() == 0
        second_finished.set()
        first_thread.join(timeout=20)
        assert second_relay.run_once() == 0  # between the first relay's rounds too
        first_relay.close()
        assert second_relay.run_once() == 3
    finally:
        second_finished.set()
        first_relay.close()
        second_relay.close()
    assert first_counts == [5]
    assert unsent_count(postgresql_engine) == 0

    consumer = new_tracked_consumer(postgresql_engine, group_id=unique_prefix + "projection")
    _each_consumed_once(postgresql_engine, consumer, poll_consumer_until, 8)


def test_a_postgresql_relay_killed_before_marking_hands_over_to_the_next_one(
    postgresql_engine: Engine, kafka_bootstrap_servers: str, kafka_topics: Topics
) -> None:
    """A relay that dies between publishing and marking ends its session, and with it the lock: the
    next relay (a restart, another replica) publishes the whole batch again and marks it."""
    append_events(postgresql_engine, kafka_topics, {"table-1": 4})

    def kill_after_publish(_messages: Sequence[OutboxMessage]) -> None:
        raise _RelayKilledError

    with (
        OutboxRelay(
            postgresql_engine,
            kafka_bootstrap_servers,
            publish_timeout_ms=PUBLISH_TIMEOUT_MS,
            before_mark_sent=kill_after_publish,
        ) as doomed_relay,
        pytest.raises(_RelayKilledError),
    ):
        doomed_relay.run_once()
    assert unsent_count(postgresql_engine) == 4
    with OutboxRelay(
        postgresql_engine, kafka_bootstrap_servers, publish_timeout_ms=PUBLISH_TIMEOUT_MS
    ) as relay:
        assert relay.run_once() == 4
    assert unsent_count(postgresql_engine) == 0


def test_a_postgresql_relay_that_cannot_publish_lets_another_replica_publish(
    postgresql_engine: Engine, kafka_bootstrap_servers: str, kafka_topics: Topics
) -> None:
    """A Kafka failure releases the relay lock for the retry pause (an hour here), so a replica
    that can reach Kafka is not held up by one that cannot."""
    append_events(postgresql_engine, kafka_topics, {"table-1": 3})
    failed = threading.Event()

    def fail_to_publish(_messages: Sequence[OutboxMessage]) -> None:
        failed.set()
        raise KafkaTimeoutError("the broker did not acknowledge")

    stop_event = threading.Event()
    failing_relay = OutboxRelay(
        postgresql_engine,
        kafka_bootstrap_servers,
        publish_timeout_ms=PUBLISH_TIMEOUT_MS,
        before_mark_sent=fail_to_publish,
    )
    thread = threading.Thread(target=failing_relay.run_forever, args=(stop_event, 3_600_000))
    other_relay = OutboxRelay(
        postgresql_engine, kafka_bootstrap_servers, publish_timeout_ms=PUBLISH_TIMEOUT_MS
    )
    try:
        thread.start()
        assert failed.wait(timeout=60)
        published: list[int] = []
        for _attempt in range(600):  # the failing relay releases the lock right after its error
            published.append(other_relay.run_once())
            if published[-1]:
                break
            time.sleep(0.05)
        assert sum(published) == 3
    finally:
        stop_event.set()
        thread.join(timeout=60)
        failing_relay.close()
        other_relay.close()
    assert not thread.is_alive()
    assert unsent_count(postgresql_engine) == 0


def test_a_postgresql_relay_round_is_two_statements_outside_any_transaction(
    postgresql_engine: Engine, kafka_bootstrap_servers: str, kafka_topics: Topics
) -> None:
    """Once it holds the lock, a round reads and marks on the relay's own connection in autocommit:
    no pool check-out (and its ping), no BEGIN or COMMIT, no lock statement; each of these was a
    round trip, and in a busy service each round trip waits for the GIL."""
    recording = threading.Event()
    statements: list[str] = []
    in_transaction: list[bool] = []
    checkouts: list[object] = []

    def record_statement(
        connection: sqlalchemy.Connection, _cursor: object, statement: str, *_: object
    ) -> None:
        if recording.is_set():
            statements.append(statement.split()[0])
            status = connection.connection.dbapi_connection.info.transaction_status  # type: ignore[union-attr]
            in_transaction.append(status.name != "IDLE")

    def record_checkout(*arguments: object) -> None:
        if recording.is_set():
            checkouts.append(arguments)

    sqlalchemy.event.listen(postgresql_engine, "after_cursor_execute", record_statement)
    sqlalchemy.event.listen(postgresql_engine.pool, "checkout", record_checkout)
    with OutboxRelay(
        postgresql_engine, kafka_bootstrap_servers, publish_timeout_ms=PUBLISH_TIMEOUT_MS
    ) as relay:
        relay.run_once()  # connects, sets its keepalives and takes the lock
        append_events(postgresql_engine, kafka_topics, {"table-1": 3})
        recording.set()
        assert relay.run_once() == 3
        recording.clear()
    assert statements == ["SELECT", "UPDATE"]
    assert in_transaction == [False, False]
    assert checkouts == []
    assert unsent_count(postgresql_engine) == 0


def test_relay_and_consumer_run_forever_in_background_threads_until_stopped(
    sqlite_engine: Engine,
    kafka_bootstrap_servers: str,
    kafka_topics: Topics,
    unique_prefix: str,
    new_tracked_consumer: Callable[..., TrackedConsumer],
    read_projection_event_ids: Callable[[Engine], list[str]],
) -> None:
    """How a service wires them: one thread each, one stop event for a graceful shutdown."""
    stop_event = threading.Event()
    consumer = new_tracked_consumer(sqlite_engine, group_id=unique_prefix + "projection")
    relay = OutboxRelay(sqlite_engine, kafka_bootstrap_servers, publish_timeout_ms=PUBLISH_TIMEOUT_MS)
    thread_errors: list[BaseException] = []

    def run_and_record_errors(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as error:  # Reported by the assertion below, not lost in the thread.
            thread_errors.append(error)
            raise

    threads = [
        threading.Thread(target=run_and_record_errors, args=(lambda: relay.run_forever(stop_event, 50),)),
        threading.Thread(target=run_and_record_errors, args=(lambda: consumer.run_forever(stop_event, 100),)),
    ]
    try:
        for thread in threads:
            thread.start()
        event_ids = append_events(sqlite_engine, kafka_topics, {"table-1": 3})
        event_ids += append_events(sqlite_engine, kafka_topics, {"table-2": 2, "table-1": 1})
        # Generous: on a loaded 2-core machine a fresh group can take a minute to settle.
        deadline = time.monotonic() + 150
        while len(read_projection_event_ids(sqlite_engine)) < len(event_ids) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop_event.set()
        for thread in threads:
            thread.join(timeout=10)
        relay.close()
    assert thread_errors == []
    assert not any(thread.is_alive() for thread in threads)
    assert sorted(read_projection_event_ids(sqlite_engine)) == sorted(event_ids)


def test_a_commit_wakes_the_relay_before_its_poll_interval(
    migrated_engine: Engine, kafka_bootstrap_servers: str, kafka_topics: Topics
) -> None:
    """The relay waits on this process's outbox commits, not just its poll interval (an hour here):
    the outer commit wakes it, not the event store's savepoint (PostgreSQL would show the rows
    only after the commit, and a relay woken at the savepoint would read nothing and sleep)."""
    stop_event = threading.Event()
    relay = OutboxRelay(migrated_engine, kafka_bootstrap_servers, publish_timeout_ms=PUBLISH_TIMEOUT_MS)
    relay.run_once()  # connect to the broker before timing anything
    thread = threading.Thread(target=relay.run_forever, args=(stop_event, 3_600_000))
    thread.start()
    try:
        time.sleep(0.5)  # the relay has read an empty outbox and waits
        store = EventStore(topics=kafka_topics)
        with transaction(create_session_factory(migrated_engine)) as session:
            store.append(session, "table-1", 0, table_events(2))  # its savepoint is released here
            time.sleep(0.5)  # the outer commit comes later; only it may wake the relay
        started = time.monotonic()
        while unsent_count(migrated_engine) and time.monotonic() - started < 300:
            time.sleep(0.02)
        assert unsent_count(migrated_engine) == 0  # sent long before the hour's poll, however loaded
    finally:
        stop_event.set()
        thread.join(timeout=60)
        relay.close()
    assert not thread.is_alive()  # the stop is seen within STOP_CHECK_SECONDS, not the poll interval
