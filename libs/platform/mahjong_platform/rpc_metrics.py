"""RPC metrics interceptors: one for the thread-pool ``grpc.server``, one for ``grpc.aio`` servers.

Both run outermost (before error mapping), so the status code they record is the one the client
gets: a `ServiceError` mapped by `ErrorMappingInterceptor` counts as its code, an unexpected
exception as INTERNAL, a stream the client cancelled as CANCELLED. They record into a
`ServiceMetrics`: ``mahjong_grpc_server_handled_total{method, code}`` for every call,
``mahjong_grpc_server_handling_seconds{method, code}`` for unary calls, and
``mahjong_grpc_server_open_streams{method}`` while a server-streaming call is open. ``method`` is
``Service/Method`` (e.g. ``TableService/Act``): a bounded set. Health and reflection are left out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from mahjong_platform.aio_grpc_server import AioLayerInterceptor, CallLayer
from mahjong_platform.grpc_server import WrappingInterceptor, wrap_rpc_method_handler
from mahjong_platform.metrics import ServiceMetrics


def method_label(method: str) -> str:
    """``/mahjong.v1.TableService/Act`` -> ``TableService/Act``."""
    return method.rsplit(".", 1)[-1].lstrip("/")


def status_code_name(context: Any, error: BaseException | None) -> str:
    """The status the call ends with: what the context holds, else UNKNOWN after an exception
    (what grpc answers for an unhandled one), else OK."""
    code_of = getattr(context, "code", None)
    code = code_of() if callable(code_of) else None
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    if error is not None:
        return "CANCELLED" if isinstance(error, GeneratorExit | asyncio.CancelledError) else "UNKNOWN"
    return "OK"


class _Recorder:
    """What both interceptors record for one method (one per method, reused by every call)."""

    def __init__(self, metrics: ServiceMetrics, method: str) -> None:
        self.method = method_label(method)
        self._metrics = metrics
        self._handled = metrics.rpcs_handled
        self._seconds = metrics.rpc_seconds
        # The series of each status code, looked up once (a label lookup costs more than the count).
        self._unary_series: dict[str, tuple[Any, Any]] = {}

    def unary_finished(self, code: str, started: float) -> None:
        series = self._unary_series.get(code)
        if series is None:
            series = self._unary_series[code] = (
                self._handled.labels(self.method, code),
                self._seconds.labels(self.method, code),
            )
        series[0].inc()
        series[1].observe(time.perf_counter() - started)

    def stream_opened(self) -> None:
        self._metrics.open_streams.labels(self.method).inc()

    def stream_finished(self, code: str) -> None:
        self._metrics.open_streams.labels(self.method).dec()
        self._handled.labels(self.method, code).inc()


class _Recorders:
    """The recorder of each method, made on its first call."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self._metrics = metrics
        self._by_method: dict[str, _Recorder] = {}

    def of(self, method: str) -> _Recorder:
        recorder = self._by_method.get(method)
        if recorder is None:
            # Two first calls at once may both make one: they record into the same series.
            recorder = self._by_method[method] = _Recorder(self._metrics, method)
        return recorder


class RpcMetricsInterceptor(WrappingInterceptor):
    """Counts and times the calls of a thread-pool ``grpc.server`` (see the module docstring)."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self._recorders = _Recorders(metrics)

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        recorder = self._recorders.of(method)

        def unary_response(invoke: Callable[[], Any], context: grpc.ServicerContext) -> Any:
            started = time.perf_counter()
            error: BaseException | None = None
            try:
                return invoke()
            except BaseException as raised:
                error = raised
                raise
            finally:
                recorder.unary_finished(status_code_name(context, error), started)

        def streaming_response(
            invoke: Callable[[], Iterator[Any]], context: grpc.ServicerContext
        ) -> Iterator[Any]:
            recorder.stream_opened()
            error: BaseException | None = None
            try:
                yield from invoke()
            except BaseException as raised:
                error = raised
                raise
            finally:
                recorder.stream_finished(status_code_name(context, error))

        return wrap_rpc_method_handler(handler, unary_response, streaming_response)


class _MetricsLayer(CallLayer):
    """The asyncio metrics of one method as a `CallLayer` (outermost: it sees the final status)."""

    def __init__(self, recorder: _Recorder, streaming: bool) -> None:
        self._recorder = recorder
        self._streaming = streaming

    def enter(self, context: Any) -> Any:
        if self._streaming:
            self._recorder.stream_opened()
            return None
        return time.perf_counter()

    def exit(self, entered: Any, error: BaseException | None, context: Any) -> Any:
        code = status_code_name(context, error)
        if self._streaming:
            self._recorder.stream_finished(code)
        else:
            self._recorder.unary_finished(code, entered)
        return error


class AioRpcMetricsInterceptor(AioLayerInterceptor):
    """The same metrics for a ``grpc.aio`` server, whose handlers are coroutines and async
    generators (or coroutines that write to the context)."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        super().__init__()
        self._recorders = _Recorders(metrics)

    def layer(self, method: str, streaming: bool) -> CallLayer:
        """Counts and times the method's calls."""
        return _MetricsLayer(self._recorders.of(method), streaming)
