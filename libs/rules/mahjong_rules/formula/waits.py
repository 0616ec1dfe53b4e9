"""Waits (听牌) of a 13-tile formula position, each with its score (RULES.md 2.1, 2.2).

A *wait* is a non-flower tile (0..33) that, **won on a discard**, completes a legal winning hand.
Won on a discard, a tile that happens to be the wildcard counts as its face value (RULES.md 2.1);
the wildcards *held* in the hand still stand for any tile, under the best substitution (2.2). A
tile of which the hand and the melds already hold all four copies is never a wait (winning on it
would make a fifth copy). Each wait carries its ``FormulaEvaluation`` exactly as
``evaluate_formula_win`` gives it for that discard: fans, total fan (flowers included), whether
the total without flowers meets ``min_fan``, and what the wildcards stand for. ``ready`` is true
when any wait exists, whether or not it meets the minimum.

Finding the candidates is cheap: a tile can only be a wait when the hand completes with it, so the
candidate is treated as one more wildcard and ``winning_substitutions`` lists every completion of
the hand's real tiles with (wildcards held + 1) wildcards; the candidates are the tiles appearing
in those completions. Only they are scored with the MCR calculator.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from mahjong_rules.errors import HandSizeError, InvalidMeldError, InvalidTileError, TileCountError
from mahjong_rules.formula.fans import NO_WILDCARD, FormulaMeld, FormulaWinContext, WinBy
from mahjong_rules.formula.wildcards import (
    KIND_COUNT,
    SETS_IN_A_HAND,
    FormulaEvaluation,
    check_options,
    evaluate_formula_win,
    winning_substitutions,
)
from mahjong_rules.seats import EAST_WIND
from mahjong_rules.tiles import COPIES_PER_TILE, Tile, tile_code


@dataclass(frozen=True, slots=True)
class FormulaWait:
    """One wait: the tile won on a discard, and the hand's evaluation with it."""

    tile: Tile
    evaluation: FormulaEvaluation


@dataclass(frozen=True, slots=True)
class FormulaWaits:
    """Every wait of a 13-tile formula position, in tile order; ``ready`` when there is one."""

    ready: bool
    waits: tuple[FormulaWait, ...]


def formula_waits(
    concealed: Sequence[Tile],
    melds: Sequence[FormulaMeld],
    *,
    wildcard: Tile | None = None,
    flowers: int = 0,
    min_fan: int = 8,
    no_wildcard_fan: int = NO_WILDCARD.fan,
    seat_wind: Tile = EAST_WIND,
    round_wind: Tile = EAST_WIND,
) -> FormulaWaits:
    """The waits of ``concealed`` (13 − 3 × melds tiles) with ``melds`` (RULES.md 2.1, 2.2).

    A wait is a tile 0..33 that, won on a discard (so a wildcard tile counts as its face value),
    completes a legal winning hand; a tile whose four copies are all in the hand and melds is
    never a wait. Each wait carries ``evaluate_formula_win``'s evaluation of that discard win with
    the same ``wildcard``, ``flowers``, ``min_fan``, ``no_wildcard_fan`` and winds; ``ready`` is
    true when any wait exists, whether or not it meets ``min_fan``. ``wildcard`` is ``None`` for
    plain MCR (no 无财神). Raises the ``mahjong_rules.errors`` errors for an impossible position: a
    wrong size, a flower, a wildcard meld, a fifth copy, bad options or winds.
    """
    context = FormulaWinContext(win_by=WinBy.DISCARD, seat_wind=seat_wind, round_wind=round_wind)
    check_options(wildcard, flowers, min_fan, no_wildcard_fan)  # evaluate_formula_win may never run
    real, held, copies = _validated_counts(concealed, melds, wildcard)
    candidates = {
        tile for completion in winning_substitutions(real, held + 1, len(melds)) for tile in completion
    }
    waits: list[FormulaWait] = []
    for tile in sorted(candidates):
        if copies[tile] >= COPIES_PER_TILE:
            continue
        evaluation = evaluate_formula_win(
            concealed,
            melds,
            tile,
            context,
            wildcard=wildcard,
            flowers=flowers,
            min_fan=min_fan,
            no_wildcard_fan=no_wildcard_fan,
        )
        if evaluation is not None:
            waits.append(FormulaWait(tile, evaluation))
    return FormulaWaits(bool(waits), tuple(waits))


def _validated_counts(
    concealed: Sequence[Tile], melds: Sequence[FormulaMeld], wildcard: Tile | None
) -> tuple[list[int], int, list[int]]:
    """(real concealed tiles per kind, wildcards held, copies per kind in hand + melds); raises for
    a wrong size, a flower, a wildcard meld or a fifth copy, as ``evaluate_formula_win`` does."""
    if len(melds) > SETS_IN_A_HAND:
        raise HandSizeError(f"a hand has at most {SETS_IN_A_HAND} melds, not {len(melds)}")
    expected = 13 - 3 * len(melds)
    if len(concealed) != expected:
        raise HandSizeError(
            f"with {len(melds)} meld(s) a waiting hand holds {expected} concealed tiles, not {len(concealed)}"
        )
    real = [0] * KIND_COUNT
    copies = [0] * KIND_COUNT
    held = 0
    for tile in concealed:
        if not isinstance(tile, int) or not 0 <= tile < KIND_COUNT:
            raise InvalidTileError(f"{tile!r} cannot be in a waiting hand (flowers are counted apart)")
        copies[tile] += 1
        if tile == wildcard:
            held += 1
        else:
            real[tile] += 1
    for meld in melds:
        if wildcard is not None and wildcard in meld.tiles:
            raise InvalidMeldError(f"the wildcard {tile_code(wildcard)} cannot be chowed, ponged or konged")
        for tile in meld.tiles:
            copies[tile] += 1
    fifth = next((tile for tile in range(KIND_COUNT) if copies[tile] > COPIES_PER_TILE), None)
    if fifth is not None:
        raise TileCountError(f"tile {tile_code(fifth)} appears {copies[fifth]} times; the set holds only 4")
    return real, held, copies
