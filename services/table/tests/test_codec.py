"""`codec.to_message` builds each message with one call of its class (nested messages as dicts):
the same message as setting its fields one by one, for every event of seeded games of both
families (with passes, deadlines and leaves; their melds, fans and rules are nested messages), and
it reads back as the domain value it came from."""

from __future__ import annotations

import random
from typing import Any

from mahjong_rules.room_rules import RoomRules
from mahjong_table import codec
from mahjong_table.formula.decide import execute as formula_execute
from mahjong_table.formula.decide import open_formula_table
from mahjong_table.formula.evolve import fold as formula_fold
from mahjong_table.selfplay import formula_greedy_command, random_legal_command
from mahjong_table.sichuan.decide import execute, open_table
from mahjong_table.sichuan.evolve import fold

PLAYERS = ["p0", "p1", "p2", "p3"]


def _values_of_games() -> list[Any]:
    values: list[Any] = []
    for seed in range(12):
        generator = random.Random(seed)
        events = open_table(f"codec-{seed}", "room", RoomRules(), PLAYERS, seed)
        values += events
        state = fold(events)
        while not state.is_over:
            new, state = execute(state, random_legal_command(state, generator, greedy_chance=0.5))
            values += new
    rules = RoomRules(variant="formula", exchange_three=False, min_fan=8)
    for seed in range(4):
        events = open_formula_table(f"codec-f-{seed}", "room", rules, PLAYERS, seed)
        values += events
        formula_state = formula_fold(events)
        while not formula_state.is_over:
            new, formula_state = formula_execute(formula_state, formula_greedy_command(formula_state))
            values += new
    return values


def test_a_message_built_in_one_call_is_the_message_set_field_by_field_and_reads_back() -> None:
    values = _values_of_games()
    kinds = {type(value).__name__ for value in values}
    assert {"TableOpened", "TileDiscarded", "TileDrawn", "GameEnded"} <= kinds, kinds
    for value in values:
        built = codec.to_message(value)
        oracle = codec._to_message_field_by_field(value)
        assert built == oracle, value
        assert built.SerializeToString(deterministic=True) == oracle.SerializeToString(deterministic=True)
        if type(value).__name__ in codec._DOMAIN_TYPES:
            assert codec.from_message(built, type(value)) == value
