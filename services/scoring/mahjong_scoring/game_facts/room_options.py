"""A room's rules snapshot (`TableOpened.rules`, `mahjong.v1.RoomRules`) as settlement options.

Every game settles by the rules recorded in its `TableOpened`, never by the room catalog as it
is now. Proto3 cannot tell an unset number from 0, so every option is taken as recorded, except
an empty enum-like string, which means its default (`mahjong_rules.room_rules.DEFAULT_ROOM_RULES`).
Options the rules library refuses raise `GameFactsError` (the stream cannot be settled).
"""

from __future__ import annotations

from mahjong.v1 import common_pb2, rooms_pb2
from mahjong_rules.formula.scoring import FanTerm, FormulaOptions
from mahjong_rules.room_rules import DEFAULT_ROOM_RULES
from mahjong_rules.settlement import SelfDrawBonus, SettlementOptions

from mahjong_scoring.game_facts.steps import GameFactsError


def settlement_options(room_rules: rooms_pb2.RoomRules) -> SettlementOptions:
    """The options that turn points into beans and give the rake (RULES.md 0, 1.9), for either
    family: a formula room's are derived from its formula options."""
    formula = formula_options(room_rules)
    if formula is not None:
        return formula.settlement_options()
    try:
        return SettlementOptions(
            coefficient=room_rules.coefficient,
            rake_beans=room_rules.rake_beans,
            cap_points=room_rules.cap_points,
            self_draw_bonus=SelfDrawBonus(room_rules.self_draw_bonus or DEFAULT_ROOM_RULES.self_draw_bonus),
            flower_pig_points=room_rules.flower_pig_points,
            escape_cap_points=room_rules.escape_cap_points,
            escape_correction=room_rules.escape_correction,
            escape_penalty_floor=room_rules.escape_penalty_floor,
            escape_compensation_floor=room_rules.escape_compensation_floor,
        )
    except ValueError as error:
        raise GameFactsError(f"the room rules cannot be settled: {error}") from error


def formula_options(room_rules: rooms_pb2.RoomRules) -> FormulaOptions | None:
    """The formula settlement options (RULES.md 2.3) of a formula room; None for any other room."""
    if room_rules.variant != common_pb2.VARIANT_FORMULA:
        return None
    try:
        return FormulaOptions(
            coefficient=room_rules.coefficient,
            rake_beans=room_rules.rake_beans,
            fan_term=FanTerm(room_rules.fan_term or DEFAULT_ROOM_RULES.fan_term),
            min_fan=room_rules.min_fan,
            no_wildcard_fan=room_rules.no_wildcard_fan,
            escape_penalty_points=room_rules.escape_penalty_points,
            escape_compensation_points=room_rules.escape_compensation_points,
        )
    except ValueError as error:
        raise GameFactsError(f"the formula room rules cannot be settled: {error}") from error
