"""Tiles as the events and commands carry them: compact code strings ("5p", "7z", "3f"; RULES.md 0).

Inside the aggregate a tile is the rules library's int (0..41) and a hand is a tuple of counts
indexed by it; events and views carry codes. These are the conversions both families use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from mahjong_rules.tiles import TILE_KIND_COUNT, tile_code

from mahjong_table.core.errors import InvalidCommandError

_CODES: tuple[str, ...] = tuple(tile_code(tile) for tile in range(TILE_KIND_COUNT))


def code_of(tile: int) -> str:
    """The compact code of a tile int ("5p"): a table lookup, on every event the engine writes."""
    return _CODES[tile]


def codes_of(tiles: Iterable[int]) -> tuple[str, ...]:
    """The codes of `tiles`, in their order (`code_of` of each)."""
    return tuple(map(_CODES.__getitem__, tiles))


def codes_of_counts(counts: Sequence[int]) -> tuple[str, ...]:
    """The codes of the tiles that `counts` (a hand's tile counts) hold, in tile order."""
    codes: list[str] = []
    for tile, count in enumerate(counts):
        if count:
            codes += _CODE_COPIES[tile][:count]
    return tuple(codes)


_CODE_COPIES: tuple[tuple[str, ...], ...] = tuple((code,) * 4 for code in _CODES)


def command_tile(code: object, parse: Callable[[str], int]) -> int:
    """The tile a command names, read by the family's `parse` (which raises a `ValueError` for a
    code it does not play); `InvalidCommandError` for anything else than a valid code."""
    if not isinstance(code, str):
        raise InvalidCommandError(f"a tile is a code string such as '5p', got {code!r}")
    try:
        return parse(code)
    except ValueError as error:  # the rules library's InvalidTileError, Sichuan's TileParseError
        raise InvalidCommandError(str(error)) from None
