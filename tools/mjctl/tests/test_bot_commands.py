"""The reference bot (`mjctl bots`, `AsyncBotPlayer.play`) sends one command at a time: a view that
arrives while its command waits for an answer was built before that command counted, so it is
decided on only after the answer, and not at all when the accepted command took the table past it.
(Deciding on such a view sent a second exchange or missing-suit pick that the table refused: 14%
of the commands of a 32-table think-time run, README "Speed".) Played against a scripted Play
stream, so the order of updates and answers is exact. Also: a thinking bot goes on reading its
stream, each command has its own key, and a seat not freed yet is asked for again after doubling
pauses."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from mahjong.v1 import matchmaking_service_pb2, matchmaking_service_pb2_grpc
from mahjong.v1 import table_service_pb2 as messages
from mjctl import bots, client

ABORTED = grpc.StatusCode.ABORTED.value[0]


def discard_view(sequence: int, *, asked: bool = True, phase: str = "turn") -> messages.PlayResponse:
    view = messages.TableView(table_id="t", sequence=sequence, phase=phase, hand="1m2m3m")
    if asked:
        view.legal_actions.add(kind="discard", tiles=["1m", "2m", "3m"])
    return messages.PlayResponse(update=messages.TableUpdate(view=view))


def answer(key: str, *, code: int = 0, sequence: int = 0) -> messages.PlayResponse:
    played = messages.PlayAnswer(idempotency_key=key, code=code)
    if not code:
        played.result.sequence = sequence
    return messages.PlayResponse(answer=played)


class ScriptedSession:
    """A `client.PlaySession` whose stream is a script: `script(session)` yields the responses and
    may wait for the bot's commands (`sent`, in order; `log`, sends and answers interleaved)."""

    script: Any = None
    opens = received = riding = 0  # `client.PlaySession`'s counts

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        self.sent: list[messages.ActRequest] = []
        self.log: list[str] = []
        self.command_sent = asyncio.Event()
        ScriptedSession.last = self

    def send(self, request: messages.ActRequest) -> None:
        self.sent.append(request)
        self.log.append(f"send {len(self.sent)}")
        self.command_sent.set()

    async def next_command(self, count: int) -> str:
        while len(self.sent) < count:
            self.command_sent.clear()
            await self.command_sent.wait()
        return self.sent[count - 1].idempotency_key

    async def responses(self) -> AsyncIterator[messages.PlayResponse]:
        async for response in ScriptedSession.script(self):
            keys = [request.idempotency_key for request in self.sent]
            for answered in client.answers_of(response):  # alone, or riding on an update
                self.log.append(f"answer {keys.index(answered.idempotency_key) + 1}")
            if response.WhichOneof("response") == "update" and self.log_updates:
                self.log.append(f"update {response.update.view.sequence}")
            yield response

    log_updates = False


def play(
    monkeypatch: pytest.MonkeyPatch, script: Any, think_seconds: float = 0.0, log_updates: bool = False
) -> ScriptedSession:
    monkeypatch.setattr(client, "PlaySession", ScriptedSession)
    monkeypatch.setattr(ScriptedSession, "log_updates", log_updates)
    ScriptedSession.script = script

    async def run() -> None:
        channel = grpc.aio.insecure_channel("127.0.0.1:1")  # never dialled: the session is scripted
        try:
            bot = bots.AsyncBotPlayer("p0", channel, channel, "token", lambda _line: None, think_seconds)
            final = await bot.play("t")
            assert final.phase == "ended"
        finally:
            await channel.close()

    asyncio.run(run())
    return ScriptedSession.last


def test_a_view_built_before_the_accepted_command_counted_is_not_decided_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def script(session: ScriptedSession) -> AsyncIterator[messages.PlayResponse]:
        yield discard_view(1)
        first = await session.next_command(1)
        yield discard_view(2)  # another seat's event, the view before the discard counted
        yield answer(first, sequence=3)  # the discard took the table to 3
        yield discard_view(3, asked=False)
        yield discard_view(4, asked=False, phase="ended")

    session = play(monkeypatch, script)
    assert [request.expected_sequence for request in session.sent] == [1]
    assert session.log == ["send 1", "answer 1"]


def test_an_answer_riding_on_an_update_is_read_first_and_the_update_decided_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def script(session: ScriptedSession) -> AsyncIterator[messages.PlayResponse]:
        yield discard_view(1)
        first = await session.next_command(1)
        yield discard_view(2)  # another seat's event, the view before the discard counted
        riding = discard_view(4)  # the update after the discard, its answer riding on it
        riding.answers.append(answer(first, sequence=3).answer)
        yield riding
        second = await asyncio.wait_for(session.next_command(2), 60)  # not sent: the bot is stuck
        yield answer(second, sequence=5)
        yield discard_view(6, asked=False, phase="ended")

    session = play(monkeypatch, script, log_updates=True)
    assert [request.expected_sequence for request in session.sent] == [1, 4]
    assert session.log == [
        "update 1",
        "send 1",
        "update 2",
        "answer 1",
        "update 4",
        "send 2",
        "answer 2",
        "update 6",
    ]


def test_after_a_refusal_the_view_that_came_meanwhile_is_decided_on(monkeypatch: pytest.MonkeyPatch) -> None:
    async def script(session: ScriptedSession) -> AsyncIterator[messages.PlayResponse]:
        yield discard_view(1)
        first = await session.next_command(1)
        yield discard_view(2)
        yield answer(first, code=ABORTED)  # decided at 1, the table was at 2: refused, nothing changed
        second = await session.next_command(2)
        yield answer(second, sequence=3)
        yield discard_view(3, asked=False, phase="ended")

    session = play(monkeypatch, script)
    assert [request.expected_sequence for request in session.sent] == [1, 2]
    assert session.log == ["send 1", "answer 1", "send 2", "answer 2"]
    assert len({request.idempotency_key for request in session.sent}) == 2


def test_the_simultaneous_picks_go_without_the_optimistic_check_and_the_turn_commands_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def picking(sequence: int, kind: str) -> messages.PlayResponse:
        view = messages.TableView(table_id="t", sequence=sequence, phase="exchange", hand="1234567m123456p")
        view.legal_actions.add(kind=kind)
        return messages.PlayResponse(update=messages.TableUpdate(view=view))

    async def script(session: ScriptedSession) -> AsyncIterator[messages.PlayResponse]:
        yield picking(1, "exchange_three")
        yield answer(await session.next_command(1), sequence=3)  # RULES.md 1.2
        yield picking(5, "declare_missing_suit")
        yield answer(await session.next_command(2), sequence=6)  # RULES.md 1.3
        yield discard_view(9)
        yield answer(await session.next_command(3), sequence=10)
        yield discard_view(10, asked=False, phase="ended")

    session = play(monkeypatch, script)
    assert [request.WhichOneof("command") for request in session.sent] == [
        "exchange_three",
        "declare_missing_suit",
        "discard",
    ]
    assert [request.expected_sequence for request in session.sent] == [0, 0, 9]


def test_a_thinking_bot_goes_on_reading_its_stream_and_decides_on_the_view_it_thought_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--think-ms is a timer, not a sleep over the stream: what arrives meanwhile is read (and its
    delivery timed) when it arrives; the command is the one decided before thinking."""

    async def script(session: ScriptedSession) -> AsyncIterator[messages.PlayResponse]:
        yield discard_view(1)
        yield discard_view(2, asked=False)  # another seat's event while the bot thinks
        first = await session.next_command(1)
        yield answer(first, sequence=3)
        yield discard_view(3, asked=False, phase="ended")

    thinking = play(monkeypatch, script, think_seconds=0.01, log_updates=True)
    assert thinking.log == ["update 1", "update 2", "send 1", "answer 1", "update 3"]
    assert [request.expected_sequence for request in thinking.sent] == [1]
    at_once = play(monkeypatch, script, log_updates=True)
    assert at_once.log == ["update 1", "send 1", "update 2", "answer 1", "update 3"]
    assert [request.expected_sequence for request in at_once.sent] == [1]


def test_each_command_of_a_bot_has_its_own_key() -> None:
    async def keys() -> list[str]:
        channel = grpc.aio.insecure_channel("127.0.0.1:1")
        try:
            first = bots.AsyncBotPlayer("p0", channel, channel, "token", lambda _line: None)
            second = bots.AsyncBotPlayer("p0", channel, channel, "token", lambda _line: None)
            return [first._new_key(), first._new_key(), second._new_key()]
        finally:
            await channel.close()

    made = asyncio.run(keys())
    assert len(set(made)) == 3 and all(0 < len(key) <= 128 for key in made)  # ActRequest: 1..128


class SeatStillTaken(matchmaking_service_pb2_grpc.MatchmakingServiceServicer):
    """Matchmaking that has not read the bot's last GameEnded yet: `refusals` Enqueues refused as
    the service refuses a player still seated, then a ticket seated at once."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.enqueues = 0

    def Enqueue(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.enqueues += 1
        if self.enqueues <= self.refusals:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                "player 'p0' is already seated in room 'sichuan-novice' (ticket k0); "
                "cancel it or finish the game first",
            )
        return matchmaking_service_pb2.EnqueueResponse(ticket_id="k1")

    def WatchTicket(self, request: Any, context: grpc.ServicerContext) -> Any:
        yield matchmaking_service_pb2.TicketUpdate(ticket_id="k1", state="seated", table_id="t", seat=2)


def test_a_bot_whose_seat_is_not_freed_yet_enqueues_again_after_doubling_pauses() -> None:
    """Matchmaking frees a seat when it reads the game's GameEnded from Kafka, a moment after the
    bot saw the game end: the refused Enqueues are counted and asked again after pauses that
    double from 0.05 s up to 1 s (each drawn from its upper half), not every 50 ms for as long
    as it takes."""
    servicer = SeatStillTaken(refusals=7)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    matchmaking_service_pb2_grpc.add_MatchmakingServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    pauses: list[float] = []
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            bot = bots.BotPlayer("p0", channel, channel, log=lambda _line: None)
            bot._backoff = client.Backoff(random_source=random.Random(3), sleep=pauses.append)
            assert bot.find_table("sichuan-novice") == ("t", 2)
    finally:
        server.stop(None)
    assert servicer.enqueues == 8 and bot.enqueue_refusals == 7 and bot.retries == 0
    ceilings = [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert len(pauses) == len(ceilings)
    assert all(ceiling / 2 <= pause <= ceiling for pause, ceiling in zip(pauses, ceilings, strict=True))
