"""The Sichuan Bloody wall: shuffle from a seed, dealer by dice, the 14/13 deal, head and tail draws.

RULES.md 1.1. Everything here is a pure function of its arguments: the only randomness is a
``random.Random`` built from the seed the caller passes, and the wall it returns is a plain tile list
that the table engine records in the game's opening event, so a replay never shuffles again.
"""

import random
from dataclasses import dataclass

from mahjong_rules.errors import WallError
from mahjong_rules.seats import SEAT_COUNT as SEAT_COUNT  # the one definition; imported from here too
from mahjong_rules.tiles import COPIES_PER_TILE, SUITED_TILE_KIND_COUNT, Tile

WALL_TILE_COUNT = SUITED_TILE_KIND_COUNT * COPIES_PER_TILE  # 108
DEALER_HAND_TILE_COUNT = 14
HAND_TILE_COUNT = 13
SICHUAN_TILES: tuple[Tile, ...] = tuple(
    tile for tile in range(SUITED_TILE_KIND_COUNT) for _ in range(COPIES_PER_TILE)
)
"""The 108 tiles of Sichuan Bloody in sorted order (three suits x nine ranks x four copies)."""


def shuffled_wall(seed: int) -> list[Tile]:
    """Return the 108-tile wall in draw order, shuffled by ``random.Random(seed)``.

    The same seed always gives the same wall (on every CPython), which is what makes a seeded test
    game reproducible; production callers pass a seed from a secure source and record the result.
    """
    tiles = list(SICHUAN_TILES)
    random.Random(seed).shuffle(tiles)
    return tiles


def dealer_from_dice(roller_seat: int, die1: int, die2: int) -> int:
    """Dealer seat from a dice roll: ``(roller + sum - 1) mod 4`` (RULES.md 1.1, seed 001 每局投骰坐庄).

    Counting starts at the roller: a sum of 1 would be the roller, 2 the next seat, and so on.
    """
    if not 0 <= roller_seat < SEAT_COUNT:
        raise WallError(f"roller seat {roller_seat} is not a seat (0..3)")
    for die in (die1, die2):
        if not 1 <= die <= 6:
            raise WallError(f"die value {die} is not 1..6")
    return (roller_seat + die1 + die2 - 1) % SEAT_COUNT


@dataclass(frozen=True, slots=True)
class Wall:
    """The undealt tiles: ``tiles[head_drawn : len(tiles) - tail_drawn]`` are still in the wall.

    Normal draws take from the head, kong replacement draws from the tail (RULES.md 1.1). The value
    is immutable: a draw returns the tile and a new ``Wall``.
    """

    tiles: tuple[Tile, ...]
    head_drawn: int = 0
    tail_drawn: int = 0

    def __post_init__(self) -> None:
        if self.head_drawn < 0 or self.tail_drawn < 0 or self.head_drawn + self.tail_drawn > len(self.tiles):
            raise WallError(
                f"wall of {len(self.tiles)} tiles cannot have {self.head_drawn} head and "
                f"{self.tail_drawn} tail draws"
            )

    @property
    def remaining(self) -> int:
        """Number of tiles still in the wall."""
        return len(self.tiles) - self.head_drawn - self.tail_drawn

    @property
    def is_exhausted(self) -> bool:
        """True when no tile is left (no more draws, no more kongs: RULES.md 1.5)."""
        return self.remaining == 0

    def draw_head(self) -> tuple[Tile, "Wall"]:
        """Draw the next tile from the head (a normal draw)."""
        if self.is_exhausted:
            raise WallError("cannot draw: the wall is exhausted")
        return self.tiles[self.head_drawn], Wall(self.tiles, self.head_drawn + 1, self.tail_drawn)

    def draw_tail(self) -> tuple[Tile, "Wall"]:
        """Draw the next tile from the tail (a kong replacement)."""
        if self.is_exhausted:
            raise WallError("cannot draw a replacement: the wall is exhausted")
        index = len(self.tiles) - 1 - self.tail_drawn
        return self.tiles[index], Wall(self.tiles, self.head_drawn, self.tail_drawn + 1)


@dataclass(frozen=True, slots=True)
class Deal:
    """The result of the deal: four hands indexed by seat and the wall that is left."""

    hands: tuple[tuple[Tile, ...], ...]
    wall: Wall


def deal(wall_tiles: list[Tile] | tuple[Tile, ...], dealer: int) -> Deal:
    """Deal 14 tiles to the dealer and 13 to the others from the head of the wall.

    The order is the table custom: three rounds of four tiles each, starting with the dealer and going
    in turn order, then one tile each, then one more to the dealer. The hands keep draw order; sort
    them for display.
    """
    if not 0 <= dealer < SEAT_COUNT:
        raise WallError(f"dealer {dealer} is not a seat (0..3)")
    if len(wall_tiles) < DEALER_HAND_TILE_COUNT + 3 * HAND_TILE_COUNT:
        raise WallError(f"a wall of {len(wall_tiles)} tiles is too short to deal")
    order = [(dealer + offset) % SEAT_COUNT for offset in range(SEAT_COUNT)]
    hands: list[list[Tile]] = [[] for _ in range(SEAT_COUNT)]
    position = 0
    for size in (4, 4, 4, 1):
        for seat in order:
            hands[seat].extend(wall_tiles[position : position + size])
            position += size
    hands[dealer].append(wall_tiles[position])
    position += 1
    return Deal(tuple(tuple(hand) for hand in hands), Wall(tuple(wall_tiles), head_drawn=position))
