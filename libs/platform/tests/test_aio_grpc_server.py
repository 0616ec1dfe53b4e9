"""The asyncio server harness on a real in-process server: the same statuses, deadline check and
authentication as the thread-pool harness, rejections counted instead of logged, health, stop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mahjong.v1 import (
    envelope_pb2,
    ledger_service_pb2,
    ledger_service_pb2_grpc,
    table_service_pb2,
    table_service_pb2_grpc,
)
from mahjong_platform.aio_grpc_server import (
    AioAuthInterceptor,
    AioDeadlineInterceptor,
    AioRunningServer,
    RejectionCounter,
    reject,
    serve_aio,
)
from mahjong_platform.auth import EVERY_CALLER, current_identity, mint_token
from mahjong_platform.config import load_settings
from mahjong_platform.errors import ConflictError, FailedPreconditionError, NotFoundError
from mahjong_platform.grpc_client import check_health, open_channel
from mahjong_platform.grpc_server import register_service

SECRET = "aio-test-secret-that-is-long-enough-for-hs256-keys"
SETTINGS = load_settings({"MAHJONG_JWT_SECRET": SECRET})
DEPOSIT = "/mahjong.v1.LedgerService/Deposit"
ROLES = {
    DEPOSIT: {"finance"},
    "/mahjong.v1.LedgerService/GetBalance": EVERY_CALLER,
    "/mahjong.v1.TableService/Watch": EVERY_CALLER,
}


class RulesLibraryError(Exception):
    """Stands in for a typed error of a library that does not import the platform."""


class AsyncLedger(ledger_service_pb2_grpc.LedgerServiceServicer):
    """GetBalance raises or rejects as the account says, else answers with the caller's id."""

    async def GetBalance(
        self, request: ledger_service_pb2.GetBalanceRequest, context: grpc.aio.ServicerContext
    ) -> ledger_service_pb2.GetBalanceResponse:
        await asyncio.sleep(0)
        if request.account == "conflict":
            raise ConflictError("the table moved on")
        if request.account == "rules":
            raise RulesLibraryError("tile 5m is not in hand")
        if request.account == "bug":
            raise KeyError("SELECT secret FROM accounts")
        if request.account == "reject":
            reject(context, grpc.StatusCode.FAILED_PRECONDITION, "not your turn")
            return ledger_service_pb2.GetBalanceResponse()
        if request.account == "abort":
            await context.abort(grpc.StatusCode.NOT_FOUND, "chosen by the handler")
        return ledger_service_pb2.GetBalanceResponse(account=current_identity().player_id, balance_beans=1)

    async def Deposit(
        self, request: ledger_service_pb2.DepositRequest, context: grpc.aio.ServicerContext
    ) -> ledger_service_pb2.DepositResponse:
        return ledger_service_pb2.DepositResponse(balance_beans=request.beans)


class AsyncTable(table_service_pb2_grpc.TableServiceServicer):
    """Watch sends two events naming the caller, then fails with NOT_FOUND."""

    async def Watch(
        self, request: table_service_pb2.WatchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[envelope_pb2.Envelope]:
        for sequence in (1, 2):
            await asyncio.sleep(0)
            yield envelope_pb2.Envelope(stream_id=current_identity().player_id, sequence=sequence)
        raise NotFoundError(f"table {request.table_id} was closed")


def serve_test_services(*inner: grpc.aio.ServerInterceptor) -> AioRunningServer:
    """The two test servicers behind the auth interceptor (and ``inner`` inside it)."""
    return serve_aio(
        [
            register_service(
                ledger_service_pb2.DESCRIPTOR.services_by_name["LedgerService"],
                ledger_service_pb2_grpc.add_LedgerServiceServicer_to_server,
                AsyncLedger(),  # type: ignore[abstract]  # implements only what the tests call
            ),
            register_service(
                table_service_pb2.DESCRIPTOR.services_by_name["TableService"],
                table_service_pb2_grpc.add_TableServiceServicer_to_server,
                AsyncTable(),  # type: ignore[abstract]
            ),
        ],
        "127.0.0.1:0",
        SETTINGS,
        interceptors=[AioAuthInterceptor(SECRET, method_roles=ROLES), *inner],
        extra_error_mapping={RulesLibraryError: grpc.StatusCode.FAILED_PRECONDITION},
    )


@pytest.fixture
def server() -> Iterator[AioRunningServer]:
    running = serve_test_services()
    yield running
    running.stop(grace_seconds=0)


def ledger(server: AioRunningServer, player: str | None = "alice") -> Any:
    token = None if player is None else mint_token(SECRET, player)
    return ledger_service_pb2_grpc.LedgerServiceStub(open_channel(f"127.0.0.1:{server.port}", token))


def balance_error(server: AioRunningServer, account: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        ledger(server).GetBalance(ledger_service_pb2.GetBalanceRequest(account=account), timeout=10)
    return raised.value


def test_a_good_token_reaches_the_handler_with_the_identity(server: AioRunningServer) -> None:
    answer = ledger(server).GetBalance(ledger_service_pb2.GetBalanceRequest(account="a"), timeout=10)
    assert answer.account == "alice"


@pytest.mark.parametrize(
    ("account", "code", "details"),
    [
        ("conflict", grpc.StatusCode.ABORTED, "the table moved on"),
        ("rules", grpc.StatusCode.FAILED_PRECONDITION, "tile 5m is not in hand"),
        ("reject", grpc.StatusCode.FAILED_PRECONDITION, "not your turn"),
        ("abort", grpc.StatusCode.NOT_FOUND, "chosen by the handler"),
    ],
)
def test_typed_errors_and_rejections_get_their_status_and_message(
    server: AioRunningServer, account: str, code: grpc.StatusCode, details: str
) -> None:
    error = balance_error(server, account)
    assert (error.code(), error.details()) == (code, details)


def test_an_expected_rejection_is_counted_not_logged(
    server: AioRunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    from mahjong_platform.aio_grpc_server import REJECTIONS

    key = ("/mahjong.v1.LedgerService/GetBalance", "ABORTED")
    before = REJECTIONS.counts().get(key, 0)
    with caplog.at_level(logging.DEBUG, logger="mahjong_platform"):
        for _ in range(3):
            balance_error(server, "conflict")
    assert REJECTIONS.counts().get(key, 0) == before + 3
    assert not [record for record in caplog.records if "the table moved on" in record.getMessage()]


def test_an_unexpected_exception_is_internal_and_leaks_nothing(
    server: AioRunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    error = balance_error(server, "bug")
    assert error.code() == grpc.StatusCode.INTERNAL
    assert "SELECT" not in error.details()
    reference = error.details().removeprefix("internal error (reference ").removesuffix(")")
    logged = [record for record in caplog.records if getattr(record, "error_reference", None) == reference]
    assert len(logged) == 1 and logged[0].exc_info is not None


def test_a_stream_sees_the_identity_and_an_error_ends_it_with_the_mapped_status(
    server: AioRunningServer,
) -> None:
    stub = table_service_pb2_grpc.TableServiceStub(
        open_channel(f"127.0.0.1:{server.port}", mint_token(SECRET, "bob"))
    )
    received = []
    with pytest.raises(grpc.RpcError) as raised:
        for event in stub.Watch(table_service_pb2.WatchRequest(table_id="t-3"), timeout=10):
            received.append((event.stream_id, event.sequence))
    assert received == [("bob", 1), ("bob", 2)]
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    assert raised.value.details() == "table t-3 was closed"


def test_a_call_without_a_token_is_unauthenticated(server: AioRunningServer) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        ledger(server, None).GetBalance(ledger_service_pb2.GetBalanceRequest(account="a"), timeout=10)
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_method_needing_a_role_refuses_a_caller_without_it(server: AioRunningServer) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        ledger(server).Deposit(ledger_service_pb2.DepositRequest(account="a", beans=1), timeout=10)
    assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_a_method_missing_from_the_role_table_is_denied(server: AioRunningServer) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        ledger(server).ListEntries(ledger_service_pb2.ListEntriesRequest(account="a"), timeout=10)
    assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_health_is_public_and_says_serving_until_shutdown(server: AioRunningServer) -> None:
    target = f"127.0.0.1:{server.port}"
    assert check_health(target) and check_health(target, "mahjong.v1.LedgerService")
    server.set_serving("mahjong.v1.LedgerService", False)
    with grpc.insecure_channel(target) as channel:
        status = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="mahjong.v1.LedgerService"), timeout=10
        )
    assert status.status == health_pb2.HealthCheckResponse.NOT_SERVING
    server.stop(grace_seconds=0)
    assert server.wait_for_termination(10)
    assert not check_health(target, timeout_seconds=1)


class FakeContext:
    """Just enough of an asyncio ServicerContext for the deadline interceptor."""

    def __init__(self, time_remaining_seconds: float, cancelled: bool = False) -> None:
        self.time_remaining_seconds = time_remaining_seconds
        self.was_cancelled = cancelled
        self.code: grpc.StatusCode | None = None

    def time_remaining(self) -> float:
        return self.time_remaining_seconds

    def cancelled(self) -> bool:
        return self.was_cancelled

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        pass


class FakeCallDetails:
    method = DEPOSIT


def deposit_through_the_deadline_check(context: FakeContext) -> list[str]:
    calls: list[str] = []

    async def handler(request: str, _context: Any) -> None:
        calls.append(request)

    async def run() -> None:
        async def continuation(_details: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(handler)

        intercepted = await AioDeadlineInterceptor(RejectionCounter()).intercept_service(
            continuation, FakeCallDetails()
        )
        assert intercepted is not None
        await intercepted.unary_unary("deposit", context)

    asyncio.run(run())
    return calls


def test_a_call_whose_deadline_passed_never_reaches_the_handler() -> None:
    context = FakeContext(time_remaining_seconds=0.0)
    assert deposit_through_the_deadline_check(context) == []
    assert context.code == grpc.StatusCode.DEADLINE_EXCEEDED


def test_a_cancelled_call_never_reaches_the_handler() -> None:
    assert deposit_through_the_deadline_check(FakeContext(5.0, cancelled=True)) == []


def test_a_call_with_time_left_reaches_the_handler() -> None:
    assert deposit_through_the_deadline_check(FakeContext(5.0)) == ["deposit"]


def test_the_rejection_counter_sums_per_method_and_status() -> None:
    counter = RejectionCounter(summary_seconds=3600)
    for code in (grpc.StatusCode.ABORTED, grpc.StatusCode.ABORTED, FailedPreconditionError.status_code):
        counter.count("/m/Act", code)
    assert counter.counts() == {("/m/Act", "ABORTED"): 2, ("/m/Act", "FAILED_PRECONDITION"): 1}


class PassingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """An interceptor that is not a layer (as the table's owner routing), innermost."""

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        return await continuation(details)


def test_the_layers_run_in_one_wrapper_when_an_interceptor_that_is_not_one_comes_inside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The table service adds its owner routing inside auth and limits: the layers before it still
    share one wrapper per call (issue 10), and the call still passes every one of them."""
    from mahjong_platform import aio_grpc_server

    wrappers: list[int] = []
    real_flat_method_handler = aio_grpc_server.flat_method_handler

    def counting(handler: grpc.RpcMethodHandler, layers: Any) -> grpc.RpcMethodHandler:
        wrappers.append(len(layers))
        return real_flat_method_handler(handler, layers)

    monkeypatch.setattr(aio_grpc_server, "flat_method_handler", counting)
    running = serve_test_services(PassingInterceptor())
    try:
        answer = ledger(running).GetBalance(ledger_service_pb2.GetBalanceRequest(account="a"), timeout=10)
        assert answer.account == "alice"
        assert balance_error(running, "conflict").code() == grpc.StatusCode.ABORTED
        with pytest.raises(grpc.RpcError) as unauthenticated:
            ledger(running, None).GetBalance(ledger_service_pb2.GetBalanceRequest(account="a"), timeout=10)
        assert unauthenticated.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        running.stop(grace_seconds=0)
    assert wrappers == [3]  # error mapping, deadline, auth: one wrapper for GetBalance
