"""The formula aggregate asks the cheap shape test (`hands.has_winning_shape`) before the fan
calculator on every claim and self-draw check (RULES.md 2.1, 2.2): it must never turn away a hand
the calculator scores. Checked on every tile against the hands of seeded greedy games."""

from __future__ import annotations

import pytest
from mahjong_rules.formula.fans import WinBy
from mahjong_rules.room_rules import RoomRules
from mahjong_table.formula import hands
from mahjong_table.formula.decide import execute, open_formula_table
from mahjong_table.formula.evolve import fold
from mahjong_table.formula.state import FormulaTableState
from mahjong_table.selfplay import formula_greedy_command

HAND_KINDS = range(34)


def scored_without_the_shape_test(state: FormulaTableState, seat: int, tile: int) -> bool:
    player = state.players[seat]
    held = player.concealed_tiles()
    if len(held) + 3 * len(player.melds) == 13:
        return hands.evaluate(state, seat, held, tile, WinBy.DISCARD) is not None
    if tile not in held:
        return False
    held.remove(tile)
    return hands.evaluate(state, seat, held, tile, WinBy.SELF_DRAW) is not None


@pytest.mark.parametrize("seed", [1, 2])
def test_no_hand_the_calculator_scores_fails_the_shape_test(seed: int) -> None:
    rules = RoomRules(variant="formula", exchange_three=False, min_fan=0)
    state = fold(open_formula_table(f"shape-{seed}", "room", rules, ("a", "b", "c", "d"), seed))
    scored = 0
    while not state.is_over:
        _, state = execute(state, formula_greedy_command(state))
        for seat, player in enumerate(state.players):
            for tile in HAND_KINDS:
                if player.in_game and scored_without_the_shape_test(state, seat, tile):
                    scored += 1
                    thirteen = player.tile_count + 3 * len(player.melds) == 13
                    assert hands.has_winning_shape(player, state.wildcard, tile if thirteen else None)
    assert scored > 0, "no winning hand was met: the test checked nothing"
