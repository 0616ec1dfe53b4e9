"""Per-caller limits, so that one caller cannot starve the others (issue 17).

A server has a fixed number of workers (``MAHJONG_GRPC_MAX_WORKERS``), and a server-streaming call
holds one for its whole life. Without limits one player could open hundreds of idle ``Watch``
streams and leave every other caller with RESOURCE_EXHAUSTED. `CallerLimiter` counts, per verified
caller (the token's player id), the open streams and the concurrent calls, and refuses beyond:

- at most ``streams_per_caller`` open server streams per caller (callers holding ``ops``, the
  services' own identities and operators, are exempt from the per-caller counts: matchmaking asks
  the ledger for many players at once), and all callers together at most
  ``total_streams`` (three quarters of the workers by default), so unary calls always find a worker;
- at most ``calls_per_caller`` concurrent unary calls per caller;
- a stream that has sent nothing for ``stream_idle_seconds`` is cancelled by `sweep_idle` (the
  client sees CANCELLED and resumes with its last sequence): a forgotten stream frees its worker.

The limiter is plain, thread-safe bookkeeping with no gRPC in it, so the thread-pool interceptor
here (`CallerLimitInterceptor`) and an asyncio harness can share it: ``acquire`` a `Lease` when a
call starts (after authentication), ``touch`` it on every streamed message, ``release`` it at the end.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

import grpc

from mahjong_platform.auth import OPS_ONLY, current_identity
from mahjong_platform.errors import ResourceExhaustedError
from mahjong_platform.grpc_server import WrappingInterceptor, wrap_rpc_method_handler

DEFAULT_STREAMS_PER_CALLER: Final = 16
DEFAULT_CALLS_PER_CALLER: Final = 32
DEFAULT_STREAM_IDLE_SECONDS: Final = 600.0
SWEEP_INTERVAL_SECONDS: Final = 5.0


@dataclasses.dataclass
class Lease:
    """One call counted against its caller; `touch` on activity, `release` exactly once at the end."""

    caller: str
    streaming: bool
    on_idle: Callable[[], object]
    last_active: float
    _limiter: CallerLimiter
    _released: bool = False

    def touch(self) -> None:
        """The call sent a message: it is not idle."""
        self.last_active = self._limiter.clock()

    def release(self) -> None:
        """Give the call's slot back (idempotent)."""
        self._limiter._release(self)


class CallerLimiter:
    """Counts open streams and concurrent calls per caller and refuses beyond the limits."""

    def __init__(
        self,
        streams_per_caller: int = DEFAULT_STREAMS_PER_CALLER,
        calls_per_caller: int = DEFAULT_CALLS_PER_CALLER,
        total_streams: int | None = None,
        stream_idle_seconds: float = DEFAULT_STREAM_IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert streams_per_caller > 0 and calls_per_caller > 0 and stream_idle_seconds > 0
        assert total_streams is None or total_streams > 0
        self.streams_per_caller = streams_per_caller
        self.calls_per_caller = calls_per_caller
        self.total_streams = total_streams
        self.stream_idle_seconds = stream_idle_seconds
        self.clock = clock
        self._lock = threading.Lock()
        self._leases: dict[int, Lease] = {}
        self._counts: dict[tuple[str, bool], int] = {}
        self._open_streams = 0

    def acquire(
        self,
        caller: str,
        *,
        streaming: bool,
        on_idle: Callable[[], object] = lambda: None,
        exempt: bool = False,
    ) -> Lease:
        """A lease for a new call of ``caller``, or `ResourceExhaustedError` saying which limit.

        ``exempt``: a trusted caller, not held to the per-caller counts (the total still applies).
        """
        with self._lock:
            held = self._counts.get((caller, streaming), 0)
            limit = self.streams_per_caller if streaming else self.calls_per_caller
            if held >= limit and not exempt:
                kind = "open streams" if streaming else "concurrent calls"
                raise ResourceExhaustedError(
                    f"caller already has {held} {kind} (at most {limit} per caller); "
                    "finish or cancel some before opening more"
                )
            if streaming and self.total_streams is not None and self._open_streams >= self.total_streams:
                raise ResourceExhaustedError(
                    f"the server holds its maximum of {self.total_streams} open streams; retry shortly"
                )
            lease = Lease(caller, streaming, on_idle, self.clock(), self)
            self._leases[id(lease)] = lease
            self._counts[(caller, streaming)] = held + 1
            self._open_streams += streaming
            return lease

    def _release(self, lease: Lease) -> None:
        with self._lock:
            if lease._released:
                return
            lease._released = True
            del self._leases[id(lease)]
            key = (lease.caller, lease.streaming)
            self._counts[key] -= 1
            if not self._counts[key]:
                del self._counts[key]
            self._open_streams -= lease.streaming

    def held(self, caller: str, *, streaming: bool) -> int:
        """How many streams (or unary calls) ``caller`` holds now."""
        with self._lock:
            return self._counts.get((caller, streaming), 0)

    def sweep_idle(self) -> int:
        """Cancel (through each lease's ``on_idle``) the streams idle for too long; how many."""
        now = self.clock()
        with self._lock:
            idle = [
                lease
                for lease in self._leases.values()
                if lease.streaming and now - lease.last_active >= self.stream_idle_seconds
            ]
        for lease in idle:
            lease.on_idle()
            lease.release()
        return len(idle)

    def run_sweeper(self, stop: threading.Event, interval_seconds: float = SWEEP_INTERVAL_SECONDS) -> None:
        """Sweep idle streams every ``interval_seconds`` until ``stop`` is set (a daemon thread's body)."""
        while not stop.wait(interval_seconds):
            self.sweep_idle()


class CallerLimitInterceptor(WrappingInterceptor):
    """Applies a `CallerLimiter` to every call of the thread-pool server. Runs inside
    `AuthInterceptor` (it needs the verified caller); a refused call is RESOURCE_EXHAUSTED."""

    def __init__(self, limiter: CallerLimiter) -> None:
        self._limiter = limiter

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """Wrap the method's handler so that it runs within its caller's limits."""
        limiter = self._limiter

        def unary_response(invoke: Callable[[], Any], context: grpc.ServicerContext) -> Any:
            identity = current_identity()
            lease = limiter.acquire(
                identity.player_id, streaming=False, exempt=identity.has_any_role(OPS_ONLY)
            )
            try:
                return invoke()
            finally:
                lease.release()

        def streaming_response(
            invoke: Callable[[], Iterator[Any]], context: grpc.ServicerContext
        ) -> Iterator[Any]:
            identity = current_identity()
            lease = limiter.acquire(
                identity.player_id,
                streaming=True,
                on_idle=context.cancel,
                exempt=identity.has_any_role(OPS_ONLY),
            )
            try:
                for item in invoke():
                    lease.touch()
                    yield item
            finally:
                lease.release()

        return wrap_rpc_method_handler(handler, unary_response, streaming_response)
