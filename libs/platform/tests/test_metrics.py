"""Service metrics: the RPC interceptors (thread pool and aio) on real servers, counting only what
commits, the outbox gauges read at scrape time, and the /metrics HTTP endpoint."""

from __future__ import annotations

import asyncio
import datetime
import threading
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from mahjong.v1 import (
    envelope_pb2,
    ledger_service_pb2,
    ledger_service_pb2_grpc,
    table_events_pb2,
    table_service_pb2,
    table_service_pb2_grpc,
)
from mahjong_platform.config import (
    KNOWN_VARIABLES,
    SERVICE_NAMES,
    ConfigurationError,
    load_settings,
    metrics_address_variable,
)
from mahjong_platform.database import create_engine_for, create_session_factory, transaction
from mahjong_platform.envelopes import new_envelope, utc_now
from mahjong_platform.errors import FailedPreconditionError
from mahjong_platform.event_store import EventStore
from mahjong_platform.grpc_server import RunningServer, register_service, serve
from mahjong_platform.metrics import (
    DatabaseGauge,
    ServiceMetrics,
    after_commit,
    bind_engine,
    outbox_gauges,
    serve_metrics,
)
from mahjong_platform.rpc_metrics import AioRpcMetricsInterceptor, RpcMetricsInterceptor, method_label
from mahjong_platform.schema import platform_metadata
from prometheus_client.parser import text_string_to_metric_families

SETTINGS = load_settings({"MAHJONG_JWT_SECRET": "test-secret-that-is-long-enough-for-hs256-keys"})


def sample(metrics: ServiceMetrics, name: str, **labels: str) -> float | None:
    """The value of one sample in ``metrics``'s registry; None when it does not exist."""
    value = metrics.registry.get_sample_value(name, labels)
    return None if value is None else float(value)


class Ledger(ledger_service_pb2_grpc.LedgerServiceServicer):
    def GetBalance(
        self, request: ledger_service_pb2.GetBalanceRequest, context: grpc.ServicerContext
    ) -> ledger_service_pb2.GetBalanceResponse:
        if request.account == "refused":
            raise FailedPreconditionError("not now")
        if request.account == "bug":
            raise RuntimeError("a bug")
        return ledger_service_pb2.GetBalanceResponse(account=request.account, balance_beans=1)


class Table(table_service_pb2_grpc.TableServiceServicer):
    """Watch sends one event, then a second once released."""

    release = threading.Event()

    def Watch(
        self, request: table_service_pb2.WatchRequest, context: grpc.ServicerContext
    ) -> Iterator[envelope_pb2.Envelope]:
        yield envelope_pb2.Envelope(stream_id=request.table_id, sequence=1)
        assert self.release.wait(60)
        yield envelope_pb2.Envelope(stream_id=request.table_id, sequence=2)


@pytest.fixture
def metrics() -> ServiceMetrics:
    return ServiceMetrics("test")


@pytest.fixture
def server(metrics: ServiceMetrics) -> Iterator[RunningServer]:
    running = serve(
        [
            register_service(
                ledger_service_pb2.DESCRIPTOR.services_by_name["LedgerService"],
                ledger_service_pb2_grpc.add_LedgerServiceServicer_to_server,
                Ledger(),  # type: ignore[abstract]  # implements only what the tests call
            ),
            register_service(
                table_service_pb2.DESCRIPTOR.services_by_name["TableService"],
                table_service_pb2_grpc.add_TableServiceServicer_to_server,
                Table(),  # type: ignore[abstract]
            ),
        ],
        "127.0.0.1:0",
        SETTINGS,
        outermost_interceptors=[RpcMetricsInterceptor(metrics)],
    )
    yield running
    running.stop(grace_seconds=0)


def test_the_method_label_is_the_service_and_method_without_the_package() -> None:
    assert method_label("/mahjong.v1.TableService/Act") == "TableService/Act"


def test_unary_calls_are_counted_and_timed_by_method_and_the_status_code_the_client_got(
    server: RunningServer, metrics: ServiceMetrics
) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = ledger_service_pb2_grpc.LedgerServiceStub(channel)
        stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account="player:a"))
        stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account="player:b"))
        for account, code in (
            ("refused", grpc.StatusCode.FAILED_PRECONDITION),
            ("bug", grpc.StatusCode.INTERNAL),
        ):
            with pytest.raises(grpc.RpcError) as raised:
                stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account=account))
            assert raised.value.code() == code
    method = "LedgerService/GetBalance"
    handled = "mahjong_grpc_server_handled_total"
    assert sample(metrics, handled, method=method, code="OK") == 2
    assert sample(metrics, handled, method=method, code="FAILED_PRECONDITION") == 1
    assert sample(metrics, handled, method=method, code="INTERNAL") == 1
    assert sample(metrics, "mahjong_grpc_server_handling_seconds_count", method=method, code="OK") == 2


def test_a_stream_is_open_while_it_runs_and_counted_when_it_ends(
    server: RunningServer, metrics: ServiceMetrics
) -> None:
    method = "TableService/Watch"
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stream = table_service_pb2_grpc.TableServiceStub(channel).Watch(
            table_service_pb2.WatchRequest(table_id="t1")
        )
        next(stream)
        assert sample(metrics, "mahjong_grpc_server_open_streams", method=method) == 1
        Table.release.set()
        assert len(list(stream)) == 1
    assert sample(metrics, "mahjong_grpc_server_open_streams", method=method) == 0
    assert sample(metrics, "mahjong_grpc_server_handled_total", method=method, code="OK") == 1
    # A stream's life is not a latency: streams stay out of the histogram.
    assert sample(metrics, "mahjong_grpc_server_handling_seconds_count", method=method, code="OK") is None


class AioLedger(ledger_service_pb2_grpc.LedgerServiceServicer):
    async def GetBalance(
        self, request: ledger_service_pb2.GetBalanceRequest, context: grpc.aio.ServicerContext
    ) -> ledger_service_pb2.GetBalanceResponse:
        if request.account == "refused":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "not now")
        return ledger_service_pb2.GetBalanceResponse(account=request.account, balance_beans=1)


class AioTable(table_service_pb2_grpc.TableServiceServicer):
    async def Watch(
        self, request: table_service_pb2.WatchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[envelope_pb2.Envelope]:
        for sequence in (1, 2, 3):
            yield envelope_pb2.Envelope(stream_id=request.table_id, sequence=sequence)


def test_the_aio_interceptor_records_the_same_metrics_on_a_grpc_aio_server(metrics: ServiceMetrics) -> None:
    async def scenario() -> None:
        server = grpc.aio.server(interceptors=[AioRpcMetricsInterceptor(metrics)])
        ledger_service_pb2_grpc.add_LedgerServiceServicer_to_server(AioLedger(), server)  # type: ignore[abstract]
        table_service_pb2_grpc.add_TableServiceServicer_to_server(AioTable(), server)  # type: ignore[abstract]
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                ledger = ledger_service_pb2_grpc.LedgerServiceStub(channel)
                await ledger.GetBalance(ledger_service_pb2.GetBalanceRequest(account="player:a"))
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await ledger.GetBalance(ledger_service_pb2.GetBalanceRequest(account="refused"))
                assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                table = table_service_pb2_grpc.TableServiceStub(channel)
                received = [
                    event async for event in table.Watch(table_service_pb2.WatchRequest(table_id="t"))
                ]
                assert len(received) == 3
        finally:
            await server.stop(0)

    asyncio.run(scenario())
    handled = "mahjong_grpc_server_handled_total"
    assert sample(metrics, handled, method="LedgerService/GetBalance", code="OK") == 1
    assert sample(metrics, handled, method="LedgerService/GetBalance", code="FAILED_PRECONDITION") == 1
    assert sample(metrics, handled, method="TableService/Watch", code="OK") == 1
    assert sample(metrics, "mahjong_grpc_server_open_streams", method="TableService/Watch") == 0


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[object]:
    engine = create_engine_for(f"sqlite:///{tmp_path / 'metrics.sqlite3'}")
    platform_metadata.create_all(engine)
    yield engine
    engine.dispose()


def opened(table_id: str) -> envelope_pb2.Envelope:
    return new_envelope(table_events_pb2.TableOpened(table_id=table_id), clock=utc_now, stream_id=table_id)


def test_appended_events_count_when_their_transaction_commits_and_never_when_it_rolls_back(
    engine: object, metrics: ServiceMetrics
) -> None:
    bind_engine(engine, metrics)  # type: ignore[arg-type]
    session_factory = create_session_factory(engine)  # type: ignore[arg-type]
    store = EventStore()
    with pytest.raises(RuntimeError), transaction(session_factory) as session:
        store.append(session, "t1", 0, [opened("t1")])
        raise RuntimeError("the caller fails after the append")
    assert sample(metrics, "mahjong_events_appended_total", event_type="TableOpened") is None
    with transaction(session_factory) as session:
        store.append(session, "t1", 0, [opened("t1")])
        assert sample(metrics, "mahjong_events_appended_total", event_type="TableOpened") is None
    assert sample(metrics, "mahjong_events_appended_total", event_type="TableOpened") == 1


def test_after_commit_callbacks_run_once_per_commit(engine: object) -> None:
    session_factory = create_session_factory(engine)  # type: ignore[arg-type]
    calls: list[str] = []
    with transaction(session_factory) as session:
        after_commit(session, lambda: calls.append("first"))
    with transaction(session_factory) as session:
        after_commit(session, lambda: calls.append("second"))
    assert calls == ["first", "second"]


def test_the_outbox_gauges_read_the_backlog_and_the_oldest_unsent_age_when_scraped(
    engine: object, metrics: ServiceMetrics
) -> None:
    now = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
    metrics.add_collector(DatabaseGauge(engine, outbox_gauges(clock=lambda: now.timestamp())))  # type: ignore[arg-type]
    assert sample(metrics, "mahjong_outbox_unsent_messages") == 0
    assert sample(metrics, "mahjong_outbox_oldest_unsent_age_seconds") == 0
    clock_values = iter([now - datetime.timedelta(seconds=90), now - datetime.timedelta(seconds=30)])
    store = EventStore(clock=lambda: next(clock_values))
    with transaction(create_session_factory(engine)) as session:  # type: ignore[arg-type]
        store.append(session, "t1", 0, [opened("t1")])
        store.append(session, "t2", 0, [opened("t2")])
    assert sample(metrics, "mahjong_outbox_unsent_messages") == 2
    assert sample(metrics, "mahjong_outbox_oldest_unsent_age_seconds") == 90


def test_the_metrics_endpoint_serves_the_registry_in_the_prometheus_text_format(
    metrics: ServiceMetrics,
) -> None:
    metrics.events_appended.labels("TableOpened").inc(3)
    server = serve_metrics(metrics, "127.0.0.1:0")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=30) as response:
            text = response.read().decode()
    finally:
        server.stop()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    appended = families["mahjong_events_appended"]
    assert [(s.name, s.labels, s.value) for s in appended.samples if s.name.endswith("_total")] == [
        ("mahjong_events_appended_total", {"event_type": "TableOpened"}, 3.0)
    ]


def test_a_service_metrics_address_that_is_taken_fails_with_the_address(metrics: ServiceMetrics) -> None:
    first = serve_metrics(metrics, "127.0.0.1:0")
    try:
        with pytest.raises(OSError, match=f"127.0.0.1:{first.port}"):
            serve_metrics(ServiceMetrics("other"), f"127.0.0.1:{first.port}")
    finally:
        first.stop()


def test_each_service_has_its_own_default_metrics_address_and_a_variable_to_move_it() -> None:
    defaults = load_settings({})
    assert {service: defaults.metrics_address(service) for service in SERVICE_NAMES} == {
        "matchmaking": "127.0.0.1:9151",
        "table": "127.0.0.1:9152",
        "scoring": "127.0.0.1:9153",
        "ledger": "127.0.0.1:9154",
    }
    moved = load_settings({metrics_address_variable("table"): "0.0.0.0:19152"})
    assert moved.metrics_address("table") == "0.0.0.0:19152"
    assert metrics_address_variable("table") in KNOWN_VARIABLES


@pytest.mark.parametrize("value", ["9152", "localhost:", "127.0.0.1:70000", "http://127.0.0.1:9152"])
def test_a_malformed_metrics_address_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigurationError, match="MAHJONG_LEDGER_METRICS_ADDRESS"):
        load_settings({"MAHJONG_LEDGER_METRICS_ADDRESS": value})


def test_a_metrics_address_equal_to_the_services_grpc_address_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="must differ"):
        load_settings(
            {
                "MAHJONG_SCORING_METRICS_ADDRESS": "127.0.0.1:7000",
                "MAHJONG_SCORING_GRPC_ADDRESS": "127.0.0.1:7000",
            }
        )


def test_unary_methods_get_no_open_streams_series(server: RunningServer, metrics: ServiceMetrics) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = ledger_service_pb2_grpc.LedgerServiceStub(channel)
        stub.GetBalance(ledger_service_pb2.GetBalanceRequest(account="player:a"))
    assert sample(metrics, "mahjong_grpc_server_open_streams", method="LedgerService/GetBalance") is None
    assert (
        sample(metrics, "mahjong_grpc_server_handled_created", method="LedgerService/GetBalance", code="OK")
        is None
    )
