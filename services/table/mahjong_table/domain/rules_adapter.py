"""The one place where the table aggregate calls the rules library (`mahjong_rules`).

The aggregate keeps hands as 27 tile counts (tiles are the library's ints, 0..26 = 1m..9s); this
module converts to whatever the library takes. Tiles, wall, dice and deal come from the library.

PROVISIONAL: while `mahjong_rules` has no win check and no fan evaluation yet, `evaluate_win` and
`is_winning` below implement RULES.md 1.6 (shape, two suits, missing suit) and a reduced 1.7
product (flush, seven pairs, all pongs, single wait, 根, situational extras). They are replaced
by the library's `is_winning_hand` / `evaluate_win` when it lands; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from mahjong_rules.errors import InvalidTileError
from mahjong_rules.tiles import parse_tile, tile_code
from mahjong_rules.wall import deal, dealer_from_dice, shuffled_wall

from mahjong_table.domain.events import (
    WIN_BY_DISCARD,
    WIN_BY_ROB_KONG,
    WIN_BY_SELF_DRAW,
    Fan,
)

__all__ = [
    "SUIT_CODES",
    "TILE_KIND_COUNT",
    "TileParseError",
    "WinEvaluation",
    "WinSituation",
    "code_of",
    "deal_hands",
    "dealer_from_dice",
    "evaluate_win",
    "initial_wall",
    "is_winning",
    "parse_code",
    "suit_of",
]

TILE_KIND_COUNT = 27
"""Sichuan Bloody uses the 27 suited tile kinds (RULES.md 1.1)."""
SUIT_CODES = ("m", "p", "s")

_CODES: tuple[str, ...] = tuple(tile_code(tile) for tile in range(TILE_KIND_COUNT))
_TILE_BY_CODE: dict[str, int] = {code: tile for tile, code in enumerate(_CODES)}


class TileParseError(ValueError):
    """A tile code that is not one of the 27 Sichuan tiles."""


def code_of(tile: int) -> str:
    """Compact code of a Sichuan tile ("5p")."""
    return _CODES[tile]


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


@dataclass(frozen=True, slots=True)
class WinSituation:
    """The situational facts of a win that RULES.md 1.7 extras depend on."""

    win_by: str
    after_kong: bool = False
    last_tile: bool = False
    first_turn: bool = False
    is_dealer: bool = False


@dataclass(frozen=True, slots=True)
class WinEvaluation:
    """Fans and total multiplier of a winning hand (RULES.md 1.7)."""

    fans: tuple[Fan, ...]
    multiplier: int


# ---------------------------------------------------------------------------------------------
# Provisional win check and evaluation (replace with the rules library's when it lands).


@lru_cache(maxsize=1 << 16)
def _suit_decomposes(key: tuple[int, ...], need_pair: bool) -> bool:
    """True when one suit's nine counts split into sets (pongs, runs) plus a pair if `need_pair`."""
    counts = list(key)
    first = next((rank for rank in range(9) if counts[rank]), -1)
    if first < 0:
        return not need_pair
    if need_pair and counts[first] >= 2:
        counts[first] -= 2
        if _suit_decomposes(tuple(counts), False):
            return True
        counts[first] += 2
    if counts[first] >= 3:
        counts[first] -= 3
        if _suit_decomposes(tuple(counts), need_pair):
            return True
        counts[first] += 3
    if first <= 6 and counts[first + 1] and counts[first + 2]:
        counts[first] -= 1
        counts[first + 1] -= 1
        counts[first + 2] -= 1
        return _suit_decomposes(tuple(counts), need_pair)
    return False


def _standard_shape(counts: Sequence[int]) -> bool:
    suit_sizes = [sum(counts[suit * 9 : suit * 9 + 9]) for suit in range(3)]
    pair_suits = [suit for suit in range(3) if suit_sizes[suit] % 3 == 2]
    if len(pair_suits) != 1 or any(size % 3 == 1 for size in suit_sizes):
        return False
    return all(
        _suit_decomposes(tuple(counts[suit * 9 : suit * 9 + 9]), suit == pair_suits[0]) for suit in range(3)
    )


def _seven_pairs(counts: Sequence[int], meld_count: int) -> bool:
    return meld_count == 0 and sum(counts) == 14 and all(count % 2 == 0 for count in counts)


def is_winning(counts: Sequence[int], meld_tiles: Sequence[int], missing_suit: int | None) -> bool:
    """RULES.md 1.6: 14 tiles with melds, four sets + pair or seven pairs, at most two suits, and no
    tile of the missing suit (1.3). `counts` are the 27 concealed counts including the win tile."""
    suits = {suit_of(tile) for tile in meld_tiles}
    for suit in range(3):
        if any(counts[suit * 9 : suit * 9 + 9]):
            suits.add(suit)
    if len(suits) > 2 or (missing_suit is not None and missing_suit in suits):
        return False
    if sum(counts) + 3 * len(meld_tiles) != 14:
        return False
    return _seven_pairs(counts, len(meld_tiles)) or _standard_shape(counts)


def evaluate_win(
    counts_without_win: Sequence[int],
    melds: Sequence[tuple[int, bool]],
    win_tile: int,
    missing_suit: int | None,
    situation: WinSituation,
) -> WinEvaluation | None:
    """Evaluate a win (RULES.md 1.6, 1.7): None when the hand does not win.

    `melds` are (tile, is_kong). PROVISIONAL reduced product, see the module docstring.
    """
    counts = list(counts_without_win)
    counts[win_tile] += 1
    meld_tiles = [tile for tile, _ in melds]
    if not is_winning(counts, meld_tiles, missing_suit):
        return None
    fans: list[Fan] = []
    all_tiles_suits = {suit_of(tile) for tile in meld_tiles} | {
        suit_of(tile) for tile in range(TILE_KIND_COUNT) if counts[tile]
    }
    roots = sum(1 for tile in range(TILE_KIND_COUNT) if counts[tile] == 4)
    roots += sum(1 for tile, is_kong in melds if is_kong or counts[tile] == 1)
    if len(all_tiles_suits) == 1:
        fans.append(Fan("full_flush", "清一色", 4))
    if _seven_pairs(counts, len(melds)):
        if roots:
            roots -= 1
            fans.append(Fan("dragon_pairs", "龙七对", 8))
        else:
            fans.append(Fan("seven_pairs", "七对", 4))
    elif len(melds) == 4:
        fans.append(Fan("single_wait", "金钩钓", 4))
    elif all(count in (0, 2, 3) for count in counts) and sum(1 for count in counts if count == 2) == 1:
        fans.append(Fan("all_pongs", "碰碰胡", 2))
    if not fans:
        fans.append(Fan("plain", "平胡", 1))
    if roots:
        fans.append(Fan("root", "根", 2**roots, roots))
    fans.extend(_situational_fans(situation))
    multiplier = 1
    for fan in fans:
        multiplier *= fan.multiplier
    return WinEvaluation(tuple(fans), multiplier)


def _situational_fans(situation: WinSituation) -> list[Fan]:
    fans: list[Fan] = []
    if situation.win_by == WIN_BY_SELF_DRAW:
        if situation.first_turn:
            fans.append(Fan("heavenly", "天胡", 32) if situation.is_dealer else Fan("earthly", "地胡", 32))
        else:
            fans.append(Fan("self_draw", "自摸", 2))
        if situation.after_kong:
            fans.append(Fan("kong_bloom", "杠上开花", 2))
        if situation.last_tile:
            fans.append(Fan("last_tile", "海底捞月", 2))
    elif situation.win_by == WIN_BY_DISCARD and situation.after_kong:
        fans.append(Fan("kong_discard", "杠上炮", 2))
    elif situation.win_by == WIN_BY_ROB_KONG:
        fans.append(Fan("rob_kong", "抢杠胡", 2))
    return fans
