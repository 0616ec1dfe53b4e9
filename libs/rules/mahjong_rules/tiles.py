"""Tiles and the compact notation of RULES.md section 0.

A tile is a plain ``int`` so the hot paths can index arrays with it:

====== ======== =====================================
range  notation meaning
====== ======== =====================================
0..8   1m..9m   万 (characters)
9..17  1p..9p   筒 (dots)
18..26 1s..9s   条 (bamboo)
27..33 1z..7z   honors 东 南 西 北 中 發 白 (formula only)
34..41 1f..8f   flowers 春 夏 秋 冬 梅 兰 竹 菊 (formula only)
====== ======== =====================================

Sichuan Bloody uses only the 27 suited tiles; honors and flowers are parsed so the formula family
can share this module later.
"""

from collections import Counter
from collections.abc import Iterable
from typing import Literal, TypeAlias

from mahjong_rules.errors import InvalidTileError, TileCountError

Tile: TypeAlias = int
"""A tile kind, 0..41 (see the module docstring)."""

Suit = Literal["m", "p", "s"]
"""A suit letter: m 万, p 筒, s 条."""

SUITS: tuple[Suit, Suit, Suit] = ("m", "p", "s")
SUITED_TILE_KIND_COUNT = 27
TILE_KIND_COUNT = 42
COPIES_PER_TILE = 4
COPIES_PER_FLOWER = 1

# letter -> (first tile, number of ranks)
_FAMILIES: dict[str, tuple[int, int]] = {"m": (0, 9), "p": (9, 9), "s": (18, 9), "z": (27, 7), "f": (34, 8)}
_CODES: tuple[str, ...] = tuple(
    f"{rank + 1}{letter}" for letter, (_, size) in _FAMILIES.items() for rank in range(size)
)
_TILE_BY_CODE: dict[str, Tile] = {code: tile for tile, code in enumerate(_CODES)}


def tile_code(tile: Tile) -> str:
    """Return the compact code of one tile, e.g. ``tile_code(13) == "5p"``."""
    if not isinstance(tile, int) or not 0 <= tile < TILE_KIND_COUNT:
        raise InvalidTileError(f"not a tile: {tile!r}")
    return _CODES[tile]


def parse_tile(code: str) -> Tile:
    """Parse one tile code such as ``"5p"``; a bad code raises ``InvalidTileError`` naming it."""
    tile = _TILE_BY_CODE.get(code.strip())
    if tile is None:
        raise InvalidTileError(f"bad tile code {code!r} (expected e.g. 5m, 9p, 1s, 7z, 8f)")
    return tile


def parse_tiles(text: str, *, check_copies: bool = True) -> list[Tile]:
    """Parse compact notation (``"11122233m456p"``, spaces allowed) into tiles, in written order.

    Runs of digits share the suit letter that follows them. With ``check_copies`` (the default) a
    fifth copy of a tile, or a second copy of a flower, raises ``TileCountError`` naming the tile,
    because such a hand cannot exist and is almost always a typo.
    """
    tiles: list[Tile] = []
    digits = ""
    for character in text:
        if character.isspace():
            continue
        if character.isdigit():
            digits += character
            continue
        if character not in _FAMILIES:
            raise InvalidTileError(f"bad suit letter {character!r} in {text!r} (expected m, p, s, z or f)")
        if not digits:
            raise InvalidTileError(f"suit letter {character!r} has no digits before it in {text!r}")
        for digit in digits:
            code = digit + character
            tile = _TILE_BY_CODE.get(code)
            if tile is None:
                raise InvalidTileError(f"bad tile code {code!r} in {text!r}")
            tiles.append(tile)
        digits = ""
    if digits:
        raise InvalidTileError(f"digits {digits!r} have no suit letter after them in {text!r}")
    if check_copies:
        check_tile_copies(tiles)
    return tiles


def format_tiles(tiles: Iterable[Tile]) -> str:
    """Return the canonical compact notation: sorted, one suit letter per run (``"123m55p"``)."""
    parts: list[str] = []
    current_letter = ""
    for tile in sorted(tiles):
        code = tile_code(tile)
        if code[1] != current_letter:
            if current_letter:
                parts.append(current_letter)
            current_letter = code[1]
        parts.append(code[0])
    if current_letter:
        parts.append(current_letter)
    return "".join(parts)


def copies_allowed(tile: Tile) -> int:
    """How many copies of ``tile`` a full set holds: 4, or 1 for a flower."""
    return COPIES_PER_FLOWER if tile >= 34 else COPIES_PER_TILE


def check_tile_copies(tiles: Iterable[Tile]) -> None:
    """Raise ``TileCountError`` naming the first tile that appears more often than the set holds."""
    for tile, count in sorted(Counter(tiles).items()):
        if count > copies_allowed(tile):
            raise TileCountError(
                f"tile {tile_code(tile)} appears {count} times; the set holds only {copies_allowed(tile)}"
            )


def is_suited(tile: Tile) -> bool:
    """True for a 万/筒/条 tile (the only tiles of Sichuan Bloody)."""
    return 0 <= tile < SUITED_TILE_KIND_COUNT


def suit_of(tile: Tile) -> Suit:
    """The suit letter of a suited tile; ``InvalidTileError`` for honors and flowers."""
    if not isinstance(tile, int) or not is_suited(tile):
        raise InvalidTileError(f"tile {tile!r} is not a suited tile (m, p or s)")
    return SUITS[tile // 9]


def rank_of(tile: Tile) -> int:
    """The printed rank of a tile, 1-based (``rank_of(parse_tile("5p")) == 5``)."""
    return int(tile_code(tile)[0])


def make_tile(suit: Suit, rank: int) -> Tile:
    """Build a suited tile from its suit letter and 1-based rank."""
    if suit not in SUITS or not 1 <= rank <= 9:
        raise InvalidTileError(f"no suited tile {rank}{suit}")
    return SUITS.index(suit) * 9 + rank - 1


def suit_index(suit: Suit) -> int:
    """0 for m, 1 for p, 2 for s; ``InvalidTileError`` for anything else."""
    if suit not in SUITS:
        raise InvalidTileError(f"bad suit {suit!r} (expected m, p or s)")
    return SUITS.index(suit)
