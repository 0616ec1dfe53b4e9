"""A real matchmaking gRPC server (`grpc.aio`, as the service runs) on a free port, backed by a freshly
migrated SQLite database (or the database `serve_matchmaking` is given)."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Callable, Iterator

import pytest
from mahjong.v1 import matchmaking_service_pb2, matchmaking_service_pb2_grpc
from mahjong_matchmaking.__main__ import DEFINITION
from mahjong_matchmaking.catalog import load_catalog
from mahjong_matchmaking.servicer import METHOD_ROLES, MatchmakingServicer
from mahjong_platform.aio_grpc_server import AioAuthInterceptor, serve_aio
from mahjong_platform.auth import mint_token
from mahjong_platform.config import load_settings
from mahjong_platform.database import SessionFactory, create_engine_for, create_session_factory, sqlite_url
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_client import open_channel
from mahjong_platform.grpc_server import register_service
from mahjong_platform.service_runtime import migrate

SECRET = "matchmaking-test-secret-0123456789abcdef"
Stub = matchmaking_service_pb2_grpc.MatchmakingServiceStub


class Matchmaking:
    """The running server: a stub per player, the database, and the balances the floor check reads."""

    def __init__(
        self,
        port: int,
        session_factory: SessionFactory,
        balances: dict[str, int],
        balance_lookups: list[str],
        servicer: MatchmakingServicer,
    ) -> None:
        self.port = port
        self.servicer = servicer
        self.session_factory = session_factory
        self.balances = balances
        self.balance_lookups = balance_lookups
        """The players whose balance the servicer asked for, in order."""
        self._channels: list[object] = []

    def stub_for(self, player_id: str | None, roles: tuple[str, ...] = (), *, member: bool = False) -> Stub:
        token = None if player_id is None else mint_token(SECRET, player_id, roles, member=member)
        channel = open_channel(f"127.0.0.1:{self.port}", token)
        self._channels.append(channel)
        return Stub(channel)


@pytest.fixture
def matchmaking(tmp_path: pathlib.Path) -> Iterator[Matchmaking]:
    with serve_matchmaking(sqlite_url(tmp_path, "matchmaking")) as running:
        yield running


@contextlib.contextmanager
def serve_matchmaking(database_url: str, store: EventStore | None = None) -> Iterator[Matchmaking]:
    """The server on the database at `database_url` (migrated here), appending with `store`."""
    migrate(DEFINITION, database_url)
    engine = create_engine_for(database_url)
    balances: dict[str, int] = {}
    balance_lookups: list[str] = []

    async def balance_of(player: str) -> int:
        balance_lookups.append(player)
        return balances.get(player, 1_000_000)

    servicer = MatchmakingServicer(
        create_session_factory(engine), load_catalog(), store or EventStore(), balance_of
    )
    settings = load_settings({"MAHJONG_JWT_SECRET": SECRET})
    registration = register_service(
        matchmaking_service_pb2.DESCRIPTOR.services_by_name["MatchmakingService"],
        matchmaking_service_pb2_grpc.add_MatchmakingServiceServicer_to_server,
        servicer,
    )
    running = serve_aio(
        [registration], "127.0.0.1:0", settings, interceptors=[AioAuthInterceptor(SECRET, METHOD_ROLES)]
    )
    try:
        yield Matchmaking(running.port, create_session_factory(engine), balances, balance_lookups, servicer)
    finally:
        running.stop(0)
        engine.dispose()


@pytest.fixture
def enqueue(matchmaking: Matchmaking) -> Callable[[str, str], str]:
    def call(player_id: str, room_id: str = "sichuan-novice") -> str:
        response = matchmaking.stub_for(player_id).Enqueue(
            matchmaking_service_pb2.EnqueueRequest(room_id=room_id, idempotency_key=f"{player_id}-{room_id}")
        )
        return str(response.ticket_id)

    return call
