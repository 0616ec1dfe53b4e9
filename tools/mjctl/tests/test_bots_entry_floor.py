"""``mjctl bots`` stops, says why and exits non-zero when bots are below the room's entry floor
(RULES.md 1.9) instead of leaving the others waiting forever for a fourth player."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from mahjong.v1 import matchmaking_service_pb2 as messages
from mahjong.v1 import matchmaking_service_pb2_grpc
from mjctl.bots import BelowEntryFloorError, run_bots

FLOOR_REFUSAL = "balance 900 beans is below room 'sichuan-novice''s entry floor of 2000 beans"


class FloorMatchmaking(matchmaking_service_pb2_grpc.MatchmakingServiceServicer):
    """Players whose id ends in one of ``poor_suffixes`` are below the floor; the others queue
    until their ticket is cancelled (nobody is ever seated: a table would need the poor ones)."""

    def __init__(self, poor_suffixes: tuple[str, ...]) -> None:
        self.poor_suffixes = poor_suffixes
        self.cancelled: set[str] = set()
        self.tickets: dict[str, str] = {}
        self.changed = threading.Condition()

    def _player(self, context: grpc.ServicerContext) -> str:
        return dict(context.invocation_metadata())["player"]

    def Enqueue(
        self, request: messages.EnqueueRequest, context: grpc.ServicerContext
    ) -> messages.EnqueueResponse:
        player = self._player(context)
        if player.endswith(self.poor_suffixes):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, FLOOR_REFUSAL)
        ticket_id = str(uuid.uuid4())
        self.tickets[ticket_id] = player
        return messages.EnqueueResponse(ticket_id=ticket_id)

    def Cancel(
        self, request: messages.CancelRequest, context: grpc.ServicerContext
    ) -> messages.CancelResponse:
        with self.changed:
            self.cancelled.add(request.ticket_id)
            self.changed.notify_all()
        return messages.CancelResponse()

    def WatchTicket(
        self, request: messages.WatchTicketRequest, context: grpc.ServicerContext
    ) -> Iterator[messages.TicketUpdate]:
        yield messages.TicketUpdate(ticket_id=request.ticket_id, state="queued")
        with self.changed:
            while request.ticket_id not in self.cancelled and context.is_active():
                self.changed.wait(0.1)
        yield messages.TicketUpdate(ticket_id=request.ticket_id, state="cancelled")


class PlayerMetadata(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, player: str) -> None:
        self.player = player

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return details._replace(metadata=[*(details.metadata or ()), ("player", self.player)])

    def intercept_unary_unary(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):  # type: ignore[no-untyped-def]
        return continuation(self._details(details), request)


@pytest.fixture
def matchmaking() -> Iterator[tuple[FloorMatchmaking, int]]:
    servicer = FloorMatchmaking(poor_suffixes=("-3",))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    matchmaking_service_pb2_grpc.add_MatchmakingServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, port
    finally:
        server.stop(None)


def run_against(servicer: FloorMatchmaking, port: int, players: int) -> BelowEntryFloorError:
    def channel_for(_service: str, player: str) -> grpc.Channel:
        return grpc.intercept_channel(grpc.insecure_channel(f"127.0.0.1:{port}"), PlayerMetadata(player))

    with pytest.raises(BelowEntryFloorError) as stopped:
        run_bots("sichuan-novice", players, players // 4, channel_for, log=lambda _line: None)
    return stopped.value


def test_one_bot_below_the_floor_stops_the_run_and_every_waiting_ticket_is_cancelled(
    matchmaking: tuple[FloorMatchmaking, int],
) -> None:
    servicer, port = matchmaking
    error = run_against(servicer, port, players=4)
    assert "1 of 4 bots are below room 'sichuan-novice''s entry floor" in str(error)
    assert FLOOR_REFUSAL in str(error)
    assert servicer.cancelled == set(servicer.tickets)  # nobody is left waiting in the queue
    assert len(servicer.tickets) <= 3


def test_every_bot_below_the_floor_stops_the_run_at_once(matchmaking: tuple[FloorMatchmaking, int]) -> None:
    servicer, port = matchmaking
    servicer.poor_suffixes = tuple(f"-{index}" for index in range(4))
    error = run_against(servicer, port, players=4)
    # The first refusal stops the others, so 1 to 4 of them asked before they were stopped.
    assert re.search(r"[1-4] of 4 bots are below room 'sichuan-novice''s entry floor", str(error))
    assert not servicer.tickets
