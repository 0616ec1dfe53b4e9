"""What the table engine's write transactions ask SQLite. Each statement is a GIL release and
re-acquire in the driver (a wait of up to the switch interval behind a busy event loop), so the
group commit's batch and a table's opening say what they need in as few statements as they can:
the ownership fence rides on the version check, which a batch asks in the query of its stored
answers (no row when all is well), an opening asks nothing before it writes. The
guarantees stay: a replica that lost a table writes nothing, a re-sent assignment opens nothing."""

from __future__ import annotations

import concurrent.futures
import sqlite3
import uuid
from collections.abc import Iterator

import grpc
import pytest
import sqlalchemy
from mahjong.v1 import match_events_pb2
from mahjong_platform.database import read_transaction, transaction
from mahjong_platform.envelopes import new_envelope, utc_now
from mahjong_platform.event_store import WrongExpectedVersionError
from mahjong_platform.schema import processed_events
from mahjong_platform.tracked_consumer import Assignment, BatchApplier, Delivery, MessagePosition
from mahjong_table.commits import Accepted, GroupCommitter, Outcome, Rejection
from mahjong_table.models import table_partition_owners, table_status
from mahjong_table.ownership import Ownership, partition_of
from mahjong_table.projection import is_table_assignment, table_openings
from mahjong_table.selfplay import greedy_command
from mahjong_table.servicer import TABLE_ERROR_MAPPING
from mahjong_table.tables import TableMovedError
from mahjong_table.testing import table_assigned
from mahjong_table.variants import decide

from .conftest import TableServer

TOPIC = "mahjong.match.v1"
PARTITIONS = 2
PLAYERS = ["east", "south", "west", "north"]


@pytest.fixture
def owner(table_server: TableServer) -> Ownership:
    """The test server's engine as the owner of every partition (its writes fenced)."""
    ownership = Ownership(TOPIC, "127.0.0.1:1", table_server.session_factory, table_server.engine)  # type: ignore[arg-type]
    ownership.assigned(
        Assignment(frozenset((TOPIC, partition) for partition in range(PARTITIONS)), {TOPIC: PARTITIONS})
    )
    return ownership


@pytest.fixture
def statements(table_server: TableServer) -> Iterator[list[str]]:
    """Every statement sent to the table database from now on."""
    engine = table_server.session_factory.kw["bind"]  # type: ignore[attr-defined]
    sent: list[str] = []

    def record(_connection: object, _cursor: object, statement: str, *_rest: object) -> None:
        sent.append(" ".join(statement.split()[:4]))

    sqlalchemy.event.listen(engine, "before_cursor_execute", record)
    yield sent
    sqlalchemy.event.remove(engine, "before_cursor_execute", record)


@pytest.fixture
def traced(table_server: TableServer) -> Iterator[list[str]]:
    """Every statement SQLite runs on the table database from now on, as SQLite reports it (the
    writers send their statements through the driver unless a cursor-event listener is attached,
    as `statements` is: this sees what a service without one sends)."""
    engine = table_server.session_factory.kw["bind"]  # type: ignore[attr-defined]
    sent: list[str] = []

    def trace(connection: sqlite3.Connection, _record: object) -> None:
        connection.set_trace_callback(lambda statement: sent.append(" ".join(statement.split()[:4])))

    engine.dispose()  # new connections, each with the trace
    sqlalchemy.event.listen(engine, "connect", trace)
    yield sent
    sqlalchemy.event.remove(engine, "connect", trace)
    engine.dispose()


def table_in(partition: int) -> str:
    while True:
        table_id = str(uuid.uuid4())
        if partition_of(table_id, PARTITIONS) == partition:
            return table_id


def batch_of(table_server: TableServer, table_ids: list[str]) -> list[Outcome]:
    """One command (with an idempotency key) per table, committed as one batch."""
    session_factory = table_server.session_factory
    committer = GroupCommitter(
        table_server.engine,
        lambda: transaction(session_factory),  # type: ignore[arg-type]
        TABLE_ERROR_MAPPING,
        autostart=False,
    )
    futures: list[concurrent.futures.Future[Outcome]] = [
        committer.submit(
            table_id,
            greedy_command,  # type: ignore[arg-type]  # Sichuan tables only here
            lambda _state, _envelopes: b"answer",
            ("east", str(uuid.uuid4()), "digest"),
        )
        for table_id in table_ids
    ]
    committer.start()
    outcomes = [future.result(timeout=60) for future in futures]
    committer.stop()
    assert committer.batches == 1
    return outcomes


def test_a_batch_asks_the_versions_and_the_fence_in_the_query_of_its_stored_answers(
    table_server: TableServer, owner: Ownership, statements: list[str]
) -> None:
    tables = [table_server.open_table(PLAYERS, seed=3, table_id=table_in(partition)) for partition in (0, 1)]
    for table_id in tables:
        table_server.engine.read_state(lambda: read_transaction(table_server.session_factory), table_id)  # type: ignore[arg-type]
    statements.clear()
    outcomes = batch_of(table_server, tables)
    assert all(isinstance(outcome, Accepted) and outcome.envelopes for outcome in outcomes)
    assert statements == [
        "BEGIN IMMEDIATE",
        # The batch's stored first answers and, in a row only if one fails, the versions and the fence.
        "SELECT table_id, player_id, idempotency_key,",
        "INSERT INTO outbox_messages (topic,",
        "INSERT INTO stored_events (stream_id,",
        "INSERT INTO table_status (table_id,",
        "INSERT INTO table_answers (table_id,",
    ]


def test_without_a_listener_a_batch_sends_sqlite_the_same_statements_through_the_driver(
    table_server: TableServer, owner: Ownership, traced: list[str]
) -> None:
    tables = [table_server.open_table(PLAYERS, seed=3, table_id=table_in(partition)) for partition in (0, 1)]
    for table_id in tables:
        table_server.engine.read_state(lambda: read_transaction(table_server.session_factory), table_id)  # type: ignore[arg-type]
    traced.clear()
    outcomes = batch_of(table_server, tables)
    assert all(isinstance(outcome, Accepted) and outcome.envelopes for outcome in outcomes)
    assert traced == [
        "BEGIN IMMEDIATE",
        "SELECT table_id, player_id, idempotency_key,",
        "INSERT INTO outbox_messages (topic,",
        "INSERT INTO stored_events (stream_id,",
        "INSERT INTO table_status (table_id,",
        "INSERT INTO table_answers (table_id,",
        "COMMIT",
    ]


def test_a_batch_of_a_table_another_replica_claimed_writes_nothing(
    table_server: TableServer, owner: Ownership
) -> None:
    """The fence in the version check's statement refuses the batch (and then each command alone)."""
    table_id = table_server.open_table(PLAYERS, seed=3, table_id=table_in(1))
    state = table_server.engine.read_state(lambda: read_transaction(table_server.session_factory), table_id)  # type: ignore[arg-type]
    with transaction(table_server.session_factory) as session:  # type: ignore[arg-type]
        session.execute(  # what another replica's claim of partition 1 writes
            table_partition_owners.update()
            .where(table_partition_owners.c.partition == 1)
            .values(owner_instance="another", epoch=table_partition_owners.c.epoch + 1)
        )
    envelopes, new_state = table_server.engine.prepared(state, decide(state, greedy_command(state)))  # type: ignore[arg-type]
    with pytest.raises(TableMovedError), transaction(table_server.session_factory) as session:  # type: ignore[arg-type]
        table_server.engine.write_batch(session, [(state, envelopes, new_state)])
    (refused,) = batch_of(table_server, [table_id])
    assert isinstance(refused, Rejection) and refused.status_code == grpc.StatusCode.UNAVAILABLE
    with read_transaction(table_server.session_factory) as session:  # type: ignore[arg-type]
        assert table_server.engine.store.stream_version(session, table_id) == state.version


def test_the_stored_answers_query_checks_each_tables_version_and_the_fence(
    table_server: TableServer, owner: Ownership
) -> None:
    """`first_answers_checked`: the answers of exactly the keys asked, the (table, version) pairs it
    checked; a table another writer moved on, or another replica claimed, refuses the batch."""
    engine = table_server.engine
    table_id = table_server.open_table(PLAYERS, seed=3, table_id=table_in(1))
    before = engine.read_state(lambda: read_transaction(table_server.session_factory), table_id)  # type: ignore[arg-type]
    key = ("east", "key-1", "digest")
    session_factory = table_server.session_factory
    committer = GroupCommitter(engine, lambda: transaction(session_factory), TABLE_ERROR_MAPPING)  # type: ignore[arg-type]
    answered = committer.submit(table_id, greedy_command, lambda _state, _envelopes: b"first", key)  # type: ignore[arg-type]
    assert isinstance(answered.result(timeout=60), Accepted)
    committer.stop()
    after = engine.read_state(lambda: read_transaction(session_factory), table_id)  # type: ignore[arg-type]
    keys = [(table_id, "east", "key-1"), (table_id, "east", "key-2")]
    with transaction(session_factory) as session:  # type: ignore[arg-type]
        answers, checked = engine.first_answers_checked(session, keys, [after])
    assert answers == {(table_id, "east", "key-1"): ("digest", b"first")}
    assert checked == {(table_id, after.version)}
    with pytest.raises(WrongExpectedVersionError), transaction(session_factory) as session:  # type: ignore[arg-type]
        engine.first_answers_checked(session, keys, [before])
    with transaction(session_factory) as session:  # type: ignore[arg-type]
        session.execute(  # what another replica's claim of partition 1 writes
            table_partition_owners.update()
            .where(table_partition_owners.c.partition == 1)
            .values(owner_instance="another", epoch=table_partition_owners.c.epoch + 1)
        )
    with pytest.raises(TableMovedError), transaction(session_factory) as session:  # type: ignore[arg-type]
        engine.first_answers_checked(session, keys, [after])


def test_a_table_opens_in_four_statements_and_a_re_sent_assignment_opens_nothing(
    table_server: TableServer, owner: Ownership, statements: list[str]
) -> None:
    """The table-openings consumer's handler, idempotent by the table's own stream: no
    `processed_events` rows, and only the deliveries that opened a table count as applied."""
    table_id = table_in(1)
    assigned = new_envelope(table_assigned(table_id, PLAYERS), stream_id=table_id, clock=utc_now)
    ticket = new_envelope(match_events_pb2.TicketQueued(ticket_id="ticket-1"), clock=utc_now)
    assert is_table_assignment(assigned) and not is_table_assignment(ticket)
    applier = BatchApplier(
        table_server.session_factory,  # type: ignore[arg-type]
        "table-openings",
        table_openings(table_server.engine),
        lambda _delivery, error: pytest.fail(error),
        idempotent_handler=True,
    )
    first = Delivery(assigned, MessagePosition(TOPIC, 1, 7))
    statements.clear()
    with transaction(table_server.session_factory) as session:  # type: ignore[arg-type]
        opened = table_server.engine.open_from_assignment(
            session, assigned.table_assigned, causation_id=assigned.event_id, match_partition=1
        )
    assert opened and statements == [
        "BEGIN IMMEDIATE",
        "SELECT (SELECT count(*) FROM",  # the stream is new and, in the same row, the fence
        "INSERT INTO outbox_messages (topic,",
        "INSERT INTO stored_events (stream_id,",
        "INSERT INTO table_status (table_id,",  # with its partition
    ]
    outcome = applier.apply([first], [first.position])
    assert (outcome.applied, outcome.duplicates) == (0, 1)  # opened above: a re-sent assignment
    with read_transaction(table_server.session_factory) as session:  # type: ignore[arg-type]
        assert table_server.engine.store.stream_version(session, table_id) == len(opened)
        assert session.execute(sqlalchemy.select(processed_events)).all() == []
        partition = session.execute(
            sqlalchemy.select(table_status.c.match_partition).where(table_status.c.table_id == table_id)
        ).scalar_one()
    assert partition == 1
    other = table_in(0)
    fresh = new_envelope(table_assigned(other, PLAYERS), stream_id=other, clock=utc_now)
    outcome = applier.apply([Delivery(fresh, MessagePosition(TOPIC, 0, 3))], [MessagePosition(TOPIC, 0, 3)])
    assert (outcome.applied, outcome.duplicates) == (1, 0)
