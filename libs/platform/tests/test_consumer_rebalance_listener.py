"""The tracked consumer against two kafka-python 3 group-membership stalls: its rebalance listener
never waits for the database, and a rebalance kafka-python would drop is joined again.

kafka-python 3 runs a synchronous rebalance listener on its network thread, which also sends the
group heartbeats. Our listener used to read the stored positions there: while that read waited
(this process's SQLite writers ahead of it, or a busy PostgreSQL pool), the heartbeats stopped, the
broker evicted the member one session timeout later and ``poll()`` hung until the read finished —
the "consumer that joined, got its assignment and stopped heartbeating" seen in CI. Now the listener
only notes the partitions; the consumer's own thread seeks them after the poll.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kafka import KafkaProducer, TopicPartition
from mahjong.v1 import envelope_pb2, table_events_pb2
from mahjong_platform.database import transaction
from mahjong_platform.envelopes import new_envelope, serialize_envelope, utc_now
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import MessagePosition, TrackedConsumer, _SeekToStoredPositions
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

pytestmark = pytest.mark.integration

JOIN_SECONDS = 120.0  # a hang guard only


def discards(stream_id: str, count: int, first_sequence: int = 1) -> list[envelope_pb2.Envelope]:
    return [
        new_envelope(
            table_events_pb2.TileDiscarded(seat=0, tile="5D"),
            clock=utc_now,
            stream_id=stream_id,
            sequence=first_sequence + index,
        )
        for index in range(count)
    ]


@pytest.fixture
def publish(
    kafka_bootstrap_servers: str, kafka_topics: Topics
) -> Iterator[Callable[[list[envelope_pb2.Envelope]], None]]:
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap_servers, acks="all")

    def send(events: list[envelope_pb2.Envelope]) -> None:
        for event in events:
            producer.send(
                kafka_topics.table, key=event.stream_id.encode(), value=serialize_envelope(event)
            ).get(60)

    yield send
    producer.close(timeout=5)


class DatabaseHeldBusy:
    """Another thread of this process holds the database's writer (a long transaction)."""

    def __init__(self, engine: Engine) -> None:
        from mahjong_platform.database import create_session_factory

        self._session_factory = create_session_factory(engine)
        self._held = threading.Event()
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        with transaction(self._session_factory):
            self._held.set()
            self._release.wait()

    def __enter__(self) -> DatabaseHeldBusy:
        self._thread.start()
        assert self._held.wait(JOIN_SECONDS)
        return self

    def __exit__(self, *_exception: object) -> None:
        self._release.set()
        self._thread.join(JOIN_SECONDS)


def test_the_assignment_callback_returns_while_the_database_is_busy(
    sqlite_engine: Engine,
    kafka_topics: Topics,
    new_tracked_consumer: Callable[..., TrackedConsumer],
    unique_prefix: str,
) -> None:
    consumer = new_tracked_consumer(sqlite_engine, group_id=unique_prefix + "listener")
    listener = _SeekToStoredPositions(consumer)
    partition = TopicPartition(kafka_topics.table, 0)
    with DatabaseHeldBusy(sqlite_engine):
        callback = threading.Thread(target=listener.on_partitions_assigned, args=({partition},), daemon=True)
        callback.start()
        callback.join(JOIN_SECONDS)
        assert not callback.is_alive(), "the rebalance callback waited for the database"
    assert consumer._take_unseeked() == {partition}  # left for the consumer's own thread to seek


def test_a_consumer_that_joins_while_the_database_is_busy_resumes_at_its_stored_positions(
    sqlite_engine: Engine,
    publish: Callable[[list[envelope_pb2.Envelope]], None],
    new_tracked_consumer: Callable[..., TrackedConsumer],
    poll_consumer_until: Callable[..., None],
    unique_prefix: str,
) -> None:
    group_id = unique_prefix + "busy-join"
    first_events = discards("table-1", 3) + discards("table-2", 3)
    publish(first_events)
    seen: list[str] = []

    def record(session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition) -> None:
        seen.append(envelope.event_id)

    first = new_tracked_consumer(sqlite_engine, group_id=group_id, handler=record)
    poll_consumer_until(first, lambda: len(seen) >= 6)
    first.close()
    later_events = discards("table-1", 2, first_sequence=4)
    publish(later_events)
    seen.clear()

    second = new_tracked_consumer(sqlite_engine, group_id=group_id, handler=record)
    joined = threading.Event()

    def join_and_poll() -> None:
        # The join happens in this poll, while another thread holds the database: the callback
        # returns at once, and this thread then waits for the database to seek.
        second.poll_once(timeout_ms=5_000)
        joined.set()

    with DatabaseHeldBusy(sqlite_engine):
        poller = threading.Thread(target=join_and_poll, daemon=True)
        poller.start()
        deadline = time.monotonic() + JOIN_SECONDS
        while not second._consumer.assignment():
            if time.monotonic() > deadline:
                pytest.fail("the consumer never got its partitions")
            time.sleep(0.05)
    poller.join(JOIN_SECONDS)
    assert joined.is_set()
    poll_consumer_until(second, lambda: len(seen) >= 2)
    assert seen == [event.event_id for event in later_events]  # from the stored positions, nothing again


def test_a_rebalance_kafka_python_dropped_is_joined_again_and_the_consumer_reads_on(
    sqlite_engine: Engine,
    publish: Callable[[list[envelope_pb2.Envelope]], None],
    new_tracked_consumer: Callable[..., TrackedConsumer],
    poll_consumer_until: Callable[..., None],
    unique_prefix: str,
) -> None:
    """kafka-python 3.0.12 drops a group leader's second join that finishes after the poll's
    timeout (seen in the debug log of a stuck test): rebalancing, heartbeats off, and
    `need_rejoin()` False, so no later poll would finish the join; the broker evicts the member."""
    seen: list[str] = []

    def record(session: Session, envelope: envelope_pb2.Envelope, position: MessagePosition) -> None:
        seen.append(envelope.event_id)

    consumer = new_tracked_consumer(sqlite_engine, group_id=unique_prefix + "dropped", handler=record)
    publish(discards("table-1", 2))
    poll_consumer_until(consumer, lambda: len(seen) >= 2)

    # The trigger seen in the log: the leader's assignment saw other partitions than its metadata
    # does now, so it rejoins; a poll far shorter than a JoinGroup + SyncGroup round trip times out
    # while they are in flight, and the leader's new assignment then makes need_rejoin() False.
    coordinator = consumer._consumer._coordinator
    coordinator._assignment_snapshot = {"a-topic-that-went-away": {0}}
    assert coordinator.need_rejoin()
    deadline = time.monotonic() + JOIN_SECONDS
    while coordinator.need_rejoin():  # until kafka-python's join has performed the assignment
        assert time.monotonic() < deadline
        join = coordinator._join_task
        if join is None or join.is_done:
            # Nothing in flight: the 1 ms poll ran out before it sent the JoinGroup (finding the
            # coordinator, preparing the join), or the join failed and must be retried. Another
            # 1 ms poll starts it; one in flight is left to kafka-python's network thread.
            consumer._consumer.poll(timeout_ms=1)
        else:
            time.sleep(0.01)
    assert coordinator.rebalance_in_progress() and not coordinator._heartbeat_enabled

    # No later poll finishes that join unless the consumer asks for a rejoin.
    poll_consumer_until(consumer, lambda: not coordinator.rebalance_in_progress())
    assert coordinator._heartbeat_enabled

    later = discards("table-1", 2, first_sequence=3)
    publish(later)
    poll_consumer_until(consumer, lambda: len(seen) >= 4)
    assert seen[2:] == [event.event_id for event in later]
