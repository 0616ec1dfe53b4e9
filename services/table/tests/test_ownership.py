"""Table-engine replicas (README "Scale-out: replicas"): which replica owns a table, the owner
directory and its epochs, a partition taken over (its tables reloaded from the event store, their
timers fired by the new owner), and a call that reaches any replica served by the owner.

Two real asyncio TableService servers share one database; their partitions are assigned by calling
`Ownership.assigned` as the consumer does after a rebalance (the Kafka side is in
tests/test_replicas.py)."""

from __future__ import annotations

import dataclasses
import datetime
import pathlib
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
import sqlalchemy
from kafka.partitioner.default import DefaultPartitioner
from mahjong.v1 import table_service_pb2 as messages
from mahjong.v1 import table_service_pb2_grpc
from mahjong_platform.aio_grpc_server import AioAuthInterceptor, AioRunningServer, serve_aio
from mahjong_platform.auth import mint_token
from mahjong_platform.config import load_settings
from mahjong_platform.database import (
    create_engine_for,
    create_session_factory,
    read_transaction,
    sqlite_url,
    transaction,
)
from mahjong_platform.envelopes import new_envelope, utc_now
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_client import open_channel
from mahjong_platform.grpc_server import register_service
from mahjong_platform.metrics import ServiceMetrics
from mahjong_platform.migrations import upgrade
from mahjong_platform.schema import consumer_positions
from mahjong_platform.topics import Topics
from mahjong_platform.tracked_consumer import Assignment, BatchApplier, Delivery, MessagePosition, per_event
from mahjong_table.__main__ import TableProcess, definition
from mahjong_table.deadlines import DeadlineWorker
from mahjong_table.models import table_partition_owners
from mahjong_table.ownership import LOCAL, TAKEOVER_GRACE, Ownership, partition_of
from mahjong_table.projection import table_opening_handler
from mahjong_table.routing import FORWARDED_BY_METADATA_KEY, NO_OWNER_MESSAGE, OwnerRoutingInterceptor
from mahjong_table.servicer import METHOD_ROLES, TABLE_ERROR_MAPPING, Presence, TableServicer
from mahjong_table.tables import MOVED_MESSAGE, TableEngine, TableMovedError
from mahjong_table.testing import table_assigned
from mjctl.bots import choose_command

from .conftest import SECRET, TableServer
from .test_play_stream import PlayClient, next_of

TOPIC = "mahjong.match.v1"
PARTITIONS = 2
PLAYERS = ["east", "south", "west", "north"]


class Monotonic:
    """A replica's monotonic clock for its `Presence` (how long a seat has been away)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclasses.dataclass
class Replica:
    server: TableServer
    ownership: Ownership
    running: AioRunningServer
    presence: Presence
    metrics: ServiceMetrics
    monotonic: Monotonic

    def assign(self, *partitions: int) -> None:
        """What the consumer does after a rebalance gave this replica `partitions`."""
        self.ownership.assigned(
            Assignment(frozenset((TOPIC, partition) for partition in partitions), {TOPIC: PARTITIONS})
        )

    def stub(self, player: str, roles: tuple[str, ...] = ()) -> table_service_pb2_grpc.TableServiceStub:
        return self.server.stub_for(player, roles)


@pytest.fixture
def replicas(tmp_path: pathlib.Path) -> Iterator[tuple[Replica, Replica]]:
    database_url = sqlite_url(tmp_path, "table")
    upgrade(database_url, "mahjong_table:alembic", version_table="alembic_version_table")
    database = create_engine_for(database_url)
    session_factory = create_session_factory(database)
    started: list[Replica] = []
    for _ in range(2):
        engine = TableEngine(EventStore(), utc_now)
        metrics = ServiceMetrics("table")
        monotonic = Monotonic()
        presence = Presence(monotonic)
        # Its address once the server has a port (no port picked beforehand: another process on
        # the box could take it in between); nothing asks for it before the first assignment.
        ownership = Ownership(TOPIC, "", session_factory, engine, metrics=metrics, presence=presence)
        registration = register_service(
            messages.DESCRIPTOR.services_by_name["TableService"],
            table_service_pb2_grpc.add_TableServiceServicer_to_server,
            TableServicer(session_factory, engine, presence),
        )
        running = serve_aio(
            [registration],
            "127.0.0.1:0",
            load_settings({"MAHJONG_JWT_SECRET": SECRET}),
            interceptors=[
                AioAuthInterceptor(SECRET, METHOD_ROLES),
                OwnerRoutingInterceptor(ownership, metrics),
            ],
            extra_error_mapping=TABLE_ERROR_MAPPING,
        )
        ownership.address = f"127.0.0.1:{running.port}"
        started.append(
            Replica(
                TableServer(running.port, engine, session_factory),
                ownership,
                running,
                presence,
                metrics,
                monotonic,
            )
        )
    yield started[0], started[1]
    for replica in started:
        replica.running.stop(0)
    database.dispose()


def table_in(partition: int) -> str:
    """A fresh table id whose TableAssigned Kafka puts on `partition`."""
    while True:
        table_id = str(uuid.uuid4())
        if partition_of(table_id, PARTITIONS) == partition:
            return table_id


def open_at(owner: Replica, partition: int, **rules: int) -> str:
    return owner.server.open_table(
        PLAYERS, seed=3, table_id=table_in(partition), match_partition=partition, **rules
    )


def a_table_of_b(a: Replica, b: Replica) -> str:
    """a owns partition 0 and b partition 1, a has read the directory; a new table of b's."""
    a.assign(0)
    b.assign(1)
    a.ownership.refresh_directory()
    return open_at(b, 1)


def act_once(replica: Replica, table_id: str) -> messages.ActResponse:
    """The first seat the table waits on acts (its bot decision), through `replica`."""
    for player in PLAYERS:
        stub = replica.stub(player)
        request = choose_command(stub.GetView(messages.GetViewRequest(table_id=table_id)))
        if request is not None:
            response: messages.ActResponse = stub.Act(request)
            return response
    raise AssertionError("nobody is waited on")


def stored_version(replica: Replica, table_id: str) -> int:
    with read_transaction(replica.server.session_factory) as session:  # type: ignore[arg-type]
        return replica.server.engine.store.stream_version(session, table_id)


def epochs(replica: Replica) -> dict[int, tuple[str, int]]:
    with read_transaction(replica.server.session_factory) as session:  # type: ignore[arg-type]
        rows = session.execute(
            sqlalchemy.select(
                table_partition_owners.c.partition,
                table_partition_owners.c.owner_address,
                table_partition_owners.c.epoch,
            )
        ).all()
    return {row.partition: (row.owner_address, row.epoch) for row in rows}


class _Cluster:
    """What kafka-python's partitioner reads of the cluster metadata: one topic's partitions."""

    def __init__(self, count: int) -> None:
        self._partitions = set(range(count))

    def topics(self) -> set[str]:
        return {TOPIC}

    def partitions_for_topic(self, _topic: str) -> set[int]:
        return self._partitions

    def available_partitions_for_topic(self, _topic: str) -> set[int]:
        return self._partitions


def test_a_tables_partition_is_the_one_kafkas_default_partitioner_gives_its_key() -> None:
    """The outbox relay publishes a TableAssigned keyed by its table id (the stream id) with
    kafka-python's default partitioner; `partition_of` must name the same partition."""
    partitioner = DefaultPartitioner()
    chooser = random.Random(11)
    for count in (1, 2, 6, 7, 32):
        cluster = _Cluster(count)
        for _ in range(200):
            table_id = str(uuid.UUID(int=chooser.getrandbits(128)))
            key = table_id.encode()
            assert partition_of(table_id, count) == partitioner.partition(
                TOPIC, table_id, key, None, b"", cluster
            )


def test_the_directory_names_each_partitions_owner_and_a_new_owner_raises_its_epoch(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    a.assign(0, 1)
    b.assign()
    assert epochs(a) == {0: (a.ownership.address, 1), 1: (a.ownership.address, 1)}
    b.ownership.refresh_directory()
    table = table_in(1)
    assert a.ownership.route(table) is LOCAL and b.ownership.route(table) == a.ownership.address

    # A rebalance moves partition 1 to b: a new owner, a new epoch; partition 0 stays a's at epoch 1.
    a.assign(0)
    b.assign(1)
    assert epochs(a) == {0: (a.ownership.address, 1), 1: (b.ownership.address, 2)}
    assert a.ownership.route(table) is None  # until a reads the directory again
    a.ownership.refresh_directory()
    assert a.ownership.route(table) == b.ownership.address and b.ownership.route(table) is LOCAL
    a.assign(0)  # the same partitions again (every rebalance reassigns them): no new claim
    assert epochs(a)[0] == (a.ownership.address, 1)


def test_a_replica_taking_a_partition_over_loads_its_tables_and_reloads_what_it_missed(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    a.assign(0, 1)
    table = open_at(a, 1)
    act_once(a, table)
    before = stored_version(a, table)

    a.assign(0)
    assert not a.server.engine.in_memory(table)  # another replica's now: nothing of it stays at a
    b.assign(1)  # b takes the table over: loaded from the event store, at the stored version
    loaded = b.server.engine.cached_state(table)
    assert loaded is not None and loaded.version == before
    act_once(b, table)
    assert stored_version(b, table) > before
    for player in PLAYERS[:3]:  # three escapes end the game (RULES.md 1.10) while b owns it
        request = messages.ActRequest(table_id=table, idempotency_key=f"leave-{player}")
        request.leave.SetInParent()
        b.stub(player).Act(request)
    assert b.server.view("north", table).phase == "ended"

    # a gets it back: what it cached is from before b's acts, so it is dropped, never served.
    b.assign()
    a.assign(0, 1)
    assert a.server.view("north", table).phase == "ended"
    again = a.server.engine.cached_state(table)
    assert again is not None and again.version == stored_version(a, table)


def test_a_call_to_any_replica_is_answered_by_the_owner(replicas: tuple[Replica, Replica]) -> None:
    a, b = replicas
    table = a_table_of_b(a, b)
    view = a.server.view("east", table)  # asked of a, forwarded to b
    assert view.table_id == table and view.your_seat == 0
    answer = act_once(a, table)
    assert answer.sequence > 0 and stored_version(b, table) > 1
    first = next(iter(a.stub("east").WatchView(messages.WatchViewRequest(table_id=table), timeout=30)))
    assert first.view.sequence == a.server.view("east", table).sequence
    # The owner's refusals come back as it answered them.
    with pytest.raises(grpc.RpcError) as refused:
        a.server.view("somebody-else", table)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as malformed:
        a.server.view("east", "")
    assert malformed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # Ops watch through either replica with full information (the wall is in TableOpened).
    watch = a.stub("ops-1", ("ops",)).Watch(messages.WatchRequest(table_id=table), timeout=30)
    opened = next(watch)
    watch.cancel()
    assert opened.WhichOneof("payload") == "table_opened" and opened.table_opened.wall


def test_a_stream_of_a_table_that_moves_ends_unavailable_and_resumes_at_the_new_owner(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    a.assign(0)
    b.assign(1)
    table = open_at(b, 1)
    feed = b.stub("east").WatchView(messages.WatchViewRequest(table_id=table), timeout=60)
    first = next(feed)
    b.assign()
    a.assign(0, 1)
    with pytest.raises(grpc.RpcError) as ended:
        next(feed)
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE and ended.value.details() == MOVED_MESSAGE
    b.ownership.refresh_directory()
    resumed = b.stub("east").WatchView(
        messages.WatchViewRequest(table_id=table, after_sequence=first.view.sequence), timeout=60
    )
    update = next(resumed)  # served by a, the new owner, through b
    resumed.cancel()
    assert update.view.sequence == first.view.sequence and not update.events


def test_a_table_no_replica_serves_is_unavailable_and_the_answer_names_nothing(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    table = table_in(1)
    with pytest.raises(grpc.RpcError) as unknown:  # no assignment yet: no partition known
        a.server.view("east", table)
    assert unknown.value.code() == grpc.StatusCode.UNAVAILABLE
    assert unknown.value.details() == NO_OWNER_MESSAGE
    a.assign(0)
    b.assign(1)
    open_at(b, 1)
    a.ownership.refresh_directory()
    # A call already forwarded once is not forwarded again (the table is moving).
    stub = table_service_pb2_grpc.TableServiceStub(open_channel(f"127.0.0.1:{a.server.port}"))
    token = mint_token(SECRET, "east")
    with pytest.raises(grpc.RpcError) as twice:
        stub.GetView(
            messages.GetViewRequest(table_id=table),
            metadata=[("authorization", f"Bearer {token}"), (FORWARDED_BY_METADATA_KEY, "elsewhere:1")],
        )
    assert twice.value.code() == grpc.StatusCode.UNAVAILABLE and twice.value.details() == NO_OWNER_MESSAGE
    # The owner is down: UNAVAILABLE, with neither its address nor the transport's words.
    b.running.stop(0)
    with pytest.raises(grpc.RpcError) as down:
        a.server.view("east", table)
    assert down.value.code() == grpc.StatusCode.UNAVAILABLE and down.value.details() == NO_OWNER_MESSAGE


def test_only_the_owner_fires_a_tables_timers_and_a_new_owner_fires_them_after_a_takeover(
    replicas: tuple[Replica, Replica],
) -> None:
    """RULES.md 1.10: the server acts for a player whose time ran out. The owner that opened the
    table dies (its worker never runs again); the replica that takes its partition over finds the
    recorded deadline and the game still ends."""
    a, b = replicas
    a.assign(0, 1)
    table = open_at(a, 1, turn_timeout_ms=0)
    later = utc_now() + datetime.timedelta(hours=1)  # the worker's clock: every deadline has passed
    worker_b = DeadlineWorker(
        b.server.session_factory, b.server.engine, b.presence, lambda: later, b.ownership
    )  # type: ignore[arg-type]
    b.assign()
    assert worker_b.expire_deadlines() == 0  # not b's table
    taken_over_at = utc_now()
    b.assign(0, 1)  # a is gone: b takes both partitions
    # The deadline that passed while nobody served the table is moved past the takeover.
    assert b.server.view("east", table).deadline.ToDatetime(datetime.UTC) >= taken_over_at + TAKEOVER_GRACE
    for _ in range(2000):
        if not worker_b.expire_deadlines():
            break
    assert b.server.view("east", table).phase == "ended"


def test_a_play_stream_opened_at_any_replica_is_played_at_the_owner_until_the_table_moves(
    replicas: tuple[Replica, Replica],
) -> None:
    a, b = replicas
    table = a_table_of_b(a, b)
    client = PlayClient(a.stub("east"), table)  # opened at a, played at b
    try:
        view = next_of(client, "update").update.view
        request = choose_command(view)  # every seat picks its exchange at once
        assert request is not None
        client.send(request)
        answer = next_of(client, "answer").answer
        assert answer.idempotency_key == request.idempotency_key and answer.code == 0
        b.assign()
        a.assign(0, 1)  # the table moves to a: b ends the stream, a passes that on
        with pytest.raises(grpc.RpcError) as ended:
            for _response in client.responses:
                pass
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert ended.value.details() in (MOVED_MESSAGE, NO_OWNER_MESSAGE)
    finally:
        client.close()


def test_a_replica_not_yet_told_it_lost_a_table_cannot_write_it_once_another_has_taken_it_over(
    replicas: tuple[Replica, Replica],
) -> None:
    """Kafka gives the partition to b, which claims it and loads the table, before a's consumer is
    told (found by `mjctl run --replicas 2`: a's write in that window was never seen by b, whose
    cache then served a table stuck at the older version). The fence refuses a's write."""
    a, b = replicas
    a.assign(0, 1)
    table = open_at(a, 1)
    b.assign(1)  # a has not been told yet
    assert a.ownership.route(table) is LOCAL
    with pytest.raises(grpc.RpcError) as refused:
        act_once(a, table)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE and refused.value.details() == MOVED_MESSAGE
    taken_over = b.server.engine.cached_state(table)
    assert taken_over is not None and taken_over.version == stored_version(b, table)
    act_once(b, table)  # the new owner plays on
    assert stored_version(b, table) > taken_over.version


def test_a_replicas_metrics_count_its_partitions_takeovers_and_forwarded_calls(
    replicas: tuple[Replica, Replica],
) -> None:
    """README "Metrics": what an operator watches of the replicas."""
    a, b = replicas
    a.assign(0, 1)
    table = a_table_of_b(a, b)
    a.server.view("east", table)  # forwarded to b
    assert a.metrics.registry.get_sample_value("mahjong_table_owned_partitions") == 1
    assert b.metrics.registry.get_sample_value("mahjong_table_owned_partitions") == 1
    assert a.metrics.registry.get_sample_value("mahjong_table_partitions_taken_over_total") == 2
    assert b.metrics.registry.get_sample_value("mahjong_table_partitions_taken_over_total") == 1
    forwarded = {"method": "/mahjong.v1.TableService/GetView"}
    assert a.metrics.registry.get_sample_value("mahjong_table_forwarded_calls_total", forwarded) == 1
    assert b.metrics.registry.get_sample_value("mahjong_table_forwarded_calls_total", forwarded) is None


def test_the_fence_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from mahjong_table import fence_bench

    assert fence_bench.main(["--transactions", "5"]) == 0
    assert "with the fence of 4 tables" in capsys.readouterr().out


def test_the_routing_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from mahjong_table import routing_bench

    assert routing_bench.main(["--calls", "5"]) == 0
    assert "forwarded by another replica" in capsys.readouterr().out


def test_a_table_assignment_read_by_a_replica_that_lost_its_partition_is_left_to_the_new_owner(
    replicas: tuple[Replica, Replica],
) -> None:
    """The old owner's consumer, not yet told, applies a TableAssigned of a partition b has taken
    over: the fence refuses it, and that must not dead-letter it or store its position (the
    positions are the group's, shared): b's consumer reads it again and opens the table."""
    a, b = replicas
    a.assign(0, 1)
    b.assign(1)  # a has not been told yet
    table = table_in(1)
    assigned = new_envelope(table_assigned(table, PLAYERS), stream_id=table, clock=utc_now)
    delivery = Delivery(assigned, MessagePosition(TOPIC, 1, 41))
    dead_letters: list[str] = []

    def consumer_of(replica: Replica) -> BatchApplier:
        return BatchApplier(
            replica.server.session_factory,  # type: ignore[arg-type]
            "table-openings",
            per_event(table_opening_handler(replica.server.engine)),
            lambda _delivery, error: dead_letters.append(error),
        )

    with pytest.raises(TableMovedError):
        consumer_of(a).apply([delivery], [delivery.position])
    assert dead_letters == [] and stored_version(a, table) == 0
    with read_transaction(a.server.session_factory) as session:  # type: ignore[arg-type]
        assert session.execute(sqlalchemy.select(consumer_positions)).all() == []
    consumer_of(b).apply([delivery], [delivery.position])
    assert dead_letters == [] and stored_version(b, table) > 0


def test_a_replica_taking_a_table_back_gives_its_seats_a_fresh_reconnect_grace(
    replicas: tuple[Replica, Replica],
) -> None:
    """RULES.md 1.10: a seat escapes once disconnected past the room's reconnect grace. a owned the
    table and saw its seats' streams end when b took it over; the players played on at b for an
    hour; b dies and a takes the table back: what a remembers of their absence is from before that
    hour and must not make them escape at once. Their grace starts at the takeover."""
    a, b = replicas
    a.assign(0, 1)
    table = open_at(a, 1, reconnect_grace_ms=60_000)
    for seat in range(len(PLAYERS)):
        a.presence.connected(table, seat)
    b.assign(1)
    a.assign(0)
    for seat in range(len(PLAYERS)):
        a.presence.disconnected(table, seat)  # a's streams of the table end: it moved
    a.monotonic.now += 3600  # an hour at b
    b.assign()
    a.assign(0, 1)
    worker = DeadlineWorker(a.server.session_factory, a.server.engine, a.presence, utc_now, a.ownership)  # type: ignore[arg-type]
    assert worker.escape_disconnected() == 0
    assert a.server.view("east", table).phase != "ended"
    a.monotonic.now += 61  # nobody reconnected within the grace: they escape (three end the game)
    assert worker.escape_disconnected() > 0
    assert a.server.view("east", table).phase == "ended"


def test_a_table_taken_back_shows_the_deadline_its_takeover_granted(
    replicas: tuple[Replica, Replica],
) -> None:
    """The turn timer of RULES.md 1.10 moved past a takeover (TAKEOVER_GRACE) is the one a view
    shows, also at a replica that remembered the deadline it wrote itself at the same version."""
    a, b = replicas
    a.assign(0, 1)
    table = open_at(a, 1, turn_timeout_ms=1000)
    act_once(a, table)  # a writes a version, and remembers its deadline
    first = a.server.view("east", table).deadline.ToDatetime(datetime.UTC)
    b.assign(1)  # b takes the table over, and a is told; nobody acts
    a.assign(0)
    b.assign()
    taken_back_at = utc_now()
    a.assign(0, 1)
    shown = a.server.view("east", table).deadline.ToDatetime(datetime.UTC)
    assert shown >= taken_back_at + TAKEOVER_GRACE > first


def test_a_table_engine_says_serving_from_its_first_partition_assignment_on(tmp_path: pathlib.Path) -> None:
    """Before its first assignment a replica knows no table's partition: every call would be
    UNAVAILABLE, so its health says NOT_SERVING (a load balancer sends it nothing) until then; an
    assignment of no partition (more replicas than partitions) still lets it forward."""
    database_url = sqlite_url(tmp_path, "table")
    upgrade(database_url, "mahjong_table:alembic", version_table="alembic_version_table")
    database = create_engine_for(database_url)
    settings = load_settings({"MAHJONG_JWT_SECRET": SECRET})
    topics = Topics.with_prefix(settings.topic_prefix)
    process = TableProcess(TableEngine(EventStore(), utc_now), Presence(), settings)
    try:
        process.registrations(database, settings, topics)
        assert definition(settings).serving_when is not None
        serving = process.serving()
        assert not serving.is_set()
        process.ownership(database, topics).assigned(Assignment(frozenset(), {topics.match: PARTITIONS}))
        assert serving.is_set()
    finally:
        database.dispose()


GRPC_TIMEOUT_ROUNDING_SECONDS = 1.0


class RecordingOwner(table_service_pb2_grpc.TableServiceServicer):
    """Stands for the owning replica: records the deadline and metadata each call arrives with."""

    def __init__(self) -> None:
        self.seen: list[tuple[float | None, dict[str, str | bytes]]] = []

    def _record(self, context: grpc.aio.ServicerContext) -> None:
        self.seen.append((context.time_remaining(), dict(context.invocation_metadata() or ())))

    async def GetView(
        self, request: messages.GetViewRequest, context: grpc.aio.ServicerContext
    ) -> messages.TableView:
        self._record(context)
        return messages.TableView(table_id=request.table_id)

    async def WatchView(
        self, request: messages.WatchViewRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[messages.TableUpdate]:
        self._record(context)
        update = messages.TableUpdate()
        update.view.table_id = request.table_id
        yield update

    async def Play(
        self, requests: AsyncIterator[messages.PlayRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[messages.PlayResponse]:
        self._record(context)
        async for request in requests:
            response = messages.PlayResponse()
            response.update.view.table_id = request.open.table_id
            yield response
            return


def test_a_forwarded_call_reaches_the_owner_with_the_callers_token_and_remaining_deadline(
    replicas: tuple[Replica, Replica],
) -> None:
    """The owner authenticates the caller again and spends no more than the caller's time (its
    own downstream waits are bounded by it): a unary call, a server stream and a two-way stream
    each arrive with the caller's token, the forwarder's mark, and a deadline within the caller's."""
    a, _b = replicas
    owner = RecordingOwner()
    running = serve_aio(
        [
            register_service(
                messages.DESCRIPTOR.services_by_name["TableService"],
                table_service_pb2_grpc.add_TableServiceServicer_to_server,
                owner,  # type: ignore[abstract]  # only what the forwards call
            )
        ],
        "127.0.0.1:0",
        load_settings({"MAHJONG_JWT_SECRET": SECRET}),
    )
    try:
        a.assign(0)
        with transaction(a.server.session_factory) as session:  # type: ignore[arg-type]
            session.execute(
                table_partition_owners.insert().values(
                    topic=TOPIC,
                    partition=1,
                    owner_address=f"127.0.0.1:{running.port}",
                    owner_instance="the-owner",
                    epoch=1,
                    claimed_at=utc_now(),
                )
            )
        a.ownership.refresh_directory()
        table = table_in(1)
        # One token for every call, compared below (a token minted again later may carry another iat).
        token = mint_token(SECRET, "east")
        stub = table_service_pb2_grpc.TableServiceStub(open_channel(f"127.0.0.1:{a.server.port}", token))
        assert stub.GetView(messages.GetViewRequest(table_id=table), timeout=30).table_id == table
        watched = stub.WatchView(messages.WatchViewRequest(table_id=table), timeout=30)
        assert next(watched).view.table_id == table
        watched.cancel()
        play = stub.Play(
            iter([messages.PlayRequest(open=messages.WatchViewRequest(table_id=table))]), timeout=30
        )
        assert next(play).update.view.table_id == table
        play.cancel()
        assert len(owner.seen) == 3
        for remaining, metadata in owner.seen:
            # The caller's 30 s, give or take gRPC's rounding up of the wire's timeout (grpc-timeout).
            assert remaining is not None and 0 < remaining <= 30 + GRPC_TIMEOUT_ROUNDING_SECONDS
            assert metadata["authorization"] == f"Bearer {token}"
            assert metadata[FORWARDED_BY_METADATA_KEY] == a.ownership.address
    finally:
        running.stop(0)


def test_a_forwarded_stream_the_caller_cancels_ends_at_the_owner_too(
    replicas: tuple[Replica, Replica],
) -> None:
    """RULES.md 1.10's reconnect grace counts from when a seat's last stream ends at the owner: a
    stream cancelled by a client of the forwarding replica must end there too (else the seat stays
    present and never escapes)."""
    a, b = replicas
    table = a_table_of_b(a, b)
    # Its deadline far beyond the wait below: only the cancellation can end it at b in time.
    feed = a.stub("east").WatchView(messages.WatchViewRequest(table_id=table), timeout=600)
    next(feed)  # served by b through a: b counts east's stream
    assert b.presence.away_seconds(table, 0) == 0.0
    feed.cancel()
    deadline = time.monotonic() + 60  # a bound on waiting for b to see the end, not a figure
    while b.presence.away_seconds(table, 0) == 0.0:
        assert time.monotonic() < deadline, "the owner never saw the forwarded stream end"
        b.monotonic.now += 1  # away since the end: more than 0 once it ended
        time.sleep(0.01)
