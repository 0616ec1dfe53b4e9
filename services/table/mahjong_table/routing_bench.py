"""`python -m mahjong_table.routing_bench [--calls N]`: what a forward to the owner adds to a call
(README "Scale-out: replicas").

Two table-engine servers on one SQLite database, as two replicas: the second owns the partition of
one open table. A seated player's GetView is timed, alternately, at the owner and at the other
replica (which forwards it); both medians are printed. One process runs both servers and the
client, so the figure includes the forwarder's work, not a network hop between machines.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from mahjong.v1 import table_service_pb2, table_service_pb2_grpc
from mahjong_platform.aio_grpc_server import AioAuthInterceptor, AioRunningServer, serve_aio
from mahjong_platform.auth import mint_token
from mahjong_platform.config import load_settings
from mahjong_platform.database import create_engine_for, create_session_factory, sqlite_url, transaction
from mahjong_platform.envelopes import utc_now
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_client import open_channel
from mahjong_platform.grpc_server import register_service
from mahjong_platform.migrations import upgrade
from mahjong_platform.tracked_consumer import Assignment

from mahjong_table.ownership import Ownership, partition_of
from mahjong_table.routing import OwnerRoutingInterceptor
from mahjong_table.servicer import METHOD_ROLES, TABLE_ERROR_MAPPING, Presence, TableServicer
from mahjong_table.tables import TableEngine
from mahjong_table.testing import table_assigned

TOPIC = "mahjong.match.v1"
PARTITIONS = 2
SECRET = "routing-bench-secret-0123456789abcdef0123"
PLAYERS = ["east", "south", "west", "north"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _replica(
    session_factory: object, partitions: set[int]
) -> tuple[AioRunningServer, TableEngine, Ownership]:
    port = _free_port()
    engine = TableEngine(EventStore(), utc_now)
    ownership = Ownership(TOPIC, f"127.0.0.1:{port}", session_factory, engine)  # type: ignore[arg-type]
    registration = register_service(
        table_service_pb2.DESCRIPTOR.services_by_name["TableService"],
        table_service_pb2_grpc.add_TableServiceServicer_to_server,
        TableServicer(session_factory, engine, Presence()),  # type: ignore[arg-type]
    )
    running = serve_aio(
        [registration],
        f"127.0.0.1:{port}",
        load_settings({"MAHJONG_JWT_SECRET": SECRET}),
        interceptors=[AioAuthInterceptor(SECRET, METHOD_ROLES), OwnerRoutingInterceptor(ownership)],
        extra_error_mapping=TABLE_ERROR_MAPPING,
    )
    ownership.assigned(Assignment(frozenset((TOPIC, p) for p in partitions), {TOPIC: PARTITIONS}))
    return running, engine, ownership


def _open_table(engine: TableEngine, session_factory: object, partition: int) -> str:
    table_id = next(
        candidate
        for candidate in (str(uuid.uuid4()) for _ in range(1000))
        if partition_of(candidate, PARTITIONS) == partition
    )
    assigned = table_assigned(table_id, PLAYERS, seed=1, turn_timeout_ms=600_000)
    with transaction(session_factory) as session:  # type: ignore[arg-type]
        engine.open_from_assignment(session, assigned, causation_id="bench", match_partition=partition)
    return table_id


def measure(calls: int) -> tuple[float, float]:
    """Median seconds of a GetView at the owner and of one forwarded by the other replica."""
    with tempfile.TemporaryDirectory() as directory:
        url = sqlite_url(Path(directory), "table")
        upgrade(url, "mahjong_table:alembic", version_table="alembic_version_table")
        database = create_engine_for(url)
        session_factory = create_session_factory(database)
        other, _, other_ownership = _replica(session_factory, {0})
        owner, owner_engine, _ = _replica(session_factory, {1})
        try:
            other_ownership.refresh_directory()
            table_id = _open_table(owner_engine, session_factory, 1)
            token = mint_token(SECRET, "east")
            stubs = [
                table_service_pb2_grpc.TableServiceStub(open_channel(f"127.0.0.1:{running.port}", token))
                for running in (owner, other)
            ]
            request = table_service_pb2.GetViewRequest(table_id=table_id)
            times: list[list[float]] = [[], []]
            for index in range(calls + 50):
                for stub, spent in zip(stubs, times, strict=True):
                    started = time.perf_counter()
                    stub.GetView(request, timeout=30)
                    if index >= 50:  # the first calls warm the channels and caches
                        spent.append(time.perf_counter() - started)
            return statistics.median(times[0]), statistics.median(times[1])
        finally:
            other.stop(0)
            owner.stop(0)
            database.dispose()


def main(arguments: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mahjong_table.routing_bench", description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parsed = parser.parse_args(arguments)
    direct, forwarded = measure(parsed.calls)
    print(
        f"GetView at the owner {direct * 1e3:.2f} ms, forwarded by another replica {forwarded * 1e3:.2f} ms "
        f"(+{(forwarded - direct) * 1e3:.2f} ms; medians of {parsed.calls})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
