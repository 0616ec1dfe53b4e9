"""The asyncio variant of the server harness (`grpc.aio`), for services whose calls mostly wait.

A thread-pool server holds one thread per call in flight, so every open server stream (a player's
WatchView feed lasts a whole game) is a thread fighting for the GIL. Here every call is a coroutine
on one event loop, run in a thread of its own (`AioServerThread`) so that a service's background
workers (outbox relay, consumers, deadlines) stay what they are.

What the thread-pool harness (`mahjong_platform.grpc_server`) guarantees holds here too, with
the same shared pieces (`client_status`, `remaining_seconds`, the auth checks, the health and
reflection services):

- `AioErrorMappingInterceptor` (outermost): a `ServiceError` or a type of the extra mapping becomes
  its status and message; anything else is logged with a reference id and becomes INTERNAL with
  only that id. An expected rejection is *counted* (`RejectionCounter`, one INFO summary a minute),
  not logged one line per call: a busy table rejects many racing commands, and a log line each
  was a measurable share of the table engine's time (issue 10);
- `AioDeadlineInterceptor`: a call whose client deadline already passed, or that the client
  cancelled, is answered DEADLINE_EXCEEDED without running the handler;
- `AioAuthInterceptor`: the bearer token and the method's roles, as `AuthInterceptor` checks them;
  the handler reads the caller with `current_identity`.

Each is an `AioLayerInterceptor`, one `CallLayer` per method (plain functions before and after
the handler); `serve_aio` runs a server's layers in one `AioFlatInterceptor`, so a call (and each
message of a stream) passes one wrapper, not one async generator per interceptor (issue 10).

A handler may also answer a rejection without raising: `reject(context, code, message)` sets the
status and counts it, and the handler returns an empty response.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
import signal
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Final

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from mahjong_platform.auth import (
    DEFAULT_LEEWAY_SECONDS,
    OPS_ONLY,
    authorize,
    current_identity,
    enter_identity_scope,
    leave_identity_scope,
)
from mahjong_platform.config import Settings
from mahjong_platform.errors import (
    ErrorMapping,
    PermissionDeniedError,
    UnauthenticatedError,
    client_status,
)
from mahjong_platform.grpc_server import AioWrappingInterceptor, ServiceRegistration, remaining_seconds
from mahjong_platform.limits import CallerLimiter

_LOGGER = logging.getLogger(__name__)

REJECTION_SUMMARY_SECONDS: Final = 60.0
SERVER_START_TIMEOUT_SECONDS: Final = 30.0


class RejectionCounter:
    """Counts the calls answered with an expected error status, per method and status.

    One INFO line every REJECTION_SUMMARY_SECONDS (at the next rejection after that) says how many
    there were since the last line; `counts` answers the totals (for tests and metrics).
    """

    def __init__(self, summary_seconds: float = REJECTION_SUMMARY_SECONDS) -> None:
        self._lock = threading.Lock()
        self._totals: collections.Counter[tuple[str, str]] = collections.Counter()
        self._since_summary: collections.Counter[tuple[str, str]] = collections.Counter()
        self._summary_seconds = summary_seconds
        self._last_summary = time.monotonic()

    def count(self, method: str, status_code: grpc.StatusCode) -> None:
        key = (method, status_code.name)
        with self._lock:
            self._totals[key] += 1
            self._since_summary[key] += 1
            now = time.monotonic()
            if now - self._last_summary < self._summary_seconds:
                return
            summary, self._since_summary = self._since_summary, collections.Counter()
            self._last_summary = now
        _LOGGER.info(
            "rpc rejections in the last %.0f s: %s",
            self._summary_seconds,
            ", ".join(f"{method} {code} x{count}" for (method, code), count in sorted(summary.items())),
        )

    def counts(self) -> dict[tuple[str, str], int]:
        """(method, status name) -> how many calls were rejected so, since the process started."""
        with self._lock:
            return dict(self._totals)


REJECTIONS: Final = RejectionCounter()
"""The process's counter (one server per process)."""


def reject(
    context: grpc.aio.ServicerContext,
    status_code: grpc.StatusCode,
    message: str,
    method: str = "",
    counter: RejectionCounter = REJECTIONS,
) -> None:
    """Answer the call with ``status_code`` and ``message`` without raising, and count it. The
    handler then returns an empty response (unary) or ends its stream."""
    context.set_code(status_code)
    context.set_details(message)
    counter.count(method, status_code)


class CallLayer:
    """One concern (metrics, error mapping, deadline, auth, limits) of every call of one method, as
    plain functions that `flat_method_handler` calls around the handler, so a call costs one
    coroutine (or one async generator per stream) however many concerns it passes through.

    `enter(context)` runs before the handler, in order: it returns what its `exit` gets, or
    `REJECTED` when it answered the call itself (the later layers and the handler do not run); it
    may raise, as the handler may. `exit(entered, error, context)` runs after, in reverse order, for
    every layer whose `enter` returned: it gets the exception so far (None) and returns the one to
    pass on (None: handled). `streamed(entered)` runs after each response of a stream, for layers
    with ``touches_streams``."""

    touches_streams = False

    def enter(self, context: grpc.aio.ServicerContext) -> Any:
        return None

    def exit(self, entered: Any, error: BaseException | None, context: grpc.aio.ServicerContext) -> Any:
        return error

    def streamed(self, entered: Any) -> None:
        pass


REJECTED: Final = object()
"""What `CallLayer.enter` returns when it answered the call itself (`reject`)."""


def is_streaming(handler: grpc.RpcMethodHandler) -> bool:
    """True for a method that answers with a stream (server-streaming or bidirectional)."""
    return handler.unary_stream is not None or handler.stream_stream is not None


def passing_bytes(serialize: Callable[[Any], bytes] | None) -> Callable[[Any], bytes] | None:
    """`serialize`, except that a response a handler already serialized (bytes) goes out as it
    is: a stream that sends the same parts to many callers composes its messages from parts
    serialized once (the table's feeds, `mahjong_table.wire`)."""
    if serialize is None:
        return None

    def serialized(response: Any) -> bytes:
        return response if response.__class__ is bytes else serialize(response)

    return serialized


def flat_method_handler(handler: grpc.RpcMethodHandler, layers: Sequence[CallLayer]) -> grpc.RpcMethodHandler:
    """A copy of an asyncio ``handler`` whose behavior runs inside ``layers`` (outermost first):
    the same order and outcomes as one interceptor per layer, nested, in one wrapper."""
    serializers = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": passing_bytes(handler.response_serializer),
    }
    if not is_streaming(handler):
        behavior = handler.unary_unary or handler.stream_unary
        assert behavior is not None, "an RpcMethodHandler has one of the four behaviors"

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            entered: list[tuple[CallLayer, Any]] = []
            error: BaseException | None = None
            response = None
            try:
                if _entered_all(layers, context, entered):
                    response = await behavior(request, context)
            except BaseException as raised:
                error = raised
            _exit_all(entered, error, context)
            return response

        make = (
            grpc.unary_unary_rpc_method_handler
            if handler.unary_unary is not None
            else grpc.stream_unary_rpc_method_handler
        )
        return make(unary, **serializers)
    stream_behavior = handler.unary_stream or handler.stream_stream
    assert stream_behavior is not None

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        # An async generator function itself: grpc runs only those on the loop.
        entered: list[tuple[CallLayer, Any]] = []
        error: BaseException | None = None
        try:
            if _entered_all(layers, context, entered):
                touching = [(layer, token) for layer, token in entered if layer.touches_streams]
                result = stream_behavior(request, context)
                if hasattr(result, "__aiter__"):
                    try:
                        async for item in result:
                            for layer, token in touching:
                                layer.streamed(token)
                            yield item
                    finally:
                        aclose = getattr(result, "aclose", None)
                        if aclose is not None:
                            await aclose()
                elif inspect.isawaitable(result):
                    await result  # a handler that writes with context.write
                elif result is not None:
                    for item in result:
                        for layer, token in touching:
                            layer.streamed(token)
                        yield item
        except BaseException as raised:
            error = raised
        _exit_all(entered, error, context)

    make_stream = (
        grpc.unary_stream_rpc_method_handler
        if handler.unary_stream is not None
        else grpc.stream_stream_rpc_method_handler
    )
    return make_stream(stream, **serializers)


def _entered_all(
    layers: Sequence[CallLayer], context: grpc.aio.ServicerContext, entered: list[tuple[CallLayer, Any]]
) -> bool:
    """Enter the layers in order, each entered one added to `entered`; False when one rejected
    the call (the rest are not entered). A layer's exception propagates, `entered` kept."""
    for layer in layers:
        token = layer.enter(context)
        if token is REJECTED:
            return False
        entered.append((layer, token))
    return True


def _exit_all(
    entered: list[tuple[CallLayer, Any]], error: BaseException | None, context: grpc.aio.ServicerContext
) -> None:
    """Leave the entered layers in reverse order, passing the error on; raise what is left of it."""
    for layer, token in reversed(entered):
        error = layer.exit(token, error, context)
    if error is not None:
        raise error


class _CachingInterceptor(AioWrappingInterceptor):
    """Wraps each method's handler once: a method's handler is the same object call after call, so
    its wrapped copy is kept instead of being rebuilt for every call."""

    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def _handler_for(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped


class AioLayerInterceptor(_CachingInterceptor):
    """An asyncio interceptor made of one `CallLayer` per method: usable alone, and `serve_aio`
    runs all of a server's layer interceptors in one `AioFlatInterceptor`."""

    def layer(self, method: str, streaming: bool) -> CallLayer:
        """The layer for the calls of ``method`` (``streaming``: it answers with a stream)."""
        raise NotImplementedError

    def passes_through(self, method: str) -> bool:
        """True for a method this interceptor leaves untouched (health, reflection, public ones)."""
        return self._passes_through(method)

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        return flat_method_handler(handler, [self.layer(method, is_streaming(handler))])


class AioFlatInterceptor(_CachingInterceptor):
    """Several `AioLayerInterceptor`s (outermost first) as one: each method's handler is wrapped
    once with every layer that does not pass it through, instead of one wrapper (an async generator
    per streamed message) per interceptor."""

    def __init__(self, interceptors: Sequence[AioLayerInterceptor]) -> None:
        super().__init__()
        self._interceptors = tuple(interceptors)

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        streaming = is_streaming(handler)
        layers = [
            interceptor.layer(method, streaming)
            for interceptor in self._interceptors
            if not interceptor.passes_through(method)
        ]
        return flat_method_handler(handler, layers)


def flattened(chain: Sequence[grpc.aio.ServerInterceptor]) -> list[grpc.aio.ServerInterceptor]:
    """``chain`` (outermost first) with each run of consecutive `AioLayerInterceptor`s as one
    `AioFlatInterceptor`: one wrapper per method instead of one per interceptor (issue 10), also
    when an interceptor that is not a layer (the table's owner routing) comes inside them."""
    result: list[grpc.aio.ServerInterceptor] = []
    run: list[AioLayerInterceptor] = []
    for interceptor in [*chain, None]:
        if isinstance(interceptor, AioLayerInterceptor):
            run.append(interceptor)
            continue
        if run:
            result.append(AioFlatInterceptor(run) if len(run) > 1 else run[0])
            run = []
        if interceptor is not None:
            result.append(interceptor)
    return result


class _ErrorMappingLayer(CallLayer):
    def __init__(self, interceptor: AioErrorMappingInterceptor, method: str) -> None:
        self._interceptor = interceptor
        self._method = method

    def exit(self, entered: Any, error: BaseException | None, context: grpc.aio.ServicerContext) -> Any:
        if error is None or isinstance(error, grpc.aio.AbortError) or not isinstance(error, Exception):
            return error
        self._interceptor.answer_for(error, self._method, context)
        return None


class AioErrorMappingInterceptor(AioLayerInterceptor):
    """`ErrorMappingInterceptor` for asyncio handlers; expected rejections are counted, not logged."""

    def __init__(
        self, extra_mapping: ErrorMapping | None = None, counter: RejectionCounter = REJECTIONS
    ) -> None:
        super().__init__()
        self._extra_mapping = dict(extra_mapping or {})
        self._counter = counter

    def layer(self, method: str, streaming: bool) -> CallLayer:
        """Exceptions of the handler (and of the layers inside) map to status codes."""
        return _ErrorMappingLayer(self, method)

    def answer_for(self, error: Exception, method: str, context: grpc.aio.ServicerContext) -> None:
        status = client_status(error, self._extra_mapping)
        if status is not None:
            status_code, message = status
            reject(context, status_code, message, method, self._counter)
            return
        reference = uuid.uuid4().hex
        _LOGGER.error(
            "rpc failed with an unexpected exception",
            exc_info=error,
            extra={"rpc_method": method, "status_code": "INTERNAL", "error_reference": reference},
        )
        context.set_code(grpc.StatusCode.INTERNAL)
        context.set_details(f"internal error (reference {reference})")


class _DeadlineLayer(CallLayer):
    def __init__(self, counter: RejectionCounter, method: str) -> None:
        self._counter = counter
        self._method = method

    def enter(self, context: grpc.aio.ServicerContext) -> Any:
        remaining = remaining_seconds(context)
        if (remaining is not None and remaining <= 0.0) or context.cancelled():
            reject(
                context,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"deadline passed before {self._method} started; retry with a longer deadline",
                self._method,
                self._counter,
            )
            return REJECTED
        return None


class AioDeadlineInterceptor(AioLayerInterceptor):
    """`DeadlineInterceptor` for asyncio handlers: a call past its deadline (or cancelled) never
    reaches the handler."""

    def __init__(self, counter: RejectionCounter = REJECTIONS) -> None:
        super().__init__()
        self._counter = counter

    def layer(self, method: str, streaming: bool) -> CallLayer:
        """The deadline check before the handler."""
        return _DeadlineLayer(self._counter, method)


class _AuthLayer(CallLayer):
    def __init__(self, interceptor: AioAuthInterceptor, method: str) -> None:
        self._interceptor = interceptor
        self._method = method

    def enter(self, context: grpc.aio.ServicerContext) -> Any:
        interceptor = self._interceptor
        try:
            identity = authorize(
                self._method,
                context.invocation_metadata(),
                interceptor.secret,
                interceptor.method_roles,
                interceptor.leeway_seconds,
            )
        except (UnauthenticatedError, PermissionDeniedError) as error:
            reject(context, error.status_code, error.message, self._method, interceptor.counter)
            return REJECTED
        # The handler's steps run in this call's task (a stream's generator too), inside the scope.
        return enter_identity_scope(identity)

    def exit(self, entered: Any, error: BaseException | None, context: grpc.aio.ServicerContext) -> Any:
        leave_identity_scope(entered)
        return error


class AioAuthInterceptor(AioLayerInterceptor):
    """`AuthInterceptor` for asyncio handlers: the same token and role checks (`auth.authorize`:
    deny by default, a method must be in the role table), the identity visible to the handler
    through `current_identity`."""

    def __init__(
        self,
        secret: str,
        method_roles: Mapping[str, Collection[str]] | None = None,
        public_methods: Collection[str] = (),
        leeway_seconds: int = DEFAULT_LEEWAY_SECONDS,
        counter: RejectionCounter = REJECTIONS,
    ) -> None:
        super().__init__()
        assert secret, "the JWT secret must not be empty"
        self.secret = secret
        self.method_roles = {method: frozenset(roles) for method, roles in (method_roles or {}).items()}
        self._public_methods = frozenset(public_methods)
        self.leeway_seconds = leeway_seconds
        self.counter = counter

    def _passes_through(self, method: str) -> bool:
        return super()._passes_through(method) or method in self._public_methods

    def layer(self, method: str, streaming: bool) -> CallLayer:
        """The handler runs only for a verified, authorized caller."""
        return _AuthLayer(self, method)


class _CallerLimitLayer(CallLayer):
    def __init__(self, limiter: CallerLimiter, streaming: bool) -> None:
        self._limiter = limiter
        self._streaming = streaming
        self.touches_streams = streaming

    def enter(self, context: grpc.aio.ServicerContext) -> Any:
        identity = current_identity()
        exempt = identity.has_any_role(OPS_ONLY)
        if not self._streaming:
            return self._limiter.acquire(identity.player_id, streaming=False, exempt=exempt)
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def cancel_from_the_sweeper() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: so is the stream
                loop.call_soon_threadsafe(task.cancel)

        return self._limiter.acquire(
            identity.player_id, streaming=True, on_idle=cancel_from_the_sweeper, exempt=exempt
        )

    def exit(self, entered: Any, error: BaseException | None, context: grpc.aio.ServicerContext) -> Any:
        entered.release()
        return error

    def streamed(self, entered: Any) -> None:
        entered.touch()


class AioCallerLimitInterceptor(AioLayerInterceptor):
    """`limits.CallerLimitInterceptor` for asyncio handlers, on the same `CallerLimiter`
    bookkeeping: runs inside `AioAuthInterceptor`; a call beyond its caller's limits is
    RESOURCE_EXHAUSTED, and an idle stream swept by the limiter is cancelled on the loop."""

    def __init__(self, limiter: CallerLimiter) -> None:
        super().__init__()
        self._limiter = limiter

    def layer(self, method: str, streaming: bool) -> CallLayer:
        """The handler runs within its caller's limits."""
        return _CallerLimitLayer(self._limiter, streaming)


@dataclass
class AioRunningServer:
    """A started asyncio server, driven from other threads: the same surface as `RunningServer`
    (port, health, graceful stop, signals)."""

    server: grpc.aio.Server
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    port: int
    service_names: tuple[str, ...]
    health_servicer: health_aio.HealthServicer
    grace_seconds: float
    _stopped: threading.Event = field(default_factory=threading.Event)
    _terminated: threading.Event = field(default_factory=threading.Event)

    def set_serving(self, service_name: str, serving: bool) -> None:
        """Report ``service_name`` (or "" for the whole server) SERVING or NOT_SERVING."""
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        asyncio.run_coroutine_threadsafe(self.health_servicer.set(service_name, status), self.loop).result()

    def begin_shutdown(self, grace_seconds: float | None = None) -> threading.Event:
        """Start a graceful stop (see `RunningServer.begin_shutdown`); the returned event is set
        once the server has stopped."""
        grace = self.grace_seconds if grace_seconds is None else grace_seconds
        _LOGGER.info("grpc server shutting down", extra={"port": self.port, "grace_seconds": grace})
        self._stopped.set()

        async def shut_down() -> None:
            await self.health_servicer.enter_graceful_shutdown()
            await self.server.stop(grace)

        if not self.loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(shut_down(), self.loop)
            except RuntimeError:  # the loop is already gone: the server with it
                self._terminated.set()
        return self._terminated

    def stop(self, grace_seconds: float | None = None) -> None:
        """Gracefully stop and wait until the server has stopped."""
        self.begin_shutdown(grace_seconds).wait()
        self.thread.join()

    def wait_for_termination(self, timeout_seconds: float | None = None) -> bool:
        """Block until the server stops (or the timeout passes); True when it has stopped. Waits
        in short steps so the main thread still runs signal handlers."""
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        while not self._terminated.wait(0.25):
            if deadline is not None and time.monotonic() >= deadline:
                return False
        return True

    def stop_on_signals(self, signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT)) -> None:
        """Begin a graceful shutdown on one of ``signals`` (main thread only); a second stops at once."""

        def on_signal(signal_number: int, frame: FrameType | None) -> None:
            already_stopping = self._stopped.is_set()
            _LOGGER.info("received signal %s", signal.Signals(signal_number).name)
            self.begin_shutdown(0.0 if already_stopping else None)

        for signal_to_handle in signals:
            signal.signal(signal_to_handle, on_signal)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Finish what the stopped server left on its loop (cancelled handlers), then close it."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def serve_aio(
    registrations: Sequence[ServiceRegistration],
    address: str,
    settings: Settings,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    extra_error_mapping: ErrorMapping | None = None,
    outermost_interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    serving: bool = True,
) -> AioRunningServer:
    """Start an asyncio server on ``address`` in a thread of its own (its event loop) hosting
    ``registrations`` (asyncio servicers); return once it accepts calls. Its health says SERVING,
    or NOT_SERVING when ``serving`` is false (until `AioRunningServer.set_serving`).

    ``interceptors`` (e.g. `AioAuthInterceptor`) run inside the standard ones (error mapping, then
    deadline); ``outermost_interceptors`` outside them all (the RPC metrics, which must see the
    final status code). No call limit: a call costs a coroutine, not a thread.
    """
    assert registrations, "a server without services serves nothing"
    service_names = tuple(registration.service_name for registration in registrations)
    assert len(set(service_names)) == len(service_names), f"service registered twice: {service_names}"
    loop = asyncio.new_event_loop()
    started: dict[str, Any] = {}
    ready = threading.Event()
    terminated = threading.Event()

    async def start() -> None:
        chain = [
            *outermost_interceptors,
            AioErrorMappingInterceptor(extra_error_mapping),
            AioDeadlineInterceptor(),
            *interceptors,
        ]
        server = grpc.aio.server(interceptors=flattened(chain), options=[("grpc.so_reuseport", 0)])
        for registration in registrations:
            registration.add_to_server(server)
        health_servicer = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection(
            (*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        try:
            port = server.add_insecure_port(address)
        except RuntimeError as error:
            raise OSError(f"cannot listen on {address}: {error}") from error
        if port == 0:
            raise OSError(f"cannot listen on {address}")
        await server.start()
        for service_name in ("", *service_names):
            await health_servicer.set(
                service_name,
                health_pb2.HealthCheckResponse.SERVING
                if serving
                else health_pb2.HealthCheckResponse.NOT_SERVING,
            )
        started.update(server=server, port=port, health=health_servicer)

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as error:
            started["error"] = error
            ready.set()
            loop.close()
            terminated.set()
            return
        ready.set()
        try:
            loop.run_until_complete(started["server"].wait_for_termination())
        finally:
            _close_loop(loop)
            terminated.set()

    thread = threading.Thread(target=run, name="grpc-aio-" + "-".join(service_names), daemon=True)
    thread.start()
    if not ready.wait(SERVER_START_TIMEOUT_SECONDS):
        raise OSError(f"the server on {address} did not start within {SERVER_START_TIMEOUT_SECONDS} s")
    if "error" in started:
        thread.join()
        raise started["error"]
    running = AioRunningServer(
        server=started["server"],
        loop=loop,
        thread=thread,
        port=started["port"],
        service_names=service_names,
        health_servicer=started["health"],
        grace_seconds=settings.grpc_shutdown_grace_seconds,
        _terminated=terminated,
    )
    _LOGGER.info(
        "grpc server started (asyncio)",
        extra={"address": address, "port": running.port, "services": list(service_names)},
    )
    return running
