"""A game client that survives service restarts and deploys: the reconnect logic in one small file.

It needs only ``grpcio`` and the generated ``mahjong.v1`` stubs, so a mobile backend can copy it.
Four rules make a client restart-proof; ``mjctl bots`` and the README's example follow them:

1. **Retry a call that did not get through, with backoff, with the same request.** UNAVAILABLE
   (the service is restarting, a connection dropped) and RESOURCE_EXHAUSTED are retried after a
   pause that doubles (with jitter) up to ``max_pause_seconds``; DEADLINE_EXCEEDED too, because
   every call retried here is idempotent. A write carries its ``idempotency_key``; retrying the
   *same* request means the server applies it at most once and answers the first answer again.
2. **Resume a stream from what you have seen** (after the codes above, and CANCELLED: the server
   cancels a stream idle too long). ``watch_view`` reopens ``WatchView`` with
   ``after_sequence`` = the last event it yielded, so no event is lost or yielded twice;
   ``watch_ticket`` reopens ``WatchTicket`` (its first update is the ticket's state now).
3. **Wait for a table matchmaking seated you at.** Matchmaking answers "seated" as soon as it has
   formed the table; the table engine opens it a moment later, when it reads the assignment from
   Kafka. Until then the table is NOT_FOUND: ``wait_for_table`` asks again with backoff and gives
   up with ``TableNotOpenedError`` after ``TABLE_OPENS_WITHIN_SECONDS``.
4. **Decide once per view.** ``Decisions`` keeps the request chosen for a view sequence: when a
   reconnect shows the same view again, the same request (same key) is sent, never a second
   decision.

Everything else (FAILED_PRECONDITION, ABORTED, PERMISSION_DENIED, ...) is the server's answer and
is raised at once.

With ``grpc.aio`` (one event loop for many players, as ``mjctl bots`` runs them): ``call_async``
and ``watch_ticket_async`` are ``call`` and ``watch_ticket``, and ``PlaySession`` plays a seat on
one ``Play`` stream by the same rules: it waits for the table to open (3), reopens the stream
after a failure from the last view seen and sends the commands not answered yet again with their
keys (1, 2); ``Decisions`` (4) still gives one request per view.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, Final, TypeVar

import grpc
from mahjong.v1 import matchmaking_service_pb2 as matchmaking_messages
from mahjong.v1 import table_service_pb2 as table_messages

RETRYABLE_CODES: Final = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED}
)
STREAM_RESUMABLE_CODES: Final = RETRYABLE_CODES | {grpc.StatusCode.CANCELLED}
"""A feed is also resumed after CANCELLED: the server cancels a stream idle for too long."""
TABLE_OPENS_WITHIN_SECONDS: Final = 120.0
"""A table opens well under a second after matchmaking seats its players; longer only while the
table engine's Kafka consumer recovers (a restart, a rebalance)."""

Request = TypeVar("Request")
Response = TypeVar("Response")


@dataclasses.dataclass
class Backoff:
    """Pauses between attempts: ``first_pause_seconds`` doubling up to ``max_pause_seconds``, each
    drawn at random from its upper half (jitter, so clients do not come back in lockstep); gives up
    after ``give_up_after_seconds`` without a success. ``reset()`` after a success."""

    first_pause_seconds: float = 0.1
    max_pause_seconds: float = 5.0
    give_up_after_seconds: float = 300.0
    random_source: random.Random = dataclasses.field(default_factory=random.Random)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    on_retry: Callable[[str], None] = lambda _line: None
    _attempt: int = 0
    _failing_since: float | None = None

    def reset(self) -> None:
        """The last attempt succeeded."""
        self._attempt = 0
        self._failing_since = None

    def pause_or_raise(
        self, error: grpc.RpcError, what: str, retryable: frozenset[grpc.StatusCode] = RETRYABLE_CODES
    ) -> None:
        """Sleep before the next attempt, or re-raise ``error`` when its code is not ``retryable``
        or the budget is spent."""
        self.sleep(self.pause_for(error, what, retryable))

    def pause_for(
        self, error: grpc.RpcError, what: str, retryable: frozenset[grpc.StatusCode] = RETRYABLE_CODES
    ) -> float:
        """`pause_or_raise` without the sleep: how long to pause (an asyncio client awaits it)."""
        now = self.clock()
        if self._failing_since is None:
            self._failing_since = now
        if error.code() not in retryable or now - self._failing_since > self.give_up_after_seconds:
            raise error
        ceiling = min(self.first_pause_seconds * 2**self._attempt, self.max_pause_seconds)
        self._attempt += 1
        pause = ceiling / 2 + self.random_source.random() * ceiling / 2
        self.on_retry(f"{what}: {error.code().name}; retry {self._attempt} in {pause:.2f} s")
        return float(pause)


def call(
    method: Callable[..., Response],
    request: Any,
    backoff: Backoff,
    timeout_seconds: float = 30.0,
    what: str = "call",
) -> Response:
    """``method(request)`` retried as rule 1 says, always with this same request."""
    while True:
        try:
            response = method(request, timeout=timeout_seconds)
        except grpc.RpcError as error:
            backoff.pause_or_raise(error, what)
            continue
        backoff.reset()
        return response


def catching_up(backoff: Backoff, give_up_after_seconds: float) -> Backoff:
    """The pauses while a service has not yet read what another wrote (Kafka between them): the
    table engine opening a table matchmaking formed (rule 3), matchmaking freeing the seat of a game
    that just ended. From 0.05 s doubling up to 1 s (each drawn from its upper half), not counted
    as retries (the call got through: the answer is "not yet")."""
    return dataclasses.replace(
        backoff,
        first_pause_seconds=0.05,
        max_pause_seconds=1.0,
        give_up_after_seconds=give_up_after_seconds,
        on_retry=lambda _line: None,
        _attempt=0,
        _failing_since=None,
    )


class TableNotOpenedError(RuntimeError):
    """A table matchmaking assigned stayed NOT_FOUND for the whole wait."""


def wait_for_table(
    stub: Any,
    table_id: str,
    backoff: Backoff,
    give_up_after_seconds: float = TABLE_OPENS_WITHIN_SECONDS,
    timeout_seconds: float = 30.0,
) -> table_messages.TableView:
    """The seat's first view of a table matchmaking seated it at, asked again (rule 3) while the
    table engine has not opened it yet (NOT_FOUND: pauses from 0.05 s doubling up to 1 s);
    ``TableNotOpenedError`` when it is still not open after ``give_up_after_seconds``. Other
    failures are handled as ``call`` handles them, with ``backoff``."""
    opening = catching_up(backoff, give_up_after_seconds)
    request = table_messages.GetViewRequest(table_id=table_id)
    while True:
        try:
            view: table_messages.TableView = call(stub.GetView, request, backoff, timeout_seconds, "GetView")
            return view
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:
                raise
            try:
                opening.pause_or_raise(error, f"table {table_id[:8]} not open yet", frozenset({error.code()}))
            except grpc.RpcError:
                raise TableNotOpenedError(
                    f"table {table_id} was assigned by matchmaking but not opened by the table service "
                    f"within {give_up_after_seconds:g} s (still NOT_FOUND: {error.details()})"
                ) from None


def watch_view(
    stub: Any,
    table_id: str,
    backoff: Backoff,
    after_sequence: int = 0,
    timeout_seconds: float = 600.0,
) -> Iterator[table_messages.TableUpdate]:
    """Every ``TableUpdate`` of the seat's WatchView feed, the stream reopened after a failure from
    the last event seen. Each event is yielded once; the first update after a reopen carries the
    events missed meanwhile and the view now. Ends after the update whose view is ``ended``."""
    seen = after_sequence
    while True:
        stream = stub.WatchView(
            table_messages.WatchViewRequest(table_id=table_id, after_sequence=seen), timeout=timeout_seconds
        )
        try:
            for update in stream:
                backoff.reset()
                seen = max(seen, update.view.sequence)  # a view is never ahead of its events
                yield update
                if update.view.phase == "ended":
                    return
        except grpc.RpcError as error:
            backoff.pause_or_raise(error, f"WatchView {table_id[:8]}", STREAM_RESUMABLE_CODES)
            continue
        finally:
            stream.cancel()
        # The server closed the feed without an error before the end (it is shutting down): reopen.
        backoff.pause_or_raise(_ended_early(f"WatchView {table_id[:8]}"), f"WatchView {table_id[:8]}")


def watch_ticket(
    stub: Any, ticket_id: str, backoff: Backoff, timeout_seconds: float = 600.0
) -> Iterator[matchmaking_messages.TicketUpdate]:
    """The ticket's updates (its state first), the stream reopened after a failure, until the
    ticket is seated or cancelled."""
    while True:
        stream = stub.WatchTicket(
            matchmaking_messages.WatchTicketRequest(ticket_id=ticket_id), timeout=timeout_seconds
        )
        try:
            for update in stream:
                backoff.reset()
                yield update
                if update.state in ("seated", "cancelled"):
                    return
        except grpc.RpcError as error:
            backoff.pause_or_raise(error, f"WatchTicket {ticket_id[:8]}", STREAM_RESUMABLE_CODES)
            continue
        finally:
            stream.cancel()
        backoff.pause_or_raise(_ended_early(f"WatchTicket {ticket_id[:8]}"), f"WatchTicket {ticket_id[:8]}")


class Decisions:
    """One decision per view: ``for_view(sequence, decide)`` calls ``decide()`` the first time a
    view sequence is seen and returns that same request whenever the sequence comes back (after a
    reconnect), so a retried decision keeps its idempotency key."""

    def __init__(self) -> None:
        self._sequence: int | None = None
        self._request: Any = None

    def for_view(self, sequence: int, decide: Callable[[], Request]) -> Request:
        """The request decided for this view sequence (deciding it now if it is new)."""
        if sequence != self._sequence:
            self._sequence, self._request = sequence, decide()
        request: Request = self._request
        return request


class _EndedEarlyError(grpc.RpcError):  # type: ignore[misc]
    """A stream the server closed cleanly before its end: treated as UNAVAILABLE."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what}: stream closed before its end")
        self._details = f"{what}: stream closed before its end"

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return self._details


def _ended_early(what: str) -> grpc.RpcError:
    return _EndedEarlyError(what)


# ------------------------------------------------------------------------------ grpc.aio


async def call_async(
    method: Callable[..., Any],
    request: Any,
    backoff: Backoff,
    timeout_seconds: float = 30.0,
    what: str = "call",
    metadata: Any = None,
) -> Any:
    """``call`` for a ``grpc.aio`` stub method (``metadata``: e.g. the caller's bearer token)."""
    while True:
        try:
            response = await method(request, timeout=timeout_seconds, metadata=metadata)
        except grpc.RpcError as error:
            await asyncio.sleep(backoff.pause_for(error, what))
            continue
        backoff.reset()
        return response


async def watch_ticket_async(
    stub: Any, ticket_id: str, backoff: Backoff, timeout_seconds: float = 600.0, metadata: Any = None
) -> AsyncIterator[matchmaking_messages.TicketUpdate]:
    """``watch_ticket`` for a ``grpc.aio`` stub."""
    what = f"WatchTicket {ticket_id[:8]}"
    while True:
        stream = stub.WatchTicket(
            matchmaking_messages.WatchTicketRequest(ticket_id=ticket_id),
            timeout=timeout_seconds,
            metadata=metadata,
        )
        try:
            async for update in stream:
                backoff.reset()
                yield update
                if update.state in ("seated", "cancelled"):
                    return
        except grpc.RpcError as error:
            await asyncio.sleep(backoff.pause_for(error, what, STREAM_RESUMABLE_CODES))
            continue
        finally:
            stream.cancel()
        await asyncio.sleep(backoff.pause_for(_ended_early(what), what))


class PlaySession:
    """One seat's ``Play`` stream (``grpc.aio``) that survives reconnects.

    ``responses()`` yields every ``PlayResponse``: the feed's updates (each event once, as
    ``watch_view``) and the answers to the commands given to ``send`` (``answers_of`` gives a
    response's answers). While the table engine has not opened the table yet (NOT_FOUND before
    any response), the stream is opened again after pauses from 0.05 s doubling up to 1 s, for
    ``TABLE_OPENS_WITHIN_SECONDS`` (rule 3); with ``wait_for_table_ms`` the server itself waits
    that long for the table to open before it answers NOT_FOUND (``PlayOptions``), so a table
    that opens within the wait costs no second call. After a failure it reopens from the last view
    seen and sends every command not answered yet again, with its key, so each is applied at
    most once (rules 1, 2). With ``answers_with_updates`` answers ride on the updates when they
    can (``PlayResponse.answers``); with ``hold_idle_updates_ms`` the updates that give the seat
    nothing to decide come merged, up to that much later (``PlayOptions``). Ends after the
    ``ended`` view and the answers the server sent with it."""

    def __init__(
        self,
        stub: Any,
        table_id: str,
        backoff: Backoff,
        *,
        after_sequence: int = 0,
        timeout_seconds: float = 600.0,
        metadata: Any = None,
        answers_with_updates: bool = False,
        wait_for_table_ms: int = 0,
        hold_idle_updates_ms: int = 0,
    ) -> None:
        self._stub = stub
        self._table_id = table_id
        self._backoff = backoff
        self._seen = after_sequence
        self._timeout_seconds = timeout_seconds
        self._metadata = metadata
        self._options = table_messages.PlayOptions(
            answers_with_updates=answers_with_updates,
            wait_for_table_ms=wait_for_table_ms,
            hold_idle_updates_ms=hold_idle_updates_ms,
        )
        self._unanswered: dict[str, table_messages.ActRequest] = {}
        self._outgoing: asyncio.Queue[table_messages.ActRequest | None] | None = None
        self.opens = 0
        """How many times the stream was opened (each a call; a NOT_FOUND before the table opened too)."""
        self.received = 0
        """How many responses the stream brought (each a message)."""
        self.riding = 0
        """How many answers came riding on updates (``answers_with_updates``)."""

    def send(self, request: table_messages.ActRequest) -> None:
        """Send a command (its ``idempotency_key`` set); its answer comes through ``responses``.
        A command already waiting for its answer is not sent twice."""
        if request.idempotency_key in self._unanswered:
            return
        self._unanswered[request.idempotency_key] = request
        if self._outgoing is not None:
            self._outgoing.put_nowait(request)

    async def _requests(
        self, outgoing: asyncio.Queue[table_messages.ActRequest | None]
    ) -> AsyncIterator[table_messages.PlayRequest]:
        yield table_messages.PlayRequest(
            open=table_messages.WatchViewRequest(table_id=self._table_id, after_sequence=self._seen),
            options=self._options,
        )
        while (request := await outgoing.get()) is not None:
            yield table_messages.PlayRequest(act=request)

    async def responses(self) -> AsyncIterator[table_messages.PlayResponse]:
        what = f"Play {self._table_id[:8]}"
        opening = catching_up(self._backoff, TABLE_OPENS_WITHIN_SECONDS)
        opened = False
        while True:
            outgoing: asyncio.Queue[table_messages.ActRequest | None] = asyncio.Queue()
            for request in self._unanswered.values():
                outgoing.put_nowait(request)
            self._outgoing = outgoing
            self.opens += 1
            stream = self._stub.Play(
                self._requests(outgoing), timeout=self._timeout_seconds, metadata=self._metadata
            )
            ended = False
            try:
                async for response in stream:
                    self.received += 1
                    self.riding += len(response.answers)
                    opened = True
                    self._backoff.reset()
                    for answer in answers_of(response):
                        self._unanswered.pop(answer.idempotency_key, None)
                    if response.WhichOneof("response") == "update":
                        self._seen = max(self._seen, response.update.view.sequence)
                        ended = ended or response.update.view.phase == "ended"
                    yield response
                if ended:
                    return
            except grpc.RpcError as error:
                if not opened and error.code() == grpc.StatusCode.NOT_FOUND:
                    try:
                        await asyncio.sleep(opening.pause_for(error, what, frozenset({error.code()})))
                    except grpc.RpcError:
                        raise TableNotOpenedError(
                            f"table {self._table_id} was assigned by matchmaking but not opened by the "
                            f"table service within {TABLE_OPENS_WITHIN_SECONDS:g} s (still NOT_FOUND: "
                            f"{error.details()})"
                        ) from None
                    continue
                await asyncio.sleep(self._backoff.pause_for(error, what, STREAM_RESUMABLE_CODES))
                continue
            finally:
                self._outgoing = None
                outgoing.put_nowait(None)
                stream.cancel()
            # Closed without an error before the end (the server is shutting down): reopen.
            await asyncio.sleep(self._backoff.pause_for(_ended_early(what), what))


def answers_of(response: table_messages.PlayResponse) -> Sequence[table_messages.PlayAnswer]:
    """The answers a ``PlayResponse`` carries, in order: its ``answer``, or those riding on its
    update (``PlayOptions.answers_with_updates``); they come before the update's events."""
    if response.WhichOneof("response") == "answer":
        return (response.answer,)
    return response.answers
