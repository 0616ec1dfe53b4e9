"""Reading the table's protobuf fields into the rules library's values, checked: a seat, a tile,
a meld, a suit. A value that cannot be read raises `GameFactsError`; nothing here keeps state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, TypeVar

from mahjong.v1 import common_pb2
from mahjong_rules import SUITS, Meld, RulesError, Suit, Tile, parse_tile
from mahjong_rules.settlement import SEAT_COUNT, KongKind, WinBy

from mahjong_scoring.game_facts.steps import GameFactsError

SUITED_TILE_KIND_COUNT: Final = 27
"""Sichuan Bloody plays the 27 suited tile kinds only (RULES.md 1.1)."""

KONG_KINDS: Final = {
    common_pb2.KONG_EXPOSURE_EXPOSED: KongKind.EXPOSED,
    common_pb2.KONG_EXPOSURE_ADDED: KongKind.ADDED,
    common_pb2.KONG_EXPOSURE_CONCEALED: KongKind.CONCEALED,
}
WIN_BYS: Final = {
    common_pb2.WIN_BY_SELF_DRAW: WinBy.SELF_DRAW,
    common_pb2.WIN_BY_DISCARD: WinBy.DISCARD,
    common_pb2.WIN_BY_ROB_KONG: WinBy.ROB_KONG,
}

_Value = TypeVar("_Value")


def check_seat(seat: int, what: str) -> None:
    """Raise unless `seat` is one of the four seats; `what` names it in the error."""
    if not 0 <= seat < SEAT_COUNT:
        raise GameFactsError(f"{what}: seat {seat} is not one of 0..{SEAT_COUNT - 1}")


def any_tile(code: str) -> Tile:
    """A tile of either family (Formula has honours and flowers too, RULES.md 2.1)."""
    try:
        return parse_tile(code)
    except RulesError as error:
        raise GameFactsError(str(error)) from error


def sichuan_tile(code: str) -> Tile:
    """A Sichuan Bloody tile: a suited one."""
    tile = _SICHUAN_TILE_BY_CODE.get(code)  # the codes the table writes: no parse, no checks
    if tile is not None:
        return tile
    tile = any_tile(code)
    if tile >= SUITED_TILE_KIND_COUNT:
        raise GameFactsError(f"tile {code!r} is not a Sichuan Bloody tile")
    return tile


_SICHUAN_TILE_BY_CODE: Final[dict[str, Tile]] = {
    f"{rank}{family}": parse_tile(f"{rank}{family}") for family in "mps" for rank in range(1, 10)
}
assert sorted(_SICHUAN_TILE_BY_CODE.values()) == list(range(SUITED_TILE_KIND_COUNT))


def sichuan_tiles(codes: Sequence[str]) -> list[Tile]:
    """Sichuan Bloody tiles, in the given order."""
    return [sichuan_tile(code) for code in codes]


def suit(code: str) -> Suit:
    """A suit: m, p or s."""
    for known in SUITS:
        if known == code:
            return known
    raise GameFactsError(f"{code!r} is not a suit (m, p or s)")


def sichuan_meld(meld: common_pb2.Meld) -> Meld:
    """A Sichuan Bloody meld: a pong, or a kong with its exposure."""
    tile = sichuan_tile(meld.tile)
    if meld.kind == "pong":
        return Meld("pong", tile)
    if meld.kind == "kong":
        kind = KONG_KINDS.get(meld.exposure)
        if kind is None:
            raise GameFactsError(f"the kong of {meld.tile} has no exposure")
        return Meld("kong", tile, kind.value)
    raise GameFactsError(f"meld kind {meld.kind!r} is not pong or kong")


def tile_counts(tiles: Sequence[Tile]) -> tuple[int, ...]:
    """How many of each suited tile kind `tiles` holds."""
    counts = [0] * SUITED_TILE_KIND_COUNT
    for tile in tiles:
        counts[tile] += 1
    return tuple(counts)


def with_item(values: tuple[_Value, ...], index: int, value: _Value) -> tuple[_Value, ...]:
    """`values` with the one at `index` replaced."""
    return (*values[:index], value, *values[index + 1 :])
