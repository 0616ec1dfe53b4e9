"""The formula (公式) wall: 144 tiles with flowers, 补花 from the tail, the wildcard, the bird tile.

RULES.md 2.1 and 2.3. Pure functions of their arguments, like the Sichuan wall they reuse
(``mahjong_rules.wall.Wall`` for head and tail draws, ``deal`` for the 14/13 deal): the only
randomness is a ``random.Random`` built from the seed the caller passes.
"""

import random
from dataclasses import dataclass

from mahjong_rules.errors import InvalidTileError, WallError
from mahjong_rules.tiles import COPIES_PER_TILE, Tile
from mahjong_rules.wall import SEAT_COUNT, Deal, Wall

SUITED_TILE_LIMIT = 27
"""Tiles 0..26 are suited (万 筒 条); 27..33 honors; 34..41 flowers (see ``mahjong_rules.tiles``)."""
HONOR_TILE_LIMIT = 34
FLOWER_TILE_LIMIT = 42
RANKS_PER_SUIT = 9
HONOR_KIND_COUNT = 7
FORMULA_TILES: tuple[Tile, ...] = (
    *(tile for tile in range(HONOR_TILE_LIMIT) for _ in range(COPIES_PER_TILE)),
    *range(HONOR_TILE_LIMIT, FLOWER_TILE_LIMIT),
)
"""The 144 tiles of the formula family in sorted order: 136 suited and honor tiles + 8 flowers."""
FORMULA_WALL_TILE_COUNT = len(FORMULA_TILES)
assert FORMULA_WALL_TILE_COUNT == 144


def is_flower(tile: Tile) -> bool:
    """True for a flower tile (1f..8f), which is set aside and replaced when drawn (补花)."""
    return HONOR_TILE_LIMIT <= tile < FLOWER_TILE_LIMIT


def shuffled_formula_wall(seed: int) -> list[Tile]:
    """Return the 144-tile wall in draw order, shuffled by ``random.Random(seed)`` (same seed, same wall)."""
    tiles = list(FORMULA_TILES)
    random.Random(seed).shuffle(tiles)
    return tiles


def wildcard_successor(indicator: Tile) -> Tile:
    """The wildcard (财神) for a turned-up indicator: its successor (RULES.md 2.1, seed 000).

    Suits wrap 9→1 (9m gives 1m); honors run 东→南→西→北→中→發→白→东 in the 1z..7z order of
    RULES.md 0, so 4z (北) gives 5z (中) and 7z (白) gives 1z (东). A flower is never an indicator.
    """
    if not isinstance(indicator, int) or not 0 <= indicator < HONOR_TILE_LIMIT:
        raise InvalidTileError(f"indicator {indicator!r} must be a suited or honor tile")
    if indicator < SUITED_TILE_LIMIT:
        suit_start = indicator - indicator % RANKS_PER_SUIT
        return suit_start + (indicator - suit_start + 1) % RANKS_PER_SUIT
    return SUITED_TILE_LIMIT + (indicator - SUITED_TILE_LIMIT + 1) % HONOR_KIND_COUNT


@dataclass(frozen=True, slots=True)
class FlowerReplacement:
    """A hand after 补花: its tiles with no flower, the flowers set aside, and the wall left."""

    hand: tuple[Tile, ...]
    flowers: tuple[Tile, ...]
    wall: Wall


def replace_flowers(hand: tuple[Tile, ...] | list[Tile], wall: Wall) -> FlowerReplacement:
    """补花: set every flower of ``hand`` aside and draw its replacement from the tail of the wall.

    A replacement that is itself a flower is set aside and replaced again, so the returned hand
    holds no flower. Non-flower tiles keep their order; replacements are appended in draw order.
    """
    kept = [tile for tile in hand if not is_flower(tile)]
    flowers = [tile for tile in hand if is_flower(tile)]
    to_replace = len(flowers)
    while to_replace > 0:
        tile, wall = wall.draw_tail()
        if is_flower(tile):
            flowers.append(tile)
        else:
            kept.append(tile)
            to_replace -= 1
    return FlowerReplacement(tuple(kept), tuple(flowers), wall)


@dataclass(frozen=True, slots=True)
class FormulaDeal:
    """The opening of a formula hand: hands with no flower, each seat's flowers, the wildcard.

    ``indicator`` stays face up and out of the wall; ``turned_flowers`` are flowers flipped while
    looking for it (set aside, nobody's). ``wall`` is what is left to draw.
    """

    hands: tuple[tuple[Tile, ...], ...]
    flowers: tuple[tuple[Tile, ...], ...]
    indicator: Tile
    wildcard: Tile
    turned_flowers: tuple[Tile, ...]
    wall: Wall


def open_formula_hand(dealt: Deal, dealer: int) -> FormulaDeal:
    """After ``mahjong_rules.wall.deal``: 补花 for every seat (dealer first, in turn order), then the
    wildcard indicator (RULES.md 2.1).

    Initial flowers are replaced from the tail; the indicator is the next tile of the head,
    flipped again while it is a flower.
    """
    if not 0 <= dealer < SEAT_COUNT:
        raise WallError(f"dealer {dealer} is not a seat (0..3)")
    hands: list[tuple[Tile, ...]] = list(dealt.hands)
    flowers: list[tuple[Tile, ...]] = [()] * SEAT_COUNT
    wall = dealt.wall
    for offset in range(SEAT_COUNT):
        seat = (dealer + offset) % SEAT_COUNT
        replaced = replace_flowers(hands[seat], wall)
        hands[seat], flowers[seat], wall = replaced.hand, replaced.flowers, replaced.wall
    turned_flowers: list[Tile] = []
    indicator, wall = wall.draw_head()
    while is_flower(indicator):
        turned_flowers.append(indicator)
        indicator, wall = wall.draw_head()
    return FormulaDeal(
        hands=tuple(hands),
        flowers=tuple(flowers),
        indicator=indicator,
        wildcard=wildcard_successor(indicator),
        turned_flowers=tuple(turned_flowers),
        wall=wall,
    )


def bird_tile(wall: Wall, winning_tile: Tile) -> Tile:
    """The bird (鸟牌) after a win: the next tile of the wall's head, flowers skipped (RULES.md 2.3).

    After a win on the last tile (nothing but flowers, or nothing, left) the winning tile is the
    bird. The wall is not changed: the hand is over.
    """
    if is_flower(winning_tile) or not 0 <= winning_tile < FLOWER_TILE_LIMIT:
        raise InvalidTileError(f"winning tile {winning_tile!r} cannot be a flower or a non-tile")
    for index in range(wall.head_drawn, len(wall.tiles) - wall.tail_drawn):
        if not is_flower(wall.tiles[index]):
            return wall.tiles[index]
    return winning_tile
