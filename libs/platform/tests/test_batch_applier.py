"""The batch applier (the tracked consumer's transaction logic, without Kafka) on SQLite and PostgreSQL.

One transaction per batch: events applied once, repeats within and across batches skipped, the
positions stored with them; a poison event is reported alone while the rest of its batch is
applied; a crash before the commit leaves nothing of the batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import sqlalchemy
from mahjong.v1 import table_events_pb2
from mahjong_platform.database import create_session_factory
from mahjong_platform.envelopes import new_envelope, utc_now
from mahjong_platform.errors import UnavailableError
from mahjong_platform.schema import consumer_positions, processed_events
from mahjong_platform.tracked_consumer import BatchApplier, Delivery, MessagePosition
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

GROUP = "example-projection"
# Mirrors the example alembic history's projection table (conftest.py's EXAMPLE_PROJECTION).
EXAMPLE_PROJECTION = sqlalchemy.Table(
    "example_projection",
    sqlalchemy.MetaData(),
    sqlalchemy.Column("id", sqlalchemy.Integer, primary_key=True, autoincrement=True),
    sqlalchemy.Column("event_id", sqlalchemy.String(36), nullable=False),
    sqlalchemy.Column("stream_id", sqlalchemy.String(200), nullable=False),
    sqlalchemy.Column("sequence", sqlalchemy.BigInteger, nullable=False),
    sqlalchemy.Column("topic", sqlalchemy.String(249), nullable=False),
    sqlalchemy.Column("partition", sqlalchemy.Integer, nullable=False),
    sqlalchemy.Column("kafka_offset", sqlalchemy.BigInteger, nullable=False),
)


class _CrashedError(Exception):
    pass


def deliveries(stream_id: str, count: int, *, partition: int = 0, first_offset: int = 0) -> list[Delivery]:
    return [
        Delivery(
            new_envelope(
                table_events_pb2.TileDiscarded(seat=index % 4, tile="5D"),
                clock=utc_now,
                stream_id=stream_id,
                sequence=index + 1,
            ),
            MessagePosition("table", partition, first_offset + index),
        )
        for index in range(count)
    ]


class RecordingProjection:
    """A batch handler writing one row per event; remembers each batch's size; may reject one id."""

    def __init__(self, rejected_event_id: str = "") -> None:
        self.batch_sizes: list[int] = []
        self.rejected_event_id = rejected_event_id

    def __call__(self, session: Session, batch: Sequence[Delivery]) -> None:
        self.batch_sizes.append(len(batch))
        session.execute(
            EXAMPLE_PROJECTION.insert(),
            [
                {
                    "event_id": delivery.envelope.event_id,
                    "stream_id": delivery.envelope.stream_id,
                    "sequence": delivery.envelope.sequence,
                    "topic": delivery.position.topic,
                    "partition": delivery.position.partition,
                    "kafka_offset": delivery.position.offset,
                }
                for delivery in batch
            ],
        )
        if any(delivery.envelope.event_id == self.rejected_event_id for delivery in batch):
            raise ValueError("seat 2 cannot discard 5D now")


def projected_event_ids(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        query = sqlalchemy.select(EXAMPLE_PROJECTION.c.event_id).order_by(EXAMPLE_PROJECTION.c.id)
        return list(connection.execute(query).scalars())


def stored_positions(engine: Engine) -> dict[int, int]:
    with engine.connect() as connection:
        rows = connection.execute(
            sqlalchemy.select(consumer_positions.c.partition, consumer_positions.c.next_offset)
        )
        return {int(row.partition): int(row.next_offset) for row in rows}


def processed_ids(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(connection.execute(sqlalchemy.select(processed_events.c.event_id)).scalars())


def applier(
    engine: Engine, handler: RecordingProjection, failures: list[str], **options: object
) -> BatchApplier:
    return BatchApplier(
        create_session_factory(engine),
        GROUP,
        handler,
        lambda delivery, error: failures.append(f"{delivery.envelope.event_id}: {error}"),
        **options,  # type: ignore[arg-type]
    )


def test_a_batch_is_applied_in_one_handler_call_with_its_ids_and_positions(migrated_engine: Engine) -> None:
    batch = deliveries("table-1", 3) + deliveries("table-2", 2, partition=1, first_offset=7)
    projection = RecordingProjection()
    outcome = applier(migrated_engine, projection, []).apply(batch, [delivery.position for delivery in batch])
    assert projection.batch_sizes == [5]
    assert outcome.applied == 5 and outcome.duplicates == 0 and not outcome.failures
    assert projected_event_ids(migrated_engine) == [delivery.envelope.event_id for delivery in batch]
    assert processed_ids(migrated_engine) == {delivery.envelope.event_id for delivery in batch}
    assert stored_positions(migrated_engine) == {0: 3, 1: 9}


def test_repeats_within_a_batch_and_across_batches_are_applied_once(migrated_engine: Engine) -> None:
    events = deliveries("table-1", 4)
    resent = [
        Delivery(delivery.envelope, MessagePosition("table", 0, 4 + index))
        for index, delivery in enumerate(events[1:3])
    ]
    projection = RecordingProjection()
    batch_applier = applier(migrated_engine, projection, [])
    first = [*events[:2], events[0]]  # The relay re-sent the first event inside the same poll.
    assert batch_applier.apply(first, [delivery.position for delivery in first]).duplicates == 1
    second = events[2:] + resent
    outcome = batch_applier.apply(second, [delivery.position for delivery in second])
    assert outcome.applied == 2 and outcome.duplicates == 2
    assert projected_event_ids(migrated_engine) == [delivery.envelope.event_id for delivery in events]
    assert stored_positions(migrated_engine) == {0: 6}


def test_a_poison_event_is_reported_alone_and_the_rest_of_its_batch_is_applied(
    migrated_engine: Engine,
) -> None:
    batch = deliveries("table-1", 5)
    poison = batch[2].envelope.event_id
    projection = RecordingProjection(rejected_event_id=poison)
    failures: list[str] = []
    outcome = applier(migrated_engine, projection, failures).apply(
        batch, [delivery.position for delivery in batch]
    )
    # The whole batch first, then one event per transaction after it failed.
    assert projection.batch_sizes == [5, 1, 1, 1, 1, 1]
    assert failures == [f"{poison}: handler failed: ValueError: seat 2 cannot discard 5D now"]
    assert outcome.applied == 4 and [delivery.envelope.event_id for delivery, _ in outcome.failures] == [
        poison
    ]
    expected = [delivery.envelope.event_id for delivery in batch if delivery.envelope.event_id != poison]
    assert projected_event_ids(migrated_engine) == expected  # The poison's own row rolled back.
    assert processed_ids(migrated_engine) == set(expected)
    assert stored_positions(migrated_engine) == {0: 5}


class _ConstraintProjection(RecordingProjection):
    """Breaks a unique constraint on `troubled_event_id` the first `times` attempts at it (another
    consumer of the group committing the same event meanwhile), then applies it."""

    def __init__(self, troubled_event_id: str, times: int) -> None:
        super().__init__()
        self.troubled_event_id = troubled_event_id
        self.times = times

    def __call__(self, session: Session, batch: Sequence[Delivery]) -> None:
        if self.times and any(delivery.envelope.event_id == self.troubled_event_id for delivery in batch):
            self.batch_sizes.append(len(batch))
            self.times -= 1
            raise sqlalchemy.exc.IntegrityError("INSERT ...", {}, Exception("UNIQUE constraint failed"))
        super().__call__(session, batch)


@pytest.mark.parametrize(("times", "dead_lettered"), [(2, False), (3, True)])
def test_an_event_that_breaks_a_constraint_alone_is_tried_once_more_before_it_is_dead_lettered(
    migrated_engine: Engine, times: int, dead_lettered: bool
) -> None:
    """An IntegrityError of one event applied alone may be another consumer's commit of the same
    event (a rebalance): it is tried again, in a new transaction, before it counts as poison."""
    batch = deliveries("table-1", 3)
    troubled = batch[1].envelope.event_id
    projection = _ConstraintProjection(troubled, times)
    failures: list[str] = []
    outcome = applier(migrated_engine, projection, failures).apply(
        batch, [delivery.position for delivery in batch]
    )
    # The batch, then one by one: the troubled event twice.
    assert projection.batch_sizes == [3, 1, 1, 1, 1]
    assert [failure.split(":")[0] for failure in failures] == ([troubled] if dead_lettered else [])
    applied = [delivery.envelope.event_id for delivery in batch]
    if dead_lettered:
        applied.remove(troubled)
    assert projected_event_ids(migrated_engine) == applied  # each once, in order
    assert outcome.applied == len(applied)
    assert stored_positions(migrated_engine) == {0: 3}


class _NotHereProjection(RecordingProjection):
    """Writes its rows, then refuses the batch as this process's to apply (`UnavailableError`)."""

    def __call__(self, session: Session, batch: Sequence[Delivery]) -> None:
        super().__call__(session, batch)
        raise UnavailableError("this partition is another replica's now")


def test_an_event_this_process_may_not_apply_now_fails_the_batch_and_is_never_dead_lettered(
    migrated_engine: Engine,
) -> None:
    """`UnavailableError` (a table engine replica whose partition was taken over) is not a poison
    message: nothing is reported, applied or stored, so the group reads it again."""
    batch = deliveries("table-1", 3)
    failures: list[str] = []
    for events in (batch, batch[:1]):  # a batch, and one event alone (no one-by-one retry either)
        with pytest.raises(UnavailableError):
            applier(migrated_engine, _NotHereProjection(), failures).apply(
                events, [delivery.position for delivery in events]
            )
    assert failures == []
    assert projected_event_ids(migrated_engine) == [] and processed_ids(migrated_engine) == set()
    assert stored_positions(migrated_engine) == {}


def test_a_crash_before_the_commit_leaves_nothing_of_the_batch(migrated_engine: Engine) -> None:
    batch = deliveries("table-1", 4)

    def crash_on_the_third(position: MessagePosition) -> None:
        if position.offset == 2:
            raise _CrashedError

    doomed = applier(migrated_engine, RecordingProjection(), [], before_commit=crash_on_the_third)
    with pytest.raises(_CrashedError):
        doomed.apply(batch, [delivery.position for delivery in batch])
    assert projected_event_ids(migrated_engine) == []
    assert stored_positions(migrated_engine) == {}
    restarted = applier(migrated_engine, RecordingProjection(), [])
    restarted.apply(batch, [delivery.position for delivery in batch])
    assert projected_event_ids(migrated_engine) == [delivery.envelope.event_id for delivery in batch]


def test_messages_the_projection_skips_only_move_the_position(migrated_engine: Engine) -> None:
    projection = RecordingProjection()
    skipped = [MessagePosition("table", 0, offset) for offset in range(3)]
    outcome = applier(migrated_engine, projection, []).apply([], skipped)
    assert outcome.applied == 0 and projection.batch_sizes == []
    assert stored_positions(migrated_engine) == {0: 3}


class SkippingProjection(RecordingProjection):
    """An idempotent handler: skips the event ids already in its own rows."""

    def __init__(self) -> None:
        super().__init__()
        self.given_sizes: list[int] = []

    def __call__(self, session: Session, batch: Sequence[Delivery]) -> None:
        self.given_sizes.append(len(batch))
        stored = set(session.execute(sqlalchemy.select(EXAMPLE_PROJECTION.c.event_id)).scalars())
        super().__call__(session, [item for item in batch if item.envelope.event_id not in stored])


def test_an_idempotent_handler_gets_the_repeats_of_other_batches_and_no_processed_ids_are_kept(
    migrated_engine: Engine,
) -> None:
    """`idempotent_handler`: the applier drops the repeats within a batch only, reads and writes no
    `processed_events`, and stores the positions with the rows; the handler's own keys skip a
    re-sent event, so every event is applied once."""
    events = deliveries("table-1", 4)
    resent = [Delivery(events[1].envelope, MessagePosition("table", 0, 4))]
    projection = SkippingProjection()
    batch_applier = applier(migrated_engine, projection, [], idempotent_handler=True)
    first = [*events[:2], events[0]]  # The relay re-sent the first event inside the same poll.
    assert batch_applier.apply(first, [delivery.position for delivery in first]).duplicates == 1
    second = events[2:] + resent
    batch_applier.apply(second, [delivery.position for delivery in second])
    assert projection.given_sizes == [2, 3]  # the re-send of another batch reached the handler
    assert projected_event_ids(migrated_engine) == [delivery.envelope.event_id for delivery in events]
    assert processed_ids(migrated_engine) == set()
    assert stored_positions(migrated_engine) == {0: 5}


def test_positions_are_upserted_in_one_statement_and_read_back_as_written(migrated_engine: Engine) -> None:
    """A batch's positions of several partitions are one upsert (on both databases a multi-row
    statement on the driver's cursor, not a statement per row), a later batch moves them on, and
    the update time reads back through SQLAlchemy as the datetime it wrote."""
    moment = utc_now()
    upserts: list[str] = []

    @sqlalchemy.event.listens_for(migrated_engine, "before_cursor_execute")
    def _note(
        _connection: object, _cursor: object, statement: str, _parameters: object, *rest: object
    ) -> None:
        if statement.startswith("INSERT INTO consumer_positions"):
            many = rest[-1]
            upserts.append("many" if many else "one")

    projection = RecordingProjection()
    batch = applier(migrated_engine, projection, [], clock=lambda: moment)
    first = deliveries("table-1", 2) + deliveries("table-2", 2, partition=1, first_offset=5)
    batch.apply(first, [delivery.position for delivery in first])
    later = deliveries("table-3", 1, partition=1, first_offset=9)
    batch.apply(later, [delivery.position for delivery in later])
    assert stored_positions(migrated_engine) == {0: 2, 1: 10}
    with migrated_engine.connect() as connection:
        times = set(connection.execute(sqlalchemy.select(consumer_positions.c.updated_at)).scalars())
    assert {time.replace(tzinfo=moment.tzinfo) for time in times} == {moment}
    assert upserts == ["one", "one"]
