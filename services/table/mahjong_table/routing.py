"""A TableService call reaches the replica that owns its table (README "Scale-out: replicas").

`OwnerRoutingInterceptor` runs inside authentication and the caller limits. A call about a table
this replica owns (`ownership.Ownership.route`) goes to the servicer, which ends a stream with
UNAVAILABLE once the table's partition is taken away (`TableEngine.check_owned`). A call about a
table another replica owns is **forwarded** there once, with the caller's own metadata (its token:
the owner authenticates and authorizes it again) and what is left of its deadline; the owner's
answer, or its status, goes back unchanged. A forwarded call that reaches a replica that does not
own the table (the table moved meanwhile), or a table no replica serves right now, is UNAVAILABLE
with a message naming nothing but that, so the client's ordinary retry (`mjctl.client`) reaches
the new owner a moment later.

Why forward rather than redirect: a mobile backend usually dials one address (a load balancer in
front of the replicas) and cannot pick a replica; a forward works for it and for any client, with
no client change, at the cost of one extra hop for the calls that land elsewhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import grpc
import grpc.aio
from mahjong_platform.aio_grpc_server import reject
from mahjong_platform.grpc_server import AioWrappingInterceptor, remaining_seconds
from mahjong_platform.metrics import UNSCRAPED, ServiceMetrics

from mahjong_table.ownership import LOCAL, Ownership, Route
from mahjong_table.servicer import TABLE_ID_MAX_LENGTH
from mahjong_table.tables import MOVED_MESSAGE

FORWARDED_BY_METADATA_KEY: Final = "mahjong-forwarded-by"
"""Set on a forwarded call (the forwarding replica's address): a call is forwarded at most once."""
TABLE_SERVICE_PREFIX: Final = "/mahjong.v1.TableService/"
NO_OWNER_MESSAGE: Final = (
    "no table-engine replica serves this table right now (it is moving between replicas); retry"
)
_NOT_FORWARDED_METADATA: Final = frozenset({"user-agent", "content-type", "te", "host"})


def _table_id(request: Any) -> str | None:
    table_id = getattr(request, "table_id", None)
    return table_id if isinstance(table_id, str) and 0 < len(table_id) <= TABLE_ID_MAX_LENGTH else None


def _forwarded(context: grpc.aio.ServicerContext) -> bool:
    return any(key == FORWARDED_BY_METADATA_KEY for key, _value in context.invocation_metadata() or ())


class OwnerRoutingInterceptor(AioWrappingInterceptor):
    """Serves a TableService call here when this replica owns its table, forwards it otherwise."""

    def __init__(self, ownership: Ownership, metrics: ServiceMetrics = UNSCRAPED) -> None:
        self._ownership = ownership
        self._forwarded = metrics.counter(
            "mahjong_table_forwarded_calls",
            "TableService calls (streams included) this replica forwarded to the replica owning the table.",
            ["method"],
        )
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def _passes_through(self, method: str) -> bool:
        return super()._passes_through(method) or not method.startswith(TABLE_SERVICE_PREFIX)

    def _handler_for(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """Responses leave as bytes (serialized here for a local call, as the owner sent them for a
        forwarded one). A two-way stream (Play) is routed by the table its first request opens."""
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary, handler.response_serializer),
                request_deserializer=handler.request_deserializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(method, handler.unary_stream, handler.response_serializer),
                request_deserializer=handler.request_deserializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._stream(method, handler.stream_stream, handler.response_serializer, two_way=True),
                request_deserializer=handler.request_deserializer,
            )
        return handler

    def _route(self, request: Any, context: grpc.aio.ServicerContext) -> tuple[str, Route]:
        table_id = _table_id(request)
        if table_id is None:
            return "", LOCAL  # malformed: the servicer refuses it
        route = self._ownership.route(table_id)
        if route is not LOCAL and _forwarded(context):
            return table_id, None  # one hop at most: the table is moving
        return table_id, route

    def _unary(
        self,
        method: str,
        behavior: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
        serialize: Callable[[Any], bytes],
    ) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[bytes | None]]:
        async def unary(request: Any, context: grpc.aio.ServicerContext) -> bytes | None:
            _table, route = self._route(request, context)
            if route is LOCAL:
                response = await behavior(request, context)
                return None if response is None else serialize(response)
            if route is None:
                reject(context, grpc.StatusCode.UNAVAILABLE, NO_OWNER_MESSAGE, method)
                return b""
            assert isinstance(route, str)
            forward = self._channel(route, method).unary_unary(method, request_serializer=_serialized)
            try:
                answer: bytes = await forward(
                    request, metadata=self._metadata(context), timeout=remaining_seconds(context)
                )
            except grpc.aio.AioRpcError as error:
                self._answer_failure(error, context, method)
                return b""
            return answer

        return unary

    def _stream(
        self,
        method: str,
        behavior: Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]],
        serialize: Callable[[Any], bytes],
        two_way: bool = False,
    ) -> Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[bytes]]:
        """A server stream (routed by its request) or a two-way one (by what its first request
        opens; `behavior` then gets every request, the first one included)."""

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            if two_way:
                first, request = await _first_of(request)
                _table, route = self._route(_opened(first), context)
            else:
                _table, route = self._route(request, context)
            if route is LOCAL:
                async for item in behavior(request, context):
                    yield item if item.__class__ is bytes else serialize(item)
                return
            if route is None:
                reject(context, grpc.StatusCode.UNAVAILABLE, NO_OWNER_MESSAGE, method)
                return
            assert isinstance(route, str)
            channel = self._channel(route, method)
            open_call = channel.stream_stream if two_way else channel.unary_stream
            call = open_call(method, request_serializer=_serialized)(
                request, metadata=self._metadata(context), timeout=remaining_seconds(context)
            )
            try:
                async for answer in call:
                    yield answer
            except grpc.aio.AioRpcError as error:
                self._answer_failure(error, context, method)
            finally:
                call.cancel()

        return stream

    def _channel(self, address: str, method: str) -> grpc.aio.Channel:
        """The channel to the owner at `address` (one per owner), counting the call forwarded."""
        self._forwarded.labels(method).inc()
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc.aio.insecure_channel(address)
        return channel

    def _metadata(self, context: grpc.aio.ServicerContext) -> list[tuple[str, str | bytes]]:
        """The caller's metadata (its token among it), marked as forwarded by this replica."""
        metadata: list[tuple[str, str | bytes]] = [
            (key, value)
            for key, value in context.invocation_metadata() or ()
            if not key.startswith((":", "grpc-")) and key not in _NOT_FORWARDED_METADATA
        ]
        metadata.append((FORWARDED_BY_METADATA_KEY, self._ownership.address))
        return metadata

    @staticmethod
    def _answer_failure(error: grpc.aio.AioRpcError, context: grpc.aio.ServicerContext, method: str) -> None:
        """The owner's status, as it answered; an owner that cannot be reached (it died, its
        partitions are about to move) is UNAVAILABLE without its address or the transport's words."""
        code = error.code()
        unreachable = code == grpc.StatusCode.UNAVAILABLE and error.details() not in (
            NO_OWNER_MESSAGE,
            MOVED_MESSAGE,
        )
        reject(context, code, NO_OWNER_MESSAGE if unreachable else (error.details() or code.name), method)


async def _first_of(requests: AsyncIterator[Any]) -> tuple[Any, AsyncIterator[Any]]:
    """The first request of a client stream (None: it sent none), and all of its requests again."""
    iterator = requests.__aiter__()
    try:
        first = await iterator.__anext__()
    except StopAsyncIteration:
        first = None
    return first, _Replayed(first, iterator)


class _Replayed:
    """A client stream's requests, the first one (already read) again first: after it, each
    request is the stream's own awaitable, with no generator of ours in between (a Play stream
    passes every command through here)."""

    __slots__ = ("_first", "_iterator")

    def __init__(self, first: Any, iterator: AsyncIterator[Any]) -> None:
        self._first = first
        self._iterator = iterator

    def __aiter__(self) -> _Replayed:
        return self

    def __anext__(self) -> Awaitable[Any]:
        first, self._first = self._first, None
        if first is None:
            return self._iterator.__anext__()
        return _ready(first)


async def _ready(value: Any) -> Any:
    return value


def _opened(first: Any) -> Any:
    """What the first request of a two-way stream opens (the message of its oneof that names a
    table, e.g. PlayRequest.open), or the request itself."""
    if first is None:
        return None
    for oneof in first.DESCRIPTOR.oneofs:
        kind = first.WhichOneof(oneof.name)
        if kind is not None and _table_id(getattr(first, kind)) is not None:
            return getattr(first, kind)
    return first


def _serialized(request: Any) -> bytes:
    data: bytes = request.SerializeToString()
    return data
