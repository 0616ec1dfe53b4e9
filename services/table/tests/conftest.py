"""A real TableService gRPC server (asyncio, as the service runs it) on a free port over a
migrated SQLite database (no Kafka: tables are opened by calling the same function the
match-topic consumer calls)."""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Iterator

import pytest
from mahjong.v1 import table_service_pb2, table_service_pb2_grpc
from mahjong_platform.aio_grpc_server import AioAuthInterceptor, serve_aio
from mahjong_platform.auth import mint_token
from mahjong_platform.config import load_settings
from mahjong_platform.database import create_engine_for, create_session_factory, sqlite_url, transaction
from mahjong_platform.envelopes import utc_now
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_client import open_channel
from mahjong_platform.grpc_server import register_service
from mahjong_platform.migrations import upgrade
from mahjong_table.servicer import METHOD_ROLES, TABLE_ERROR_MAPPING, Presence, TableServicer
from mahjong_table.tables import TableEngine
from mahjong_table.testing import table_assigned

SECRET = "table-service-test-secret-0123456789abcdef"


class TableServer:
    def __init__(
        self, port: int, engine: TableEngine, session_factory: object, servicer: TableServicer | None = None
    ) -> None:
        self.port = port
        self.engine = engine
        self.session_factory = session_factory
        self.servicer = servicer

    def stub_for(
        self, player_id: str | None, roles: tuple[str, ...] = ()
    ) -> table_service_pb2_grpc.TableServiceStub:
        token = None if player_id is None else mint_token(SECRET, player_id, roles)
        return table_service_pb2_grpc.TableServiceStub(open_channel(f"127.0.0.1:{self.port}", token))

    def open_table(
        self,
        players: list[str],
        seed: int = 7,
        *,
        table_id: str | None = None,
        match_partition: int | None = None,
        **rules: int,
    ) -> str:
        table_id = table_id or str(uuid.uuid4())
        assigned = table_assigned(
            table_id,
            players,
            seed=seed,
            turn_timeout_ms=rules.get("turn_timeout_ms", 60_000),
            reconnect_grace_ms=rules.get("reconnect_grace_ms", 600_000),
        )
        with transaction(self.session_factory) as session:  # type: ignore[arg-type]
            envelopes = self.engine.open_from_assignment(
                session, assigned, causation_id="test", match_partition=match_partition
            )
        self.engine.committed(envelopes)
        return table_id

    def view(self, player: str, table_id: str) -> table_service_pb2.TableView:
        return self.stub_for(player).GetView(table_service_pb2.GetViewRequest(table_id=table_id))


@pytest.fixture
def table_server(tmp_path: pathlib.Path) -> Iterator[TableServer]:
    database_url = sqlite_url(tmp_path, "table")
    upgrade(database_url, "mahjong_table:alembic", version_table="alembic_version_table")
    database = create_engine_for(database_url)
    session_factory = create_session_factory(database)
    engine = TableEngine(EventStore(), utc_now)
    servicer = TableServicer(session_factory, engine, Presence())
    registration = register_service(
        table_service_pb2.DESCRIPTOR.services_by_name["TableService"],
        table_service_pb2_grpc.add_TableServiceServicer_to_server,
        servicer,
    )
    running = serve_aio(
        [registration],
        "127.0.0.1:0",
        load_settings({"MAHJONG_JWT_SECRET": SECRET}),
        interceptors=[AioAuthInterceptor(SECRET, METHOD_ROLES)],
        extra_error_mapping=TABLE_ERROR_MAPPING,
    )
    yield TableServer(running.port, engine, session_factory, servicer)
    running.stop(0)
    database.dispose()
