"""Formula (RULES.md 2.1, 2.2): robbing an added kong (抢杠和) and the dealer's win on the 14
tiles dealt."""

from __future__ import annotations

import pytest
from mahjong_rules.formula.fans import FormulaWinContext, WinBy
from mahjong_rules.formula.wildcards import evaluate_formula_win
from mahjong_rules.room_rules import RoomRules
from mahjong_rules.tiles import parse_tile, parse_tiles
from mahjong_table.core.commands import Chow, Discard, ExpireDeadline, Kong, Pass, Pong, Win
from mahjong_table.core.errors import IllegalClaimError, IllegalWinError, NotYourTurnError
from mahjong_table.core.events import (
    EXPOSURE_ADDED,
    BirdRevealed,
    GameEnded,
    KongDeclared,
    KongRobbed,
    PlayerWon,
    TileDrawn,
)
from mahjong_table.core.state import Phase
from mahjong_table.formula.views import legal_actions, view_for
from mahjong_table.servicer import table_view_message

from .test_formula_aggregate import FormulaTable, assert_consistent, formula_table, kinds_of

# Dealer 0 discards 3m and seat 1 pongs it (seat 2, able to win on it, passes). Seat 2 waits on
# 3m (edge 12m). Head draws: seat 2 draws 6s, seat 3 5m, seat 0 3p (each discarded, nobody
# claims), then seat 1 draws the fourth 3m and adds it to its pong.
ROB_HANDS = (
    "3m124578p124578s1z",
    "33m469p469s23455z",
    "12m666m456p789s99m",
    "112m7m18p89s12344z",
)
ROB_HEAD = "6s5m3p3m"


def added_kong_table(hands: tuple[str, ...] = ROB_HANDS) -> FormulaTable:
    """Play up to seat 1's added kong of 3m; every seat able to win on 3m passes the discard."""
    table = formula_table(hands, head=ROB_HEAD, tail="9p")
    table.act(Discard(0, "3m"))
    while table.state.window is not None and "win" in kinds_of(table.state, table.state.window.asks[0].seat):
        table.act(Pass(table.state.window.asks[0].seat))
    table.act(Pong(1))
    table.act(Discard(1, "9p"))
    for seat, tile in ((2, "6s"), (3, "5m"), (0, "3p")):
        assert table.state.turn_seat == seat and table.state.drawn_tile == parse_tile(tile)
        table.act(Discard(seat, tile))
    assert table.state.turn_seat == 1 and table.state.drawn_tile == parse_tile("3m")
    assert [action.tiles for action in legal_actions(table.state, 1) if action.kind == "kong"] == [("3m",)]
    events = table.act(Kong(1, "3m"))
    assert events == [KongDeclared(1, "3m", EXPOSURE_ADDED)]
    return table


def test_an_added_kong_opens_a_win_only_window_rules_2_2() -> None:
    table = added_kong_table()
    state = table.state
    assert state.phase is Phase.CLAIM and state.window is not None and state.window.rob_kong
    assert kinds_of(state, 2) == ["win", "pass", "leave"]
    view = view_for(state, 2)
    assert (view.claimable_tile, view.claim_from_seat) == ("3m", 1)
    # Nothing but a win answers an added kong; the declarer cannot rob itself.
    with pytest.raises(IllegalClaimError, match="only be robbed by a win"):
        table.act(Pong(2))
    with pytest.raises(IllegalClaimError, match="only be robbed by a win"):
        table.act(Chow(2, "1m"))
    with pytest.raises(IllegalClaimError, match="own"):
        table.act(Win(1))
    assert table.state == state  # refused commands change nothing
    assert_consistent(table)


def test_robbing_the_kong_voids_it_and_the_declarer_pays_as_a_discarder_rules_2_2() -> None:
    table = added_kong_table()
    events = table.act(Win(2))
    robbed, won, bird, ended = events
    assert robbed == KongRobbed(1, "3m", (2,))
    assert isinstance(won, PlayerWon)
    assert (won.seat, won.win_tile, won.win_by, won.from_seat) == (2, "3m", "rob_kong", 1)
    fan_ids = [fan.id for fan in won.fans]
    assert "robbing_the_kong" in fan_ids
    # Three copies were visible (the pong), yet 抢杠和 does not combine with 和绝张 (MCR).
    assert won.fourth_tile and "last_tile" not in fan_ids and not won.last_tile
    expected = evaluate_formula_win(
        parse_tiles("12m666m456p789s99m"),
        [],
        parse_tile("3m"),
        FormulaWinContext(win_by=WinBy.ROB_KONG, fourth_tile=True, seat_wind=parse_tile("3z")),
        wildcard=parse_tile("7z"),
        min_fan=0,
    )
    assert expected is not None and won.fan_total == expected.total_fan
    assert isinstance(bird, BirdRevealed) and isinstance(ended, GameEnded) and ended.reason == "win"
    # The kong reverted to the pong it was; the robbed tile went to the winner's hand.
    declarer = table.state.players[1]
    assert [(meld.kind, meld.tile) for meld in declarer.melds] == [("pong", parse_tile("3m"))]
    assert table.state.players[2].concealed[parse_tile("3m")] == 1
    assert_consistent(table)


def test_when_nobody_robs_the_kong_stands_and_the_declarer_draws_from_the_tail_rules_2_2() -> None:
    table = added_kong_table()
    events = table.act(Pass(2))
    assert events[-1] == TileDrawn(1, "9p", True, events[-1].wall_remaining)  # type: ignore[union-attr]
    state = table.state
    assert state.phase is Phase.TURN and state.turn_seat == 1 and state.turn_after_kong
    assert [(meld.kind, meld.exposure) for meld in state.players[1].melds] == [("kong", EXPOSURE_ADDED)]
    assert_consistent(table)


def test_a_timeout_in_the_rob_window_passes_rules_2_2() -> None:
    table = added_kong_table()
    events = table.act(ExpireDeadline())
    assert isinstance(events[-1], TileDrawn) and events[-1].from_tail and events[-1].seat == 1
    assert_consistent(table)


def test_the_first_robber_in_turn_order_takes_it_rules_2_1() -> None:
    # Seat 3 waits on 3m too (edge 12m): seat 2 comes first after the declarer (截和).
    hands = (ROB_HANDS[0], ROB_HANDS[1], ROB_HANDS[2], "12m789m11z888p222z")
    table = added_kong_table(hands)
    window = table.state.window
    assert window is not None and [ask.seat for ask in window.asks] == [2, 3]
    with pytest.raises(NotYourTurnError):
        table.act(Win(3))
    table.act(Pass(2))
    events = table.act(Win(3))
    won = next(event for event in events if isinstance(event, PlayerWon))
    assert (won.seat, won.win_by, won.from_seat) == (3, "rob_kong", 1)
    assert_consistent(table)


# The dealer's 14 as dealt: 123m 456m 789m 123p 55p.
FIRST_TURN_HANDS = (
    "123456789m12355p",
    "33m469p469s23455z",
    "12m666m456p789s99m",
    "112m7m18p89s12344z",
)


def test_the_dealer_may_win_on_the_14_tiles_dealt_rules_2_1() -> None:
    table = formula_table(FIRST_TURN_HANDS)
    assert table.state.drawn_tile is None and kinds_of(table.state, 0)[0] == "win"
    events = table.act(Win(0))
    won = events[0]
    assert isinstance(won, PlayerWon) and won.win_by == "self_draw" and won.first_turn
    # The winning tile is the reading that scores highest (RULES.md 2.2 takes the best reading).
    dealt = parse_tiles("123456789m12355p")
    totals = {}
    for tile in sorted(set(dealt)):
        rest = list(dealt)
        rest.remove(tile)
        evaluation = evaluate_formula_win(
            rest, [], tile, FormulaWinContext(win_by=WinBy.SELF_DRAW), wildcard=parse_tile("7z"), min_fan=0
        )
        assert evaluation is not None
        totals[tile] = evaluation.total_fan
    best = max(totals.values())
    assert won.fan_total == best
    assert parse_tile(won.win_tile) == min(tile for tile, total in totals.items() if total == best)
    assert isinstance(events[-1], GameEnded)
    assert_consistent(table)


def test_the_dealer_first_turn_win_respects_the_minimum_rules_2_1() -> None:
    rules = RoomRules(variant="formula", exchange_three=False, min_fan=88)
    table = formula_table(FIRST_TURN_HANDS, rules=rules)
    assert "win" not in kinds_of(table.state, 0)
    with pytest.raises(IllegalWinError, match="88 fan"):
        table.act(Win(0))


def test_a_view_lists_the_discards_the_seat_could_win_on_rules_2_1() -> None:
    table = formula_table(ROB_HANDS)
    assert view_for(table.state, 2).waits == ("3m",)  # edge 12m; min_fan 0
    assert view_for(table.state, 1).waits == ()
    strict = formula_table(ROB_HANDS, rules=RoomRules(variant="formula", exchange_three=False, min_fan=64))
    assert view_for(strict.state, 2).waits == ()  # 3m completes the hand but cannot reach 64 fan
    message = table_view_message(table.state, 2, None)
    assert message.waits == "3m"
