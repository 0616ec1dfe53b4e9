"""The gRPC server every service runs: health, reflection, error mapping, deadlines, graceful stop.

`serve` starts a ``grpc.server`` on a thread pool with:

- the standard health service (``grpc.health.v1.Health``): each registered service and the whole
  server ("") report SERVING once started and NOT_SERVING from the moment shutdown begins;
- reflection (``grpc.reflection.v1alpha``) for the registered services, so grpcurl works unaided;
- `ErrorMappingInterceptor` (outermost): a `ServiceError` raised by a handler becomes its status code
  with its message, a lost database connection UNAVAILABLE (`errors.client_status`); any other
  exception is logged with a reference id and becomes INTERNAL without internals;
- `DeadlineInterceptor`: a call whose client deadline has already passed (it waited in the queue)
  is answered DEADLINE_EXCEEDED without running the handler, so no command is applied for a
  client that has stopped listening;
- the caller's interceptors (typically `mahjong_platform.auth.AuthInterceptor`), innermost.

Deadlines: the server imposes no deadline of its own, because Watch and WatchTicket streams rightly
last a whole game. Handlers read the client's remaining time with `remaining_seconds` and bound any
wait or downstream call with `time_budget_seconds(context, cap_seconds)`, which is the client's
remaining time capped at ``cap_seconds`` (the cap also applies when the client set no deadline).

Limits: the pool has ``settings.grpc_max_workers`` threads and the server accepts at most that many
concurrent calls. A server-streaming call holds a thread for its whole life, so a call beyond the
limit fails fast with RESOURCE_EXHAUSTED instead of queueing behind streams that may never end.
"""

from __future__ import annotations

import logging
import signal
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Final

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from mahjong_platform.config import Settings
from mahjong_platform.errors import ErrorMapping, client_status

_LOGGER = logging.getLogger(__name__)

# The standard services (health, reflection) live in the "grpc." package namespace.
INFRASTRUCTURE_METHOD_PREFIX: Final = "/grpc."
# grpc reports "no deadline" as a time remaining of about 292 years; anything beyond a year is that.
_NO_DEADLINE_THRESHOLD_SECONDS: Final = 365 * 24 * 3600.0

UnaryResponseWrapper = Callable[[Callable[[], Any], grpc.ServicerContext], Any]
"""Runs ``invoke()`` (the handler with its arguments bound) and returns its single response."""
StreamingResponseWrapper = Callable[[Callable[[], Iterator[Any]], grpc.ServicerContext], Iterator[Any]]
"""Runs ``invoke()`` (returning the handler's response iterator) and yields the responses."""


def is_infrastructure_method(method: str) -> bool:
    """True for the standard health and reflection methods, which interceptors leave untouched.

    Untouched matters: the health Watch handler is non-blocking only when its function is passed
    to the server as is.
    """
    return method.startswith(INFRASTRUCTURE_METHOD_PREFIX)


def wrap_rpc_method_handler(
    handler: grpc.RpcMethodHandler,
    unary_response: UnaryResponseWrapper,
    streaming_response: StreamingResponseWrapper,
) -> grpc.RpcMethodHandler:
    """A copy of ``handler`` whose behavior runs through ``unary_response`` or ``streaming_response``.

    The building block of the interceptors here: one function pair covers the four RPC kinds, and
    the request deserializer and response serializer are kept.
    """
    serializers = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        behavior = handler.unary_unary
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: unary_response(lambda: behavior(request, context), context),
            **serializers,
        )
    if handler.unary_stream is not None:
        stream_behavior = handler.unary_stream
        return grpc.unary_stream_rpc_method_handler(
            lambda request, context: streaming_response(lambda: stream_behavior(request, context), context),
            **serializers,
        )
    if handler.stream_unary is not None:
        client_stream_behavior = handler.stream_unary
        return grpc.stream_unary_rpc_method_handler(
            lambda requests, context: unary_response(
                lambda: client_stream_behavior(requests, context), context
            ),
            **serializers,
        )
    assert handler.stream_stream is not None, "an RpcMethodHandler has one of the four behaviors"
    bidirectional_behavior = handler.stream_stream
    return grpc.stream_stream_rpc_method_handler(
        lambda requests, context: streaming_response(
            lambda: bidirectional_behavior(requests, context), context
        ),
        **serializers,
    )


class WrappingInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """Base of the thread-pool interceptors: each method's handler goes through `_wrap`, except a
    missing handler and those `_passes_through` leaves untouched (health and reflection)."""

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        """The method's handler, wrapped by `_wrap` unless it passes through."""
        handler = continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or self._passes_through(method):
            return handler
        return self._wrap(method, handler)

    def _passes_through(self, method: str) -> bool:
        return is_infrastructure_method(method)

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        raise NotImplementedError


class AioWrappingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """`WrappingInterceptor` for ``grpc.aio`` servers (the continuation is awaited)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        """The method's handler, wrapped by `_wrap` unless it passes through."""
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or self._passes_through(method):
            return handler
        return self._handler_for(method, handler)

    def _passes_through(self, method: str) -> bool:
        return is_infrastructure_method(method)

    def _handler_for(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        return self._wrap(method, handler)

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        raise NotImplementedError


class ErrorMappingInterceptor(WrappingInterceptor):
    """Turns exceptions raised by handlers into the status codes of ARCHITECTURE.md "Errors".

    A `ServiceError` (or a type in ``extra_mapping``) becomes its status with its message, logged at
    INFO; a lost database connection becomes UNAVAILABLE (`errors.client_status`). Anything else
    is a bug: it is logged with its traceback and a reference id, and the client gets INTERNAL with
    only that id, so no internals (SQL, paths, stack) leak. A handler that already chose a status
    with ``context.abort`` keeps it.
    """

    def __init__(self, extra_mapping: ErrorMapping | None = None) -> None:
        self._extra_mapping = dict(extra_mapping or {})

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """The method's handler, its exceptions mapped to status codes."""

        def unary_response(invoke: Callable[[], Any], context: grpc.ServicerContext) -> Any:
            try:
                return invoke()
            except Exception as error:
                self._abort_for(error, method, context)

        def streaming_response(
            invoke: Callable[[], Iterator[Any]], context: grpc.ServicerContext
        ) -> Iterator[Any]:
            try:
                yield from invoke()
            except Exception as error:
                self._abort_for(error, method, context)

        return wrap_rpc_method_handler(handler, unary_response, streaming_response)

    def _abort_for(self, error: Exception, method: str, context: grpc.ServicerContext) -> None:
        if _status_already_chosen(context):
            raise error
        status = client_status(error, self._extra_mapping)
        if status is not None:
            status_code, message = status
            _LOGGER.info(
                "rpc rejected: %s",
                message,
                extra={"rpc_method": method, "status_code": status_code.name},
            )
            context.abort(status_code, message)
        reference = uuid.uuid4().hex
        _LOGGER.error(
            "rpc failed with an unexpected exception",
            exc_info=error,
            extra={"rpc_method": method, "status_code": "INTERNAL", "error_reference": reference},
        )
        context.abort(grpc.StatusCode.INTERNAL, f"internal error (reference {reference})")


def _status_already_chosen(context: grpc.ServicerContext) -> bool:
    """True when the handler (or an inner interceptor) called ``context.abort`` or ``set_code``."""
    code = getattr(context, "code", None)
    chosen = code() if callable(code) else None
    return chosen is not None and chosen != grpc.StatusCode.OK


def remaining_seconds(context: grpc.ServicerContext) -> float | None:
    """Seconds left before the client's deadline, or None when the client set no deadline."""
    remaining: float | None = context.time_remaining()
    if remaining is None or remaining > _NO_DEADLINE_THRESHOLD_SECONDS:
        return None
    return max(remaining, 0.0)


def time_budget_seconds(context: grpc.ServicerContext, cap_seconds: float) -> float:
    """How long a handler may spend on a wait or a downstream call: the client's time, at most the cap."""
    assert cap_seconds > 0, "cap_seconds must be positive"
    remaining = remaining_seconds(context)
    return cap_seconds if remaining is None else min(remaining, cap_seconds)


class DeadlineInterceptor(WrappingInterceptor):
    """Answers DEADLINE_EXCEEDED without running the handler when the client's deadline has passed.

    A call can wait in the pool's queue past its deadline; the client has already given up, and
    running the handler would only apply a command whose answer nobody reads (the client's retry,
    with the same idempotency key, will do the work). Also skips calls the client has cancelled.
    """

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """The method's handler, behind the deadline check."""

        def check(context: grpc.ServicerContext) -> None:
            remaining = remaining_seconds(context)
            if (remaining is not None and remaining <= 0.0) or not context.is_active():
                context.abort(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"deadline passed before {method} started; retry with a longer deadline",
                )

        def unary_response(invoke: Callable[[], Any], context: grpc.ServicerContext) -> Any:
            check(context)
            return invoke()

        def streaming_response(
            invoke: Callable[[], Iterator[Any]], context: grpc.ServicerContext
        ) -> Iterator[Any]:
            check(context)
            yield from invoke()

        return wrap_rpc_method_handler(handler, unary_response, streaming_response)


@dataclass(frozen=True)
class ServiceRegistration:
    """One gRPC service to host: its full name (for health and reflection) and how to add it."""

    service_name: str
    add_to_server: Callable[[grpc.Server], None]


def register_service(
    service_descriptor: Any, add_servicer_to_server: Callable[[Any, grpc.Server], None], servicer: Any
) -> ServiceRegistration:
    """Registration of ``servicer`` using the generated code, for example::

    register_service(
        ledger_service_pb2.DESCRIPTOR.services_by_name["LedgerService"],
        ledger_service_pb2_grpc.add_LedgerServiceServicer_to_server,
        LedgerServicer(...),
    )
    """
    service_name: str = service_descriptor.full_name
    return ServiceRegistration(service_name, lambda server: add_servicer_to_server(servicer, server))


@dataclass
class RunningServer:
    """A started server: its bound port, its health statuses and its shutdown."""

    server: grpc.Server
    port: int
    service_names: tuple[str, ...]
    health_servicer: health.HealthServicer
    grace_seconds: float
    _stopped: threading.Event = field(default_factory=threading.Event)

    def set_serving(self, service_name: str, serving: bool) -> None:
        """Report ``service_name`` (or "" for the whole server) SERVING or NOT_SERVING to health checks.

        For a service whose dependency (database, broker) is down: callers then route elsewhere.
        """
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        self.health_servicer.set(service_name, status)

    def begin_shutdown(self, grace_seconds: float | None = None) -> threading.Event:
        """Start a graceful stop and return at once: health says NOT_SERVING for every service, new
        calls are refused, calls in flight get ``grace_seconds`` (default: from settings) to finish,
        then are cancelled. The returned event is set once the server has stopped.
        """
        grace = self.grace_seconds if grace_seconds is None else grace_seconds
        _LOGGER.info("grpc server shutting down", extra={"port": self.port, "grace_seconds": grace})
        self.health_servicer.enter_graceful_shutdown()
        stopped: threading.Event = self.server.stop(grace)
        self._stopped.set()
        return stopped

    def stop(self, grace_seconds: float | None = None) -> None:
        """Gracefully stop (see `begin_shutdown`) and wait until the server has stopped."""
        self.begin_shutdown(grace_seconds).wait()

    def wait_for_termination(self, timeout_seconds: float | None = None) -> bool:
        """Block until the server stops (or the timeout passes); True when it has stopped."""
        # grpc answers "did the wait time out", the opposite of what a caller wants to know.
        timed_out: bool = self.server.wait_for_termination(timeout_seconds)
        return not timed_out

    def stop_on_signals(self, signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT)) -> None:
        """Begin a graceful shutdown when the process receives one of ``signals`` (main thread only).

        A second signal while stopping stops at once, for an operator who does not want to wait.
        """

        def on_signal(signal_number: int, frame: FrameType | None) -> None:
            already_stopping = self._stopped.is_set()
            _LOGGER.info("received signal %s", signal.Signals(signal_number).name)
            self.begin_shutdown(0.0 if already_stopping else None)

        for signal_to_handle in signals:
            signal.signal(signal_to_handle, on_signal)


def serve(
    registrations: Sequence[ServiceRegistration],
    address: str,
    settings: Settings,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
    extra_error_mapping: ErrorMapping | None = None,
    outermost_interceptors: Sequence[grpc.ServerInterceptor] = (),
) -> RunningServer:
    """Start a server on ``address`` (host:port; port 0 picks a free port) hosting ``registrations``.

    ``interceptors`` run inside the standard ones (error mapping, then deadline), in order;
    ``extra_error_mapping`` maps non-`ServiceError` exception types (say the rules library's) to status
    codes; ``outermost_interceptors`` run outside them all (the RPC metrics, which must see the
    final status code). Returns once the server accepts calls; the caller then usually does::

        running.stop_on_signals()
        running.wait_for_termination()
    """
    assert registrations, "a server without services serves nothing"
    service_names = tuple(registration.service_name for registration in registrations)
    assert len(set(service_names)) == len(service_names), f"service registered twice: {service_names}"
    server = grpc.server(
        futures.ThreadPoolExecutor(
            max_workers=settings.grpc_max_workers, thread_name_prefix="grpc-" + "-".join(service_names)
        ),
        interceptors=[
            *outermost_interceptors,
            ErrorMappingInterceptor(extra_error_mapping),
            DeadlineInterceptor(),
            *interceptors,
        ],
        maximum_concurrent_rpcs=settings.grpc_max_workers,
        # Without this, a second process binding the same port silently shares the traffic.
        options=[("grpc.so_reuseport", 0)],
    )
    for registration in registrations:
        registration.add_to_server(server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    port = _bind(server, address)
    server.start()
    running = RunningServer(
        server=server,
        port=port,
        service_names=service_names,
        health_servicer=health_servicer,
        grace_seconds=settings.grpc_shutdown_grace_seconds,
    )
    for service_name in ("", *service_names):
        running.set_serving(service_name, True)
    _LOGGER.info(
        "grpc server started", extra={"address": address, "port": port, "services": list(service_names)}
    )
    return running


def _bind(server: grpc.Server, address: str) -> int:
    try:
        port: int = server.add_insecure_port(address)
    except RuntimeError as error:
        raise OSError(f"cannot listen on {address}: {error}") from error
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    return port
