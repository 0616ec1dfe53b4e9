"""和绝张 (RULES.md 2.2, MCR): winning on the last copy of a tile, three copies already visible."""

from __future__ import annotations

from dataclasses import replace

from mahjong_rules.formula.fans import WinBy
from mahjong_rules.tiles import parse_tile
from mahjong_table.core.events import EXPOSURE_CONCEALED, EXPOSURE_EXPOSED
from mahjong_table.core.state import MeldState
from mahjong_table.formula.hands import is_fourth_tile, visible_copies
from mahjong_table.formula.state import FormulaTableState

from .test_formula_aggregate import CHOW_HANDS, formula_table

NINE_MAN = parse_tile("9m")


def table_showing(discards: dict[int, str], melds: dict[int, MeldState]) -> FormulaTableState:
    state = formula_table(CHOW_HANDS).state
    players = list(state.players)
    for seat, codes in discards.items():
        tiles = tuple(parse_tile(codes[index : index + 2]) for index in range(0, len(codes), 2))
        players[seat] = replace(players[seat], discards=tiles)
    for seat, meld in melds.items():
        players[seat] = replace(players[seat], melds=(meld,))
    return replace(state, players=tuple(players))


def test_discards_and_exposed_melds_are_visible_but_a_concealed_kong_is_not_rules_2_2() -> None:
    shown = table_showing({1: "9m9m"}, {2: MeldState("chow", parse_tile("7m"))})
    assert visible_copies(shown, NINE_MAN) == 3
    hidden = table_showing({}, {3: MeldState("kong", NINE_MAN, EXPOSURE_CONCEALED)})
    assert visible_copies(hidden, NINE_MAN) == 0
    exposed = table_showing({}, {3: MeldState("pong", NINE_MAN, "", 1)})
    assert visible_copies(exposed, NINE_MAN) == 3


def test_self_drawing_the_last_copy_is_the_fourth_tile_rules_2_2() -> None:
    state = table_showing({1: "9m9m"}, {2: MeldState("chow", parse_tile("7m"))})
    assert is_fourth_tile(state, NINE_MAN, WinBy.SELF_DRAW)
    fewer = table_showing({1: "9m"}, {2: MeldState("chow", parse_tile("7m"))})
    assert not is_fourth_tile(fewer, NINE_MAN, WinBy.SELF_DRAW)


def test_a_discard_win_counts_three_copies_besides_the_discard_itself_rules_2_2() -> None:
    only_two_others = table_showing({1: "9m9m9m"}, {})  # the last 9m is the winning discard
    assert not is_fourth_tile(only_two_others, NINE_MAN, WinBy.DISCARD)
    three_others = table_showing({1: "9m9m9m"}, {2: MeldState("kong", parse_tile("1p"), EXPOSURE_EXPOSED)})
    assert not is_fourth_tile(three_others, NINE_MAN, WinBy.DISCARD)
    with_chow = table_showing({1: "9m9m9m"}, {2: MeldState("chow", parse_tile("7m"))})
    assert is_fourth_tile(with_chow, NINE_MAN, WinBy.DISCARD)
