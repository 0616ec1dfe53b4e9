"""The restart-proof client (`mjctl.client`) against an in-process gRPC server that fails the way a
restarting service does: a call that did not get through is retried with the same request (the
same idempotency key), a broken feed resumes after the last event seen, and the server's own
answers are not retried."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from mahjong.v1 import envelope_pb2, table_service_pb2_grpc
from mahjong.v1 import table_service_pb2 as messages
from mjctl import client


def update(first: int, last: int, phase: str = "turn") -> messages.TableUpdate:
    events = [envelope_pb2.Envelope(stream_id="t", sequence=sequence) for sequence in range(first, last + 1)]
    return messages.TableUpdate(
        events=events, view=messages.TableView(table_id="t", sequence=last, phase=phase)
    )


class FlakyTable(table_service_pb2_grpc.TableServiceServicer):
    """WatchView breaks (UNAVAILABLE) after events 1-3; Act fails once per key as UNAVAILABLE."""

    def __init__(self) -> None:
        self.watch_requests: list[int] = []
        self.act_keys: list[str] = []
        self.applied: set[str] = set()

    def WatchView(
        self, request: messages.WatchViewRequest, context: grpc.ServicerContext
    ) -> Iterator[messages.TableUpdate]:
        self.watch_requests.append(request.after_sequence)
        if request.after_sequence == 0:
            yield update(1, 2)
            yield update(3, 3)
            context.abort(grpc.StatusCode.UNAVAILABLE, "Stream removed")
        yield update(request.after_sequence + 1, 5, phase="ended")

    def Act(self, request: messages.ActRequest, context: grpc.ServicerContext) -> messages.ActResponse:
        self.act_keys.append(request.idempotency_key)
        if request.idempotency_key == "refused":
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "not your turn")
        if self.act_keys.count(request.idempotency_key) == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the table service is restarting")
        self.applied.add(request.idempotency_key)
        return messages.ActResponse()


@pytest.fixture
def fake() -> Iterator[tuple[FlakyTable, table_service_pb2_grpc.TableServiceStub]]:
    servicer = FlakyTable()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    table_service_pb2_grpc.add_TableServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield servicer, table_service_pb2_grpc.TableServiceStub(channel)
    finally:
        server.stop(None)


def no_wait_backoff(pauses: list[float] | None = None) -> client.Backoff:
    record = pauses if pauses is not None else []
    return client.Backoff(random_source=random.Random(7), sleep=record.append)


def test_a_broken_feed_resumes_after_the_last_event_seen_and_yields_each_event_once(
    fake: tuple[FlakyTable, table_service_pb2_grpc.TableServiceStub],
) -> None:
    servicer, stub = fake
    updates = list(client.watch_view(stub, "t", no_wait_backoff()))
    assert [event.sequence for u in updates for event in u.events] == [1, 2, 3, 4, 5]
    assert servicer.watch_requests == [0, 3]
    assert updates[-1].view.phase == "ended"


def test_an_act_that_did_not_get_through_is_sent_again_with_the_same_idempotency_key(
    fake: tuple[FlakyTable, table_service_pb2_grpc.TableServiceStub],
) -> None:
    servicer, stub = fake
    pauses: list[float] = []
    request = messages.ActRequest(table_id="t", idempotency_key="k-1")
    client.call(stub.Act, request, no_wait_backoff(pauses))
    assert servicer.act_keys == ["k-1", "k-1"]
    assert servicer.applied == {"k-1"}
    assert len(pauses) == 1


def test_the_servers_own_answer_is_raised_at_once(
    fake: tuple[FlakyTable, table_service_pb2_grpc.TableServiceStub],
) -> None:
    servicer, stub = fake
    with pytest.raises(grpc.RpcError) as refused:
        client.call(stub.Act, messages.ActRequest(table_id="t", idempotency_key="refused"), no_wait_backoff())
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert servicer.act_keys == ["refused"]


def test_a_service_that_stays_down_is_given_up_on_after_the_budget() -> None:
    with grpc.insecure_channel("127.0.0.1:1") as channel:  # nothing listens on port 1
        stub = table_service_pb2_grpc.TableServiceStub(channel)
        clock = iter(range(0, 10_000, 10))
        backoff = client.Backoff(give_up_after_seconds=60, sleep=lambda _s: None, clock=lambda: next(clock))
        with pytest.raises(grpc.RpcError) as gave_up:
            client.call(stub.GetView, messages.GetViewRequest(table_id="t"), backoff, timeout_seconds=5)
    assert gave_up.value.code() == grpc.StatusCode.UNAVAILABLE


def test_pauses_double_with_jitter_up_to_the_cap() -> None:
    pauses: list[float] = []
    backoff = client.Backoff(first_pause_seconds=0.1, max_pause_seconds=1.0, sleep=pauses.append)
    unavailable = client._EndedEarlyError("test")
    for _ in range(6):
        backoff.pause_or_raise(unavailable, "test")
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert all(ceiling / 2 <= pause <= ceiling for pause, ceiling in zip(pauses, ceilings, strict=True))


def test_a_view_seen_again_after_a_reconnect_gets_the_same_decision() -> None:
    decisions = client.Decisions()
    made: list[int] = []

    def decide() -> messages.ActRequest:
        made.append(1)
        return messages.ActRequest(idempotency_key=f"key-{len(made)}")

    first = decisions.for_view(7, decide)
    again = decisions.for_view(7, decide)
    later = decisions.for_view(8, decide)
    assert first is again and first.idempotency_key == "key-1"
    assert later.idempotency_key == "key-2"
    assert len(made) == 2


class OpeningTable(table_service_pb2_grpc.TableServiceServicer):
    """GetView answers NOT_FOUND until the table engine "opens" the table on the `opens_at`-th ask."""

    def __init__(self, opens_at: int | None, code: grpc.StatusCode = grpc.StatusCode.NOT_FOUND) -> None:
        self.opens_at = opens_at
        self.code = code
        self.asks = 0

    def GetView(self, request: messages.GetViewRequest, context: grpc.ServicerContext) -> messages.TableView:
        self.asks += 1
        if self.opens_at is None or self.asks < self.opens_at:
            context.abort(self.code, f"no table {request.table_id!r}")
        return messages.TableView(table_id=request.table_id, sequence=1, phase="exchange")


@pytest.fixture
def serve() -> Iterator[Callable[[OpeningTable], table_service_pb2_grpc.TableServiceStub]]:
    servers: list[grpc.Server] = []
    channels: list[grpc.Channel] = []

    def start(servicer: OpeningTable) -> table_service_pb2_grpc.TableServiceStub:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        table_service_pb2_grpc.add_TableServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        channels.append(grpc.insecure_channel(f"127.0.0.1:{port}"))
        return table_service_pb2_grpc.TableServiceStub(channels[-1])

    yield start
    for channel in channels:
        channel.close()
    for server in servers:
        server.stop(None)


class FakeTime:
    """A clock that moves only when the client sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def test_a_seat_whose_table_is_not_open_yet_is_asked_again_until_the_table_opens(
    serve: Callable[[OpeningTable], table_service_pb2_grpc.TableServiceStub],
) -> None:
    servicer = OpeningTable(opens_at=4)
    time = FakeTime()
    backoff = client.Backoff(random_source=random.Random(7), sleep=time.sleep, clock=lambda: time.now)
    view = client.wait_for_table(serve(servicer), "t-1", backoff)
    assert (view.table_id, view.phase) == ("t-1", "exchange")
    assert servicer.asks == 4
    assert len(time.pauses) == 3
    assert all(0.025 <= pause <= 0.2 for pause in time.pauses)  # short pauses: a table opens quickly


def test_a_table_that_never_opens_fails_clearly_after_the_wait(
    serve: Callable[[OpeningTable], table_service_pb2_grpc.TableServiceStub],
) -> None:
    servicer = OpeningTable(opens_at=None)
    time = FakeTime()
    backoff = client.Backoff(random_source=random.Random(7), sleep=time.sleep, clock=lambda: time.now)
    with pytest.raises(client.TableNotOpenedError, match="t-2 was assigned by matchmaking but not opened"):
        client.wait_for_table(serve(servicer), "t-2", backoff, give_up_after_seconds=30)
    assert 30 <= time.now <= 31  # pauses capped at 1 s
    assert servicer.asks == len(time.pauses) + 1


def test_waiting_for_a_table_raises_any_other_refusal_at_once(
    serve: Callable[[OpeningTable], table_service_pb2_grpc.TableServiceStub],
) -> None:
    servicer = OpeningTable(opens_at=None, code=grpc.StatusCode.PERMISSION_DENIED)
    with pytest.raises(grpc.RpcError) as refused:
        client.wait_for_table(serve(servicer), "t-3", no_wait_backoff())
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert servicer.asks == 1


def test_waiting_for_a_table_to_open_is_not_counted_as_a_retry(
    serve: Callable[[OpeningTable], table_service_pb2_grpc.TableServiceStub],
) -> None:
    retried: list[str] = []
    backoff = client.Backoff(sleep=lambda _s: None, on_retry=retried.append)
    client.wait_for_table(serve(OpeningTable(opens_at=3)), "t-4", backoff)
    assert retried == []


class FlakyPlayTable(table_service_pb2_grpc.TableServiceServicer):
    """Play (grpc.aio): NOT_FOUND at first (the table is not open yet); then events 1-2, takes a
    command without answering it, and breaks (UNAVAILABLE); then answers what it is sent and ends
    the game."""

    def __init__(self) -> None:
        self.opened_after: list[int] = []
        self.commands: list[str] = []

    async def Play(self, requests: Any, context: grpc.aio.ServicerContext) -> Any:
        iterator = requests.__aiter__()
        opening = await iterator.__anext__()
        self.opened_after.append(opening.open.after_sequence)
        if len(self.opened_after) == 1:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no table 't'")
        if len(self.opened_after) == 2:
            yield messages.PlayResponse(update=update(1, 2))
            self.commands.append((await iterator.__anext__()).act.idempotency_key)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "Stream removed")
        command = await iterator.__anext__()
        self.commands.append(command.act.idempotency_key)
        yield messages.PlayResponse(answer=messages.PlayAnswer(idempotency_key=command.act.idempotency_key))
        yield messages.PlayResponse(update=update(opening.open.after_sequence + 1, 5, phase="ended"))


@contextlib.asynccontextmanager
async def serving(servicer: Any) -> AsyncIterator[table_service_pb2_grpc.TableServiceStub]:
    """A stub of `servicer` served by an in-process ``grpc.aio`` server."""
    server = grpc.aio.server()
    table_service_pb2_grpc.add_TableServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield table_service_pb2_grpc.TableServiceStub(channel)
    finally:
        await server.stop(None)


def test_a_play_session_waits_for_the_table_resumes_and_sends_an_unanswered_command_again() -> None:
    servicer = FlakyPlayTable()

    async def run() -> list[messages.PlayResponse]:
        received: list[messages.PlayResponse] = []
        async with serving(servicer) as stub:
            session = client.PlaySession(stub, "t", client.Backoff(first_pause_seconds=0.01))
            async for response in session.responses():
                received.append(response)
                if response.WhichOneof("response") == "update" and response.update.view.sequence == 2:
                    session.send(messages.ActRequest(idempotency_key="k-1"))
                    session.send(messages.ActRequest(idempotency_key="k-1"))  # not sent twice
        return received

    received = asyncio.run(run())
    updates = [response.update for response in received if response.WhichOneof("response") == "update"]
    assert [event.sequence for u in updates for event in u.events] == [1, 2, 3, 4, 5]
    assert [r.answer.idempotency_key for r in received if r.WhichOneof("response") == "answer"] == ["k-1"]
    assert servicer.opened_after == [0, 0, 2]
    assert servicer.commands == ["k-1", "k-1"]  # sent again, with its key, after the reconnect


class RidingPlayTable(table_service_pb2_grpc.TableServiceServicer):
    """Play (grpc.aio) for a session opened with both options: answers its first command riding
    on an update, then breaks (UNAVAILABLE); after the reopen it answers the next command it is
    sent (alone) and ends the game."""

    def __init__(self) -> None:
        self.opens: list[messages.PlayRequest] = []
        self.commands: list[str] = []

    async def Play(self, requests: Any, context: grpc.aio.ServicerContext) -> Any:
        iterator = requests.__aiter__()
        opening = await iterator.__anext__()
        self.opens.append(opening)
        if len(self.opens) == 1:
            yield messages.PlayResponse(update=update(1, 2))
            command = (await iterator.__anext__()).act.idempotency_key
            self.commands.append(command)
            yield messages.PlayResponse(
                update=update(3, 3), answers=[messages.PlayAnswer(idempotency_key=command)]
            )
            await context.abort(grpc.StatusCode.UNAVAILABLE, "Stream removed")
        yield messages.PlayResponse(update=update(4, 4))
        command = (await iterator.__anext__()).act.idempotency_key
        self.commands.append(command)
        yield messages.PlayResponse(answer=messages.PlayAnswer(idempotency_key=command))
        yield messages.PlayResponse(update=update(5, 5, phase="ended"))


def test_a_play_session_asks_for_its_options_and_counts_an_answer_riding_on_an_update_as_answered() -> None:
    servicer = RidingPlayTable()
    counts: list[tuple[int, int, int]] = []

    async def run() -> list[messages.PlayResponse]:
        received: list[messages.PlayResponse] = []
        async with serving(servicer) as stub:
            session = client.PlaySession(
                stub,
                "t",
                client.Backoff(first_pause_seconds=0.01),
                answers_with_updates=True,
                wait_for_table_ms=5_000,
            )
            async for response in session.responses():
                received.append(response)
                sequence = response.update.view.sequence
                if response.WhichOneof("response") == "update" and sequence in (2, 4):
                    session.send(messages.ActRequest(idempotency_key=f"k-{sequence}"))
            counts.append((session.opens, session.received, session.riding))
        return received

    received = asyncio.run(run())
    assert [answer.idempotency_key for r in received for answer in client.answers_of(r)] == ["k-2", "k-4"]
    assert [opening.options for opening in servicer.opens] == 2 * [
        messages.PlayOptions(answers_with_updates=True, wait_for_table_ms=5_000)
    ]
    assert servicer.opens[1].open.after_sequence == 3
    assert servicer.commands == ["k-2", "k-4"]  # k-2 was answered (riding): not sent again
    assert counts == [(2, 5, 1)]  # opened twice; five responses, one answer riding on an update
