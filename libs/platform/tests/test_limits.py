"""Per-caller limits (issue 17): one caller cannot take every worker of a server.

On a real in-process server with the auth and limit interceptors: a caller beyond its open-stream
limit is RESOURCE_EXHAUSTED while other callers still stream and call; streams of all callers
together leave room for unary calls; idle streams are cancelled by the sweep.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from mahjong.v1 import (
    envelope_pb2,
    ledger_service_pb2,
    ledger_service_pb2_grpc,
    table_service_pb2,
    table_service_pb2_grpc,
)
from mahjong_platform.aio_grpc_server import AioAuthInterceptor, AioCallerLimitInterceptor, serve_aio
from mahjong_platform.auth import EVERY_CALLER, AuthInterceptor, mint_token
from mahjong_platform.config import load_settings
from mahjong_platform.errors import NotFoundError, ResourceExhaustedError
from mahjong_platform.grpc_client import bearer_metadata
from mahjong_platform.grpc_server import RunningServer, register_service, serve
from mahjong_platform.limits import CallerLimiter, CallerLimitInterceptor

SECRET = "limits-test-secret-that-is-long-enough-for-hs256"
ROLES = {
    "/mahjong.v1.LedgerService/GetBalance": EVERY_CALLER,
    "/mahjong.v1.TableService/Watch": EVERY_CALLER,
}


class OpenEndedTable(table_service_pb2_grpc.TableServiceServicer):
    """A Watch stream that sends one event, then stays open (idle) until the client goes away."""

    def Watch(
        self, request: table_service_pb2.WatchRequest, context: grpc.ServicerContext
    ) -> Iterator[envelope_pb2.Envelope]:
        yield envelope_pb2.Envelope(stream_id=request.table_id, sequence=1)
        while context.is_active():
            time.sleep(0.02)


class Ledger(ledger_service_pb2_grpc.LedgerServiceServicer):
    def GetBalance(
        self, request: ledger_service_pb2.GetBalanceRequest, context: grpc.ServicerContext
    ) -> ledger_service_pb2.GetBalanceResponse:
        return ledger_service_pb2.GetBalanceResponse(balance_beans=1)


@pytest.fixture
def limiter() -> CallerLimiter:
    return CallerLimiter(streams_per_caller=3, calls_per_caller=2, total_streams=6)


@pytest.fixture
def server(limiter: CallerLimiter) -> Iterator[RunningServer]:
    settings = load_settings({"MAHJONG_JWT_SECRET": SECRET, "MAHJONG_GRPC_MAX_WORKERS": "12"})
    running = serve(
        [
            register_service(
                table_service_pb2.DESCRIPTOR.services_by_name["TableService"],
                table_service_pb2_grpc.add_TableServiceServicer_to_server,
                OpenEndedTable(),  # type: ignore[abstract]  # implements only what the tests call
            ),
            register_service(
                ledger_service_pb2.DESCRIPTOR.services_by_name["LedgerService"],
                ledger_service_pb2_grpc.add_LedgerServiceServicer_to_server,
                Ledger(),  # type: ignore[abstract]
            ),
        ],
        "127.0.0.1:0",
        settings,
        interceptors=[AuthInterceptor(SECRET, ROLES), CallerLimitInterceptor(limiter)],
    )
    yield running
    running.stop(grace_seconds=0)


@pytest.fixture
def channel(server: RunningServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield channel


def open_stream(channel: grpc.Channel, player: str, roles: tuple[str, ...] = ()) -> grpc.Future:
    """An established Watch stream of ``player`` (its first event read), or the RpcError it got."""
    stub = table_service_pb2_grpc.TableServiceStub(channel)
    stream = stub.Watch(table_service_pb2.WatchRequest(table_id="t"), metadata=bearer(player, roles))
    next(stream)
    return stream


def bearer(player: str, roles: tuple[str, ...] = ()) -> tuple[tuple[str, str], ...]:
    return bearer_metadata(mint_token(SECRET, player, roles))


def refused_stream(channel: grpc.Channel, player: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        open_stream(channel, player)
    return raised.value


def balance(channel: grpc.Channel, player: str) -> int:
    stub = ledger_service_pb2_grpc.LedgerServiceStub(channel)
    response = stub.GetBalance(ledger_service_pb2.GetBalanceRequest(), metadata=bearer(player), timeout=30)
    return int(response.balance_beans)


def test_one_caller_beyond_its_streams_is_refused_while_others_stream_and_call(
    channel: grpc.Channel, limiter: CallerLimiter
) -> None:
    mallory = [open_stream(channel, "mallory") for _ in range(3)]
    error = refused_stream(channel, "mallory")
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "at most 3 per caller" in error.details()
    alice = open_stream(channel, "alice")
    assert balance(channel, "alice") == 1
    assert balance(channel, "mallory") == 1  # streams do not count against unary calls
    for stream in mallory:
        stream.cancel()
    alice.cancel()
    while limiter.held("mallory", streaming=True):  # released once the handlers see the cancel
        time.sleep(0.02)
    open_stream(channel, "mallory").cancel()


def test_streams_of_all_callers_together_leave_workers_for_unary_calls(channel: grpc.Channel) -> None:
    streams = [open_stream(channel, player) for player in ("bob", "carol") for _ in range(3)]
    error = refused_stream(channel, "dave")
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "maximum of 6 open streams" in error.details()
    assert balance(channel, "dave") == 1
    for stream in streams:
        stream.cancel()


def test_ops_callers_are_not_held_to_the_per_caller_counts(channel: grpc.Channel) -> None:
    streams = [open_stream(channel, "service.matchmaking", ("ops",)) for _ in range(5)]
    for stream in streams:
        stream.cancel()


def test_concurrent_unary_calls_beyond_the_per_caller_limit_are_refused() -> None:
    limiter = CallerLimiter(streams_per_caller=1, calls_per_caller=2)
    held = [limiter.acquire("erin", streaming=False) for _ in range(2)]
    with pytest.raises(ResourceExhaustedError, match="concurrent calls"):
        limiter.acquire("erin", streaming=False)
    limiter.acquire("frank", streaming=False).release()
    held[0].release()
    held[0].release()  # releasing twice gives back one slot only
    limiter.acquire("erin", streaming=False)
    with pytest.raises(ResourceExhaustedError):
        limiter.acquire("erin", streaming=False)


def test_a_stream_idle_past_the_limit_is_cancelled_and_an_active_one_is_not() -> None:
    now = [0.0]
    limiter = CallerLimiter(stream_idle_seconds=60, clock=lambda: now[0])
    cancelled: list[str] = []
    idle = limiter.acquire("gina", streaming=True, on_idle=lambda: cancelled.append("idle"))
    active = limiter.acquire("gina", streaming=True, on_idle=lambda: cancelled.append("active"))
    now[0] = 50.0
    active.touch()
    now[0] = 61.0
    assert limiter.sweep_idle() == 1
    assert cancelled == ["idle"]
    assert limiter.held("gina", streaming=True) == 1
    idle.release()  # the handler's own release after the cancel changes nothing more
    assert limiter.held("gina", streaming=True) == 1
    active.release()


def test_the_sweeper_cancels_an_idle_stream_on_a_real_server(
    channel: grpc.Channel, limiter: CallerLimiter
) -> None:
    stream = open_stream(channel, "henry")
    limiter.stream_idle_seconds = 0.01
    stop = threading.Event()
    sweeper = threading.Thread(target=limiter.run_sweeper, args=(stop, 0.05), daemon=True)
    sweeper.start()
    with pytest.raises(grpc.RpcError) as raised:
        next(stream)
    stop.set()
    assert raised.value.code() == grpc.StatusCode.CANCELLED


class AsyncOpenEndedTable(table_service_pb2_grpc.TableServiceServicer):
    """The asyncio harness's Watch: one event, then open until cancelled (or, for table "fails",
    an error after the event)."""

    async def Watch(
        self, request: table_service_pb2.WatchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[envelope_pb2.Envelope]:
        yield envelope_pb2.Envelope(stream_id=request.table_id, sequence=1)
        if request.table_id == "fails":
            raise NotFoundError(f"table {request.table_id} was closed")
        await asyncio.Event().wait()


def released(limiter: CallerLimiter, caller: str) -> bool:
    """True once the caller's streams are all given back (the handler saw the end); False after
    a generous minute."""
    give_up = time.monotonic() + 60
    while limiter.held(caller, streaming=True) and time.monotonic() < give_up:
        time.sleep(0.02)
    return not limiter.held(caller, streaming=True)


def test_on_the_asyncio_server_a_stream_slot_comes_back_after_a_cancel_and_after_an_error() -> None:
    """The table service runs on the asyncio harness: a refused stream is RESOURCE_EXHAUSTED (not
    UNKNOWN), and neither a client's cancel nor a handler's error keeps the caller's slot."""
    limiter = CallerLimiter(streams_per_caller=1, calls_per_caller=2, total_streams=6)
    running = serve_aio(
        [
            register_service(
                table_service_pb2.DESCRIPTOR.services_by_name["TableService"],
                table_service_pb2_grpc.add_TableServiceServicer_to_server,
                AsyncOpenEndedTable(),  # type: ignore[abstract]  # implements only what the test calls
            )
        ],
        "127.0.0.1:0",
        load_settings({"MAHJONG_JWT_SECRET": SECRET}),
        interceptors=[AioAuthInterceptor(SECRET, ROLES), AioCallerLimitInterceptor(limiter)],
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            first = open_stream(channel, "ivan")
            error = refused_stream(channel, "ivan")
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
            first.cancel()
            assert released(limiter, "ivan")
            stub = table_service_pb2_grpc.TableServiceStub(channel)
            failing = stub.Watch(table_service_pb2.WatchRequest(table_id="fails"), metadata=bearer("ivan"))
            assert next(failing).sequence == 1
            with pytest.raises(grpc.RpcError) as raised:
                next(failing)
            assert raised.value.code() == grpc.StatusCode.NOT_FOUND
            assert released(limiter, "ivan")
            open_stream(channel, "ivan").cancel()
    finally:
        running.stop(grace_seconds=0)
