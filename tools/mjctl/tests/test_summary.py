"""The demo's table summary (`mjctl.summary.summary_lines`): every fan a win scored is shown so the
line adds up, a formula fan counted twice included (RULES.md 2.2)."""

from __future__ import annotations

from mahjong.v1 import common_pb2, envelope_pb2, table_events_pb2
from mjctl.summary import summary_lines


def test_a_formula_win_line_shows_fan_counts_and_adds_up_to_its_total() -> None:
    won = table_events_pb2.PlayerWon(
        seat=3,
        win_tile="3z",
        win_by=common_pb2.WIN_BY_DISCARD,
        from_seat=1,
        fans=[
            common_pb2.Fan(id="melded_hand", name="全求人", multiplier=6, count=1),
            common_pb2.Fan(id="pung_of_terminals_or_honors", name="幺九刻", multiplier=1, count=2),
            common_pb2.Fan(id="no_wildcard", name="无财神", multiplier=2, count=1),
        ],
        win_order=1,
        fan_total=10,
    )
    lines = summary_lines([envelope_pb2.Envelope(sequence=1, player_won=won)])
    assert lines == [
        "  win 1: seat 3 (?) by discard from seat 1 on 3z: 全求人 6 · 幺九刻 1×2 · 无财神 2 = 10 fan"
    ]
