"""A Sichuan Bloody win scored again from its event (RULES.md 1.6; ARCHITECTURE: scoring decides
how much).

The hand is the one the table revealed in `PlayerWon`; the missing suit and the dealer come from
the stream before it. The rules library's `evaluate_win` reads it again and its multiplier is what
the win is paid on. Should it disagree with the table, its figure is used and a notice says so;
should it find no win at all, the table's figures are used (the win happened; the table is the
judge of who may win).
"""

from __future__ import annotations

from mahjong.v1 import table_events_pb2
from mahjong_rules import RulesError, Suit, WinContext, evaluate_win
from mahjong_rules.settlement import SettlementOptions, WinBy

from mahjong_scoring.game_facts.reading import sichuan_meld, sichuan_tile, sichuan_tiles
from mahjong_scoring.game_facts.steps import FanLine, ScoredFans, fan_lines


def score_sichuan_win(
    event: table_events_pb2.PlayerWon,
    win_by: WinBy,
    options: SettlementOptions,
    *,
    missing_suit: Suit | None,
    dealer: bool,
) -> tuple[ScoredFans, str]:
    """The win's multiplier and fans by the rules library, and a discrepancy to report ("" if none)."""
    from_table = ScoredFans(
        event.multiplier, tuple(FanLine(fan.id, fan.name, fan.multiplier) for fan in event.fans)
    )
    try:
        evaluation = evaluate_win(
            sichuan_tiles(event.concealed),
            [sichuan_meld(meld) for meld in event.melds],
            sichuan_tile(event.win_tile),
            missing_suit,
            WinContext(
                win_by=win_by.value,
                after_kong=event.after_kong,
                last_tile=event.last_tile,
                first_turn=event.first_turn,
                dealer=dealer,
                self_draw_bonus=options.self_draw_bonus.value,
                cap_points=options.cap_points,
            ),
        )
    except RulesError as error:
        return from_table, f"the rules library cannot read the winning hand: {error}"
    if evaluation is None:
        return from_table, "the rules library finds no win in this hand; the table's figures are used"
    scored = ScoredFans(evaluation.multiplier, fan_lines(evaluation.fans))
    if evaluation.multiplier != event.multiplier:
        return scored, f"the table scored ×{event.multiplier}, the rules library ×{evaluation.multiplier}"
    return scored, ""
