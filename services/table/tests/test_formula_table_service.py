"""A formula (公式) table played through the TableService gRPC API by four bots (RULES.md 2):
the service picks the formula aggregate by the room's variant, the wildcard and bird reach every
seat, and no stream carries another seat's concealed tiles or the wall."""

from __future__ import annotations

import uuid

import pytest
from mahjong.v1 import common_pb2, match_events_pb2, rooms_pb2
from mahjong.v1 import table_service_pb2 as messages
from mahjong_platform.database import transaction

from .conftest import TableServer
from .test_table_service import PLAYERS, play_to_the_end


def open_formula_table(server: TableServer, seed: int) -> str:
    table_id = str(uuid.uuid4())
    assigned = match_events_pb2.TableAssigned(
        table_id=table_id,
        room_id="formula-fan",
        seed=seed,
        seats=[match_events_pb2.SeatAssignment(seat=seat, player_id=p) for seat, p in enumerate(PLAYERS)],
        room=rooms_pb2.Room(
            room_id="formula-fan",
            rules=rooms_pb2.RoomRules(
                variant=common_pb2.VARIANT_FORMULA,
                coefficient=200,
                rake_beans=20,
                turn_timeout_ms=60_000,
                reconnect_grace_ms=600_000,
                min_fan=0,
                no_wildcard_fan=2,
                fan_term="fan_plus_8",
                escape_penalty_points=16,
                escape_compensation_points=8,
            ),
        ),
    )
    with transaction(server.session_factory) as session:  # type: ignore[arg-type]
        envelopes = server.engine.open_from_assignment(session, assigned, causation_id="test")
    server.engine.committed(envelopes)
    return table_id


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_four_bots_play_a_formula_game_through_the_api(table_server: TableServer, seed: int) -> None:
    table_id = open_formula_table(table_server, seed)
    first = table_server.view("east", table_id)
    assert first.wildcard and first.wildcard_indicator  # RULES.md 2.1: visible to all
    assert not first.exchange_direction and all(not seat.missing_suit for seat in first.seats)
    streams = play_to_the_end(table_server, table_id)
    final = table_server.view("south", table_id)
    assert final.phase == "ended" and final.end_reason in ("win", "wall_exhausted")
    assert sum(seat.won for seat in final.seats) <= 1  # RULES.md 2.1: one win ends the hand
    for player, events in streams.items():
        kinds = [event.WhichOneof("payload") for event in events]
        assert kinds[-1] == "game_ended", player
        opened = events[0].table_opened
        assert not opened.wall and opened.wildcard == first.wildcard
        seat = PLAYERS.index(player)
        for event in events:
            if event.WhichOneof("payload") == "tile_drawn" and event.tile_drawn.seat != seat:
                assert event.tile_drawn.tile == ""
            if event.WhichOneof("payload") == "hands_dealt":
                assert all(not hand.tiles for hand in event.hands_dealt.hands if hand.seat != seat)
        if final.end_reason == "win":
            bird = next(event.bird_revealed for event in events if event.HasField("bird_revealed"))
            assert bird.tile == final.bird_tile and bird.seat == final.bird_seat


def test_a_chow_request_reaches_the_formula_rules(table_server: TableServer) -> None:
    table_id = open_formula_table(table_server, 5)
    view = table_server.view("east", table_id)
    stub = table_server.stub_for(PLAYERS[(view.dealer_seat + 2) % 4])
    request = messages.ActRequest(table_id=table_id, idempotency_key="k")
    request.chow.tile = "1m"
    with pytest.raises(Exception, match=r"no discard is open|not asked|previous seat|phase"):
        stub.Act(request)
