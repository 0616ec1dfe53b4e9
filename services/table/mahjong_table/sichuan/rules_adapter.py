"""The one place where the table aggregate calls the rules library (`mahjong_rules`).

The aggregate keeps hands as 27 tile counts (tiles are the library's ints, 0..26 = 1m..9s); this
module converts to whatever the library takes. Tiles, wall and deal come from the library (the dice
of both families: `core.decide.Dice`).

The win check and the multipliers are the library's `evaluate_win` (RULES.md 1.6, 1.7); the
aggregate never scores a hand itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import cast

import mahjong_rules as rules
from mahjong_rules import InvalidTileError, deal, parse_tile, shuffled_wall, tile_code
from mahjong_rules.tiles import SUITED_TILE_KIND_COUNT

from mahjong_table.core.events import Fan
from mahjong_table.core.frozen import fast_init
from mahjong_table.core.tiles import code_of

__all__ = [
    "SUIT_CODES",
    "TILE_KIND_COUNT",
    "TileParseError",
    "WinEvaluation",
    "WinSituation",
    "code_of",
    "deal_hands",
    "evaluate_win",
    "initial_wall",
    "parse_code",
    "parse_codes",
    "suit_of",
    "waiting_tiles",
]

TILE_KIND_COUNT = SUITED_TILE_KIND_COUNT
"""Sichuan Bloody uses the 27 suited tile kinds (RULES.md 1.1)."""
SUIT_CODES = ("m", "p", "s")
SUIT_CODES_TYPED: tuple[rules.Suit, ...] = rules.SUITS

_CODES: tuple[str, ...] = tuple(tile_code(tile) for tile in range(TILE_KIND_COUNT))
_TILE_BY_CODE: dict[str, int] = {code: tile for tile, code in enumerate(_CODES)}


class TileParseError(ValueError):
    """A tile code that is not one of the 27 Sichuan tiles."""


def parse_code(code: str) -> int:
    """Tile int of a Sichuan code; `TileParseError` for honors, flowers and garbage."""
    tile = _TILE_BY_CODE.get(code)
    if tile is None:
        try:
            parse_tile(code)
        except InvalidTileError as error:
            raise TileParseError(str(error)) from None
        raise TileParseError(f"tile {code!r} is not used in Sichuan Bloody (only 1m..9m, 1p..9p, 1s..9s)")
    return tile


def parse_codes(codes: Sequence[str]) -> tuple[int, ...]:
    """`parse_code` of every code, in order (a wall, a hand): one dictionary look-up each."""
    try:
        return tuple(map(_TILE_BY_CODE.__getitem__, codes))
    except (KeyError, TypeError):
        return tuple(parse_code(code) for code in codes)  # raises the error naming the bad code


def suit_of(tile: int) -> int:
    """Suit index of a tile: 0 m, 1 p, 2 s."""
    return tile // 9


def initial_wall(seed: int) -> tuple[int, ...]:
    """The 108-tile wall shuffled from `seed` by the rules library (RULES.md 1.1)."""
    return tuple(shuffled_wall(seed))


def deal_hands(wall: Sequence[int], dealer_seat: int) -> tuple[tuple[tuple[int, ...], ...], int]:
    """Deal from the head of `wall` (dealer 14, others 13); returns the hands and the head index."""
    result = deal(tuple(wall), dealer_seat)
    return result.hands, result.wall.head_drawn


@fast_init
@dataclass(frozen=True, slots=True)
class WinSituation:
    """The situational facts of a win that RULES.md 1.7 extras depend on, plus the room options
    that change the evaluation (`self_draw_bonus`, `cap_points`)."""

    win_by: str
    after_kong: bool = False
    last_tile: bool = False
    first_turn: bool = False
    is_dealer: bool = False
    self_draw_bonus: str = "double"
    cap_points: int = 0


@fast_init
@dataclass(frozen=True, slots=True)
class WinEvaluation:
    """Fans and total multiplier of a winning hand (RULES.md 1.7). The multiplier is uncapped:
    it is what the skip-win lock compares (RULES.md 1.4); scoring applies the cap."""

    fans: tuple[Fan, ...]
    multiplier: int


@lru_cache(maxsize=512)
def _rules_meld(tile: int, exposure: str) -> rules.Meld:
    if exposure:
        return rules.Meld("kong", tile, cast(rules.KongExposure, exposure))
    return rules.Meld("pong", tile)


@lru_cache(maxsize=64)
def _context(situation: WinSituation) -> rules.WinContext:
    return rules.WinContext(
        win_by=cast(rules.WinBy, situation.win_by),
        after_kong=situation.after_kong,
        last_tile=situation.last_tile,
        first_turn=situation.first_turn,
        dealer=situation.is_dealer,
        self_draw_bonus=cast(rules.SelfDrawBonus, situation.self_draw_bonus),
        cap_points=situation.cap_points,
    )


@lru_cache(maxsize=256)
def _fan(fan_id: str, name: str, multiplier: int) -> Fan:
    return Fan(fan_id, name, multiplier, 1)


@lru_cache(maxsize=16_384)
def waiting_tiles(
    counts: tuple[int, ...], melds: tuple[tuple[int, str], ...], missing_suit: int | None
) -> frozenset[int]:
    """The tiles that would complete a waiting hand (rules library `winning_tiles_of_counts`), memoised.

    A hand stays the same while the other three players discard, so the claim window asks the
    same question several times; the answer is cached by the hand itself. `counts` are the 27
    concealed counts (13 - 3 x melds tiles).
    """
    return frozenset(
        rules.winning_tiles_of_counts(
            counts,
            [_rules_meld(tile, exposure) for tile, exposure in melds],
            None if missing_suit is None else SUIT_CODES_TYPED[missing_suit],
            trusted=True,  # the fold's counts: 0..4 each (asserted), 13 with the melds, no fifth copy
        )
    )


def _tiles_of(counts: Sequence[int]) -> list[int]:
    """The tiles of 27 counts, in tile order."""
    tiles: list[int] = []
    for tile, count in enumerate(counts):
        if count:
            tiles += _COPIES[tile][:count]
    return tiles


_COPIES = tuple((tile,) * 4 for tile in range(TILE_KIND_COUNT))


def evaluate_win(
    counts_without_win: Sequence[int],
    melds: Sequence[tuple[int, str]],
    win_tile: int,
    missing_suit: int | None,
    situation: WinSituation,
) -> WinEvaluation | None:
    """Evaluate a win with the rules library (RULES.md 1.6, 1.7): None when the hand does not win
    (wrong shape, three suits, or a tile of the missing suit).

    `counts_without_win` are the 27 concealed counts without the winning tile; `melds` are
    (tile, kong exposure or "" for a pong).
    """
    evaluation = rules.evaluate_win(
        _tiles_of(counts_without_win),
        [_rules_meld(tile, exposure) for tile, exposure in melds],
        win_tile,
        None if missing_suit is None else SUIT_CODES_TYPED[missing_suit],
        _context(situation),
    )
    if evaluation is None:
        return None
    fans = tuple(_fan(fan.id, fan.name, fan.multiplier) for fan in evaluation.fans)
    return WinEvaluation(fans, evaluation.multiplier)
