"""What happened at a table, in a few lines: the demo's and the operators' quick summary.

Reads the table's full event stream through TableService.Watch with an ops token (full
information), so it works against any running system.
"""

from __future__ import annotations

import grpc
from mahjong.v1 import common_pb2, envelope_pb2, table_service_pb2, table_service_pb2_grpc

WIN_BY = {
    common_pb2.WIN_BY_SELF_DRAW: "self-draw",
    common_pb2.WIN_BY_DISCARD: "discard",
    common_pb2.WIN_BY_ROB_KONG: "robbing a kong",
}
EXPOSURE = {
    common_pb2.KONG_EXPOSURE_EXPOSED: "exposed",
    common_pb2.KONG_EXPOSURE_ADDED: "added",
    common_pb2.KONG_EXPOSURE_CONCEALED: "concealed",
}


def table_events(channel: grpc.Channel, table_id: str) -> list[envelope_pb2.Envelope]:
    stub = table_service_pb2_grpc.TableServiceStub(channel)
    return list(stub.Watch(table_service_pb2.WatchRequest(table_id=table_id), timeout=30))


def summary_lines(events: list[envelope_pb2.Envelope]) -> list[str]:
    """Who sat where, every kong, win (with fan names) and escape, and how the game ended."""
    lines: list[str] = []
    players: dict[int, str] = {}
    for envelope in events:
        kind = envelope.WhichOneof("payload")
        if kind == "table_opened":
            opened = envelope.table_opened
            players = {seat.seat: seat.player_id for seat in opened.seats}
            lines.append(
                f"table {opened.table_id[:8]} room {opened.room_id}: dealer seat {opened.dealer_seat}, "
                f"exchange {opened.exchange_direction}, seats "
                + ", ".join(f"{seat} {player}" for seat, player in sorted(players.items()))
            )
        elif kind == "kong_declared":
            kong = envelope.kong_declared
            lines.append(f"  kong: seat {kong.seat} {EXPOSURE.get(kong.exposure, '?')} kong of {kong.tile}")
        elif kind == "player_won":
            won = envelope.player_won
            fans = " · ".join(f"{fan.name} ×{fan.multiplier}" for fan in won.fans)
            source = "" if won.from_seat < 0 else f" from seat {won.from_seat}"
            lines.append(
                f"  win {won.win_order}: seat {won.seat} ({players.get(won.seat, '?')}) by "
                f"{WIN_BY.get(won.win_by, '?')}{source} on {won.win_tile}: {fans} = ×{won.multiplier}"
            )
        elif kind == "player_left":
            left = envelope.player_left
            lines.append(f"  escape: seat {left.seat} ({left.reason}{', had won' if left.had_won else ''})")
        elif kind == "game_ended":
            lines.append(f"  ended: {envelope.game_ended.reason} after {envelope.sequence} events")
    return lines


def print_table_summary(channel: grpc.Channel, table_id: str) -> None:
    for line in summary_lines(table_events(channel, table_id)):
        print(line)
