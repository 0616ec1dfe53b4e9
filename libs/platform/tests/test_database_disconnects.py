"""A call whose database connection drops is answered UNAVAILABLE (retry), not INTERNAL.

The connection is really dropped: the real PostgreSQL terminates the backend of the connection a
handler has checked out (`pg_terminate_backend`), between its check-out (which would have replaced a
connection the server closed while it was idle) and its statement, as when the database host goes
away without closing the socket. Both servers are tested: the thread-pool one (`serve`, its
`ErrorMappingInterceptor`) and the asyncio one (`serve_aio`, its flat wrapper's mapping). The
message names nothing of the database (no host, no statement); the next call gets a new connection
and succeeds. A failure to connect at all is UNAVAILABLE too; a wrong statement stays INTERNAL.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import sqlalchemy
from mahjong.v1 import ledger_service_pb2, ledger_service_pb2_grpc
from mahjong_platform.aio_grpc_server import AioAuthInterceptor, serve_aio
from mahjong_platform.auth import EVERY_CALLER, mint_token
from mahjong_platform.config import load_settings
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.errors import DATABASE_UNAVAILABLE_MESSAGE, client_status, is_database_unavailable
from mahjong_platform.grpc_client import open_channel
from mahjong_platform.grpc_server import register_service, serve

SECRET = "disconnect-test-secret-that-is-long-enough-for-hs256"
SETTINGS = load_settings({"MAHJONG_JWT_SECRET": SECRET})
ROLES = {"/mahjong.v1.LedgerService/GetBalance": EVERY_CALLER}
BACKEND_GONE_ATTEMPTS = 500


class BackendKiller:
    """Armed, it terminates the backend of the next statement's connection before the statement
    runs, and waits until the server has let the backend go."""

    def __init__(self, engine: sqlalchemy.Engine, admin: sqlalchemy.Engine) -> None:
        self._admin = admin
        self._armed = threading.Event()
        self.killed_pids: list[int] = []
        sqlalchemy.event.listen(engine, "before_cursor_execute", self._before_cursor_execute)

    def arm(self) -> None:
        self._armed.set()

    def _before_cursor_execute(self, connection: sqlalchemy.Connection, *_arguments: Any) -> None:
        if not self._armed.is_set():
            return
        self._armed.clear()
        pid = connection.connection.dbapi_connection.info.backend_pid  # type: ignore[union-attr]
        with self._admin.connect() as admin:
            assert admin.execute(sqlalchemy.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()
            gone = sqlalchemy.text("SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = :pid")
            for _attempt in range(BACKEND_GONE_ATTEMPTS):
                if admin.execute(gone, {"pid": pid}).scalar_one():
                    break
                time.sleep(0.02)
        self.killed_pids.append(pid)


def balance_from_the_database(session_factory: Any, account: str) -> ledger_service_pb2.GetBalanceResponse:
    with transaction(session_factory) as session:
        if account == "bad-statement":
            session.execute(sqlalchemy.text("SELECT secret FROM no_such_table"))
        pid = session.execute(sqlalchemy.text("SELECT pg_backend_pid()")).scalar_one()
    return ledger_service_pb2.GetBalanceResponse(account=account, balance_beans=pid)


class DatabaseLedger(ledger_service_pb2_grpc.LedgerServiceServicer):
    """GetBalance answers with its connection's backend pid, read in a transaction."""

    def __init__(self, engine: sqlalchemy.Engine) -> None:
        self._session_factory = create_session_factory(engine)

    def GetBalance(
        self, request: Any, context: grpc.ServicerContext
    ) -> ledger_service_pb2.GetBalanceResponse:
        return balance_from_the_database(self._session_factory, request.account)


class AsyncDatabaseLedger(ledger_service_pb2_grpc.LedgerServiceServicer):
    """The same on the asyncio server (the database call in a worker thread)."""

    def __init__(self, engine: sqlalchemy.Engine) -> None:
        self._session_factory = create_session_factory(engine)

    async def GetBalance(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> ledger_service_pb2.GetBalanceResponse:
        return await asyncio.to_thread(balance_from_the_database, self._session_factory, request.account)


@pytest.fixture
def engines(postgres_database_url: str) -> Iterator[tuple[sqlalchemy.Engine, BackendKiller]]:
    engine = create_engine_for(postgres_database_url)
    admin = sqlalchemy.create_engine(postgres_database_url, isolation_level="AUTOCOMMIT")
    yield engine, BackendKiller(engine, admin)
    engine.dispose()
    admin.dispose()


def registration(servicer: ledger_service_pb2_grpc.LedgerServiceServicer) -> Any:
    return register_service(
        ledger_service_pb2.DESCRIPTOR.services_by_name["LedgerService"],
        ledger_service_pb2_grpc.add_LedgerServiceServicer_to_server,
        servicer,
    )


def assert_a_dropped_connection_is_unavailable_then_recovers(stub: Any, killer: BackendKiller) -> None:
    first = stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account="player:a"), timeout=30)
    killer.arm()
    with pytest.raises(grpc.RpcError) as raised:
        stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account="player:a"), timeout=30)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert raised.value.details() == DATABASE_UNAVAILABLE_MESSAGE
    assert killer.killed_pids == [first.balance_beans]
    again = stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account="player:a"), timeout=30)
    assert again.balance_beans not in killer.killed_pids
    # A wrong statement is a bug, not an outage: INTERNAL, naming nothing of the SQL.
    with pytest.raises(grpc.RpcError) as bug:
        stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account="bad-statement"), timeout=30)
    assert bug.value.code() == grpc.StatusCode.INTERNAL
    assert "secret" not in (bug.value.details() or "") and "no_such_table" not in (bug.value.details() or "")


@pytest.mark.integration
def test_the_thread_pool_server_answers_unavailable_when_the_database_connection_drops(
    engines: tuple[sqlalchemy.Engine, BackendKiller],
) -> None:
    engine, killer = engines
    running = serve([registration(DatabaseLedger(engine))], "127.0.0.1:0", SETTINGS)  # type: ignore[abstract]
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            assert_a_dropped_connection_is_unavailable_then_recovers(
                ledger_service_pb2_grpc.LedgerServiceStub(channel), killer
            )
    finally:
        running.stop(grace_seconds=0)


@pytest.mark.integration
def test_the_asyncio_server_answers_unavailable_when_the_database_connection_drops(
    engines: tuple[sqlalchemy.Engine, BackendKiller],
) -> None:
    engine, killer = engines
    running = serve_aio(
        [registration(AsyncDatabaseLedger(engine))],  # type: ignore[abstract]
        "127.0.0.1:0",
        SETTINGS,
        interceptors=[AioAuthInterceptor(SECRET, method_roles=ROLES)],
    )
    try:
        channel = open_channel(f"127.0.0.1:{running.port}", mint_token(SECRET, "alice"))
        try:
            assert_a_dropped_connection_is_unavailable_then_recovers(
                ledger_service_pb2_grpc.LedgerServiceStub(channel), killer
            )
        finally:
            channel.close()
    finally:
        running.stop(grace_seconds=0)


def test_a_database_that_refuses_connections_is_unavailable() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # nothing listens there once closed
    engine = create_engine_for(f"postgresql+psycopg://nobody@127.0.0.1:{port}/nothing")
    try:
        with pytest.raises(sqlalchemy.exc.OperationalError) as raised, engine.connect():
            pass
    finally:
        engine.dispose()
    assert is_database_unavailable(raised.value)
    assert client_status(raised.value) == (grpc.StatusCode.UNAVAILABLE, DATABASE_UNAVAILABLE_MESSAGE)
