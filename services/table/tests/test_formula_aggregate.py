"""The formula (公式) table aggregate (RULES.md 2.1-2.3): scenarios from fixed walls, and seeded
random games (144 tiles accounted for, replay equals live, every game ends)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from mahjong_rules.room_rules import RoomRules
from mahjong_rules.tiles import parse_tiles
from mahjong_table.core.commands import (
    Chow,
    DeclareMissingSuit,
    Discard,
    ExpireDeadline,
    Kong,
    Pass,
    Pong,
    TableCommand,
    Win,
)
from mahjong_table.core.errors import IllegalClaimError, IllegalWinError, NotYourTurnError, WrongPhaseError
from mahjong_table.core.events import (
    BirdRevealed,
    ChowClaimed,
    FlowerReplaced,
    GameEnded,
    PlayerWon,
    PongClaimed,
    TableOpened,
    TileDrawn,
    WallExhausted,
)
from mahjong_table.core.state import Phase
from mahjong_table.core.views import redact
from mahjong_table.formula.decide import open_formula_table
from mahjong_table.formula.evolve import fold
from mahjong_table.formula.state import FormulaTableState
from mahjong_table.formula.views import legal_actions, view_for
from mahjong_table.testing import FormulaTable, formula_table_with_hands, tiles_accounted

NO_FAN_MINIMUM = RoomRules(variant="formula", exchange_three=False, min_fan=0)


def formula_table(hands: Sequence[str], rules: RoomRules = NO_FAN_MINIMUM, **wall: str) -> FormulaTable:
    """A table dealt exactly `hands` (dealer seat 0), with no fan minimum unless `rules` say."""
    return formula_table_with_hands(hands, rules, **wall)


def kinds_of(state: FormulaTableState, seat: int) -> list[str]:
    return [action.kind for action in legal_actions(state, seat)]


def assert_consistent(table: FormulaTable) -> None:
    assert tiles_accounted(table.state) == 144
    assert fold(table.events) == table.state


# Dealer 0 discards 3m first. Seat 1 (after the dealer) and seat 2 both hold 4m5m.
CHOW_HANDS = (
    "3m124578p124578s1z",
    "45m99m236p236s234z",
    "458m699p369s5566z",
    "112m7m18p89s12344z",
)


def test_chow_only_from_the_previous_seat_rules_2_1() -> None:
    table = formula_table(CHOW_HANDS)
    assert table.state.phase is Phase.TURN and table.state.turn_seat == 0
    table.act(Discard(0, "3m"))
    assert kinds_of(table.state, 1) == ["chow", "pass", "leave"]
    assert [a.tiles for a in legal_actions(table.state, 1) if a.kind == "chow"] == [("3m",)]
    assert kinds_of(table.state, 2) == ["leave"]
    with pytest.raises(IllegalClaimError, match="previous seat"):
        table.act(Chow(2, "3m"))
    events = table.act(Chow(1, "3m"))
    assert events == [ChowClaimed(1, 0, "3m", "3m")]
    assert table.state.turn_seat == 1 and table.state.phase is Phase.TURN
    assert table.state.players[1].melds[0].kind == "chow"
    assert_consistent(table)


def test_pong_goes_before_chow_rules_2_1() -> None:
    hands = (CHOW_HANDS[0], CHOW_HANDS[1], "33m8m699p369s5566z", "112m7m18p89s12344z")
    table = formula_table(hands)
    table.act(Discard(0, "3m"))
    assert kinds_of(table.state, 2)[:2] == ["pong", "pass"]
    with pytest.raises(NotYourTurnError):
        table.act(Chow(1, "3m"))
    table.act(Pass(2))
    assert kinds_of(table.state, 1)[0] == "chow"
    with pytest.raises(IllegalClaimError, match="lowest tile"):
        table.act(Chow(1, "4m"))
    assert table.act(Chow(1, "3m")) == [ChowClaimed(1, 0, "3m", "3m")]


# Seats 1 and 2 both win on 3m; seat 3 could pong it.
WIN_HANDS = (
    "3m124578p124578s1z",
    "12m456789p123s99s",
    "45m123p456s789s11z",
    "33m16m18p89s12344z",
)


def test_first_winner_in_turn_order_takes_the_discard_jiehu_rules_2_1() -> None:
    table = formula_table(WIN_HANDS, head="4f5p")
    table.act(Discard(0, "3m"))
    assert kinds_of(table.state, 1)[0] == "win"
    with pytest.raises(NotYourTurnError):
        table.act(Win(2))
    with pytest.raises(NotYourTurnError):
        table.act(Pong(3))
    events = table.act(Win(1))
    wins = [event for event in events if isinstance(event, PlayerWon)]
    assert [win.seat for win in wins] == [1]
    assert wins[0].fan_total > 0 and wins[0].from_seat == 0
    # RULES.md 2.3: the bird is the next wall tile with flowers skipped (4f, then 5p: value 5 lands
    # on (dealer 0 + 5 - 1) mod 4 = seat 0), and everyone sees it.
    bird = next(event for event in events if isinstance(event, BirdRevealed))
    assert bird == BirdRevealed("5p", 0)
    assert redact(bird, 3) == bird
    assert isinstance(events[-1], GameEnded) and events[-1].reason == "win"
    assert view_for(table.state, 2).bird_tile == "5p"
    assert_consistent(table)


def test_a_pass_hands_the_win_to_the_next_winner_in_turn_order_rules_2_1() -> None:
    table = formula_table(WIN_HANDS)
    table.act(Discard(0, "3m"))
    table.act(Pass(1))
    events = table.act(Win(2))
    assert [event.seat for event in events if isinstance(event, PlayerWon)] == [2]


def test_win_goes_before_pong_rules_2_1() -> None:
    table = formula_table(WIN_HANDS)
    table.act(Discard(0, "3m"))
    table.act(Pass(1))
    table.act(Pass(2))
    assert kinds_of(table.state, 3)[0] == "pong"
    assert isinstance(table.act(Pong(3))[0], PongClaimed)


def test_min_fan_refuses_a_small_win_rules_2_1() -> None:
    table = formula_table(WIN_HANDS, rules=RoomRules(variant="formula", exchange_three=False, min_fan=64))
    table.act(Discard(0, "3m"))
    with pytest.raises(IllegalWinError, match="64 fan"):
        table.act(Win(1))
    assert "win" not in kinds_of(table.state, 1)


def test_flowers_are_set_aside_and_replaced_from_the_tail_dealer_first_rules_2_1() -> None:
    hands = ("1f2f3m124578p12457s", "3f45m99m236p236s23z", CHOW_HANDS[2], CHOW_HANDS[3])
    table = formula_table(hands, tail="5z4f6z7s9m", head="5f1m")
    replaced = [(e.seat, e.flower) for e in table.events if isinstance(e, FlowerReplaced)]
    assert replaced == [(0, "1f"), (0, "2f"), (0, "4f"), (1, "3f")]
    assert table.state.players[0].flowers == tuple(parse_tiles("124f", check_copies=False))
    assert table.state.players[1].tile_count == 13 and table.state.players[0].tile_count == 14
    assert view_for(table.state, 3).seats[0].flowers == ("1f", "2f", "4f")
    # A drawn flower during play is set aside and replaced from the tail too.
    table.act(Discard(0, "3m"))
    table.act(Pass(1))
    flower_events = [e for e in table.events[-3:] if isinstance(e, (FlowerReplaced, TileDrawn))]
    assert [type(e).__name__ for e in flower_events] == ["TileDrawn", "FlowerReplaced", "TileDrawn"]
    assert table.state.players[1].flowers == tuple(parse_tiles("35f", check_copies=False))
    assert table.state.drawn_tile == parse_tiles("9m")[0]
    assert_consistent(table)


def test_wildcard_is_visible_and_cannot_be_ponged_or_chowed_rules_2_1() -> None:
    # Indicator 6z: the wildcard is 7z (白). Seat 2 holds two 白 and cannot pong the discarded one.
    hands = ("7z3m124578p124578s", "45m99m236p236s234z", "458m699p369s5577z", CHOW_HANDS[3])
    table = formula_table(hands)
    opened = table.events[0]
    assert isinstance(opened, TableOpened) and (opened.wildcard_indicator, opened.wildcard) == ("6z", "7z")
    assert redact(opened, 1) is not None and redact(opened, 1).wildcard == "7z"  # type: ignore[union-attr]
    table.act(Discard(0, "7z"))
    # Nobody was asked: the discard stays in seat 0's discards and seat 1 draws.
    assert table.state.phase is Phase.TURN and table.state.turn_seat == 1
    assert table.state.players[0].discards == tuple(parse_tiles("7z"))
    with pytest.raises(WrongPhaseError):
        table.act(Pong(2))
    # A suited wildcard cannot be used to chow: with 5m the wildcard, seat 1's 4m5m chows nothing.
    chow_table = formula_table(CHOW_HANDS, indicator="4m")
    chow_table.act(Discard(0, "3m"))
    assert "chow" not in kinds_of(chow_table.state, 1)


def test_a_discarded_wildcard_is_won_on_only_as_its_face_value_rules_2_1() -> None:
    # Seat 1 waits on 3p/6p. The wildcard is 1z (indicator 7z): a held 1z would complete the hand,
    # the discarded 1z is just 东 and does not.
    hands = ("1z3m124578p124578s", "123m45p789p123s99s", CHOW_HANDS[2], "112m7m18p89s22344z")
    table = formula_table(hands, indicator="7z")
    table.act(Discard(0, "1z"))
    assert "win" not in kinds_of(table.state, 1)
    with pytest.raises(IllegalWinError):
        table.act(Win(1))


def test_drawn_hand_at_wall_exhaustion_rules_2_1() -> None:
    table = FormulaTable(
        open_formula_table("t", "r", RoomRules(variant="formula", min_fan=8), list("abcd"), 11)
    )
    for _ in range(2000):
        if table.state.is_over:
            break
        state = table.state
        seat = next(
            s for s in range(4) if any(a.kind in ("discard", "pass") for a in legal_actions(state, s))
        )
        if state.phase is Phase.TURN:
            table.act(Discard(seat, view_for(state, seat).drawn_tile or view_for(state, seat).hand[-1]))
        else:
            table.act(Pass(seat))
    assert isinstance(table.events[-2], WallExhausted)
    last = table.events[-1]
    assert isinstance(last, GameEnded) and last.reason == "wall_exhausted"
    assert table.state.wall_remaining == 0
    assert_consistent(table)


def test_no_exchange_three_or_missing_suit_in_formula() -> None:
    table = formula_table(CHOW_HANDS)
    with pytest.raises(WrongPhaseError):
        table.act(DeclareMissingSuit(1, "m"))


def _random_command(state: FormulaTableState, generator: random.Random) -> TableCommand:
    if generator.random() < 0.05:
        return ExpireDeadline()
    for seat in range(4):
        actions = {a.kind: a for a in legal_actions(state, seat) if a.kind != "leave"}
        if not actions:
            continue
        if "win" in actions and generator.random() < 0.9:
            return Win(seat)
        kind = generator.choice(sorted(actions))
        tiles = actions[kind].tiles
        if kind == "discard":
            return Discard(seat, generator.choice(tiles))
        if kind == "chow":
            return Chow(seat, generator.choice(tiles))
        if kind == "kong":
            return Kong(seat, generator.choice(tiles) if state.phase is Phase.TURN else None)
        return {"pong": Pong, "pass": Pass, "win": Win}[kind](seat)
    raise AssertionError("the table waits on nobody")


@pytest.mark.parametrize("seed", range(40))
def test_random_games_conserve_144_tiles_replay_equal_and_end(seed: int) -> None:
    generator = random.Random(seed)
    rules = RoomRules(variant="formula", exchange_three=False, min_fan=generator.choice((0, 8)))
    table = FormulaTable(open_formula_table("t", "r", rules, list("abcd"), seed))
    for _ in range(1000):
        if table.state.is_over:
            break
        table.act(_random_command(table.state, generator))
        assert tiles_accounted(table.state) == 144
    assert table.state.is_over
    assert fold(table.events) == table.state
    ended = table.events[-1]
    assert isinstance(ended, GameEnded)
    if ended.reason == "win":
        bird = table.events[-2]
        win = table.events[-3]
        assert isinstance(bird, BirdRevealed) and isinstance(win, PlayerWon)
        if table.state.non_flower_remaining() == 0:
            assert bird.tile == win.win_tile  # RULES.md 2.3: a win on the last tile is its own bird
