"""A formula win scored again from its event (RULES.md 2.2; ARCHITECTURE: scoring decides how much).

The table reveals the winning hand in `PlayerWon` (concealed tiles, melds, winning tile, how it was
won, 和绝张) and the rest is public in the stream before it: the wildcard in `TableOpened`, each
seat's flowers in `FlowerReplaced`, the dealer (seat winds follow from it). The rules library's
`evaluate_formula_win` reads the hand again; its total is what the win is paid on. Should it
disagree with the table, its figure is used and a notice says so; should it find no win at all,
the table's figures are used (the win happened; the table is the judge of who may win).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from mahjong.v1 import common_pb2, table_events_pb2
from mahjong_rules import RulesError, Tile, parse_tile
from mahjong_rules.formula.fans import FormulaMeld, FormulaWinContext, ScoredFan, WinBy
from mahjong_rules.formula.scoring import FormulaOptions
from mahjong_rules.formula.wildcards import evaluate_formula_win
from mahjong_rules.seats import seat_wind

from mahjong_scoring.game_facts.steps import FanLine

_EXPOSURES: Final = {
    common_pb2.KONG_EXPOSURE_EXPOSED: "exposed",
    common_pb2.KONG_EXPOSURE_ADDED: "added",
    common_pb2.KONG_EXPOSURE_CONCEALED: "concealed",
}


@dataclass(frozen=True)
class FormulaScore:
    """The fan total a formula win is paid on, its fans, and a discrepancy to report, if any."""

    total_fan: int
    fans: tuple[FanLine, ...]
    notice: str = ""


def score_formula_win(
    event: table_events_pb2.PlayerWon,
    win_by: WinBy,
    options: FormulaOptions,
    *,
    wildcard: Tile | None,
    dealer_seat: int,
    flowers: int,
) -> FormulaScore:
    """The win's fan total and fans by the rules library (see the module docstring)."""
    from_table = FormulaScore(
        event.fan_total,
        tuple(FanLine(fan.id, fan.name, fan.multiplier, fan.count or 1) for fan in event.fans),
    )
    try:
        evaluation = evaluate_formula_win(
            _tiles(event.concealed),
            [_meld(meld) for meld in event.melds],
            parse_tile(event.win_tile),
            FormulaWinContext(
                win_by=win_by,
                after_kong=event.after_kong,
                last_tile=event.last_tile,
                fourth_tile=event.fourth_tile,
                seat_wind=seat_wind(event.seat, dealer_seat),
            ),
            wildcard=wildcard,
            flowers=flowers,
            min_fan=options.min_fan,
            no_wildcard_fan=options.no_wildcard_fan,
        )
    except RulesError as error:
        return _with_notice(from_table, f"the rules library cannot read the winning hand: {error}")
    if evaluation is None:
        return _with_notice(
            from_table, "the rules library finds no win in this hand; the table's figures are used"
        )
    fans = tuple(_line(fan) for fan in evaluation.fans)
    if evaluation.total_fan != event.fan_total:
        return FormulaScore(
            evaluation.total_fan,
            fans,
            f"the table scored {event.fan_total} fan, the rules library {evaluation.total_fan}",
        )
    return FormulaScore(evaluation.total_fan, fans)


def _with_notice(score: FormulaScore, notice: str) -> FormulaScore:
    return FormulaScore(score.total_fan, score.fans, notice)


def _line(fan: ScoredFan) -> FanLine:
    return FanLine(fan.id, fan.name, fan.fan, fan.count)


def _tiles(codes: Sequence[str]) -> list[Tile]:
    return [parse_tile(code) for code in codes]


def _meld(meld: common_pb2.Meld) -> FormulaMeld:
    tile = parse_tile(meld.tile)
    if meld.kind == "kong":
        exposure = _EXPOSURES.get(meld.exposure)
        if exposure is None:
            raise RulesError(f"the kong of {meld.tile} has no exposure")
        return FormulaMeld("kong", tile, exposure)  # type: ignore[arg-type]
    if meld.kind in ("chow", "pong"):
        return FormulaMeld(meld.kind, tile)  # type: ignore[arg-type]
    raise RulesError(f"meld kind {meld.kind!r} is not chow, pong or kong")
