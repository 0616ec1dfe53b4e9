"""Melds and the facts about a Sichuan Bloody hand that every rule needs (suits held, tile counts).

A hand is its concealed tiles plus its melds (pongs and kongs; Sichuan has no chow, RULES.md 1.1).
The helpers here validate a hand once (tile kinds, fifth copies, size) and reduce it to three suit
keys (see ``decomposition``) and a ``MeldFacts`` summary, which the win check, waits and fans share.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import mul
from typing import Literal

from mahjong_rules.decomposition import BITS_PER_RANK, RANK_MASK, RANK_UNITS, SUIT_SUMMARIES, suit_summary
from mahjong_rules.errors import HandSizeError, InvalidMeldError, InvalidTileError, TileCountError
from mahjong_rules.tiles import (
    COPIES_PER_TILE,
    SUITED_TILE_KIND_COUNT,
    SUITS,
    TILE_KIND_COUNT,
    Suit,
    Tile,
    suit_index,
    tile_code,
)

MeldKind = Literal["pong", "kong"]
KongExposure = Literal["exposed", "added", "concealed"]
MELD_KINDS: tuple[MeldKind, ...] = ("pong", "kong")
KONG_EXPOSURES: tuple[KongExposure, ...] = ("exposed", "added", "concealed")
MAX_MELD_COUNT = 4
WINNING_HAND_TILE_COUNT = 14

# Per-tile lookup tables for the hot loops. Suit 3 collects every tile that is not suited.
TILE_SUIT_INDEX: tuple[int, ...] = tuple(tile // 9 if tile < 27 else 3 for tile in range(TILE_KIND_COUNT))
TILE_KEY_UNIT: tuple[int, ...] = tuple(
    1 << (BITS_PER_RANK * (tile % 9)) if tile < 27 else 1 for tile in range(TILE_KIND_COUNT)
)
TILE_IS_TERMINAL: tuple[bool, ...] = tuple(
    tile < 27 and tile % 9 in (0, 8) for tile in range(TILE_KIND_COUNT)
)
TILE_IS_TWO_FIVE_EIGHT: tuple[bool, ...] = tuple(
    tile < 27 and tile % 9 in (1, 4, 7) for tile in range(TILE_KIND_COUNT)
)


@dataclass(frozen=True, slots=True)
class Meld:
    """A declared set: a pong (three equal tiles) or a kong (four), with how a kong was made.

    ``exposure`` is required for a kong and must be ``None`` for a pong: exposed (直杠, on a
    discard), added (补杠, onto one's own pong) or concealed (暗杠). It matters for kong payments
    (RULES.md 1.5), not for fans: every meld, concealed kongs included, counts as a melded set.
    """

    kind: MeldKind
    tile: Tile
    exposure: KongExposure | None = None

    def __post_init__(self) -> None:
        if self.kind not in MELD_KINDS:
            raise InvalidMeldError(f"bad meld kind {self.kind!r} (expected pong or kong)")
        if not isinstance(self.tile, int) or not 0 <= self.tile < TILE_KIND_COUNT:
            raise InvalidTileError(f"meld tile {self.tile!r} is not a tile")
        if self.kind == "kong" and self.exposure not in KONG_EXPOSURES:
            raise InvalidMeldError(
                f"kong of {tile_code(self.tile)} needs exposure exposed, added or concealed, "
                f"not {self.exposure!r}"
            )
        if self.kind == "pong" and self.exposure is not None:
            raise InvalidMeldError(f"pong of {tile_code(self.tile)} takes no exposure ({self.exposure!r})")

    @property
    def size(self) -> int:
        """Number of tiles in the meld: 3 or 4."""
        return 4 if self.kind == "kong" else 3


@dataclass(frozen=True, slots=True)
class MeldFacts:
    """What the rules need to know about a hand's melds, computed once per call."""

    count: int
    kong_count: int
    suit_mask: int
    """Bit ``1 << suit index`` for every suit a meld uses."""
    all_terminal: bool
    """Every meld is of a 1 or a 9 (幺九 needs every set to hold one)."""
    any_terminal: bool
    all_two_five_eight: bool
    pong_tiles: tuple[Tile, ...]
    """Tiles of the pongs: a pong plus the fourth copy in hand is a 根."""


NO_MELDS = MeldFacts(0, 0, 0, True, False, True, ())


def meld_facts(melds: Sequence[Meld]) -> MeldFacts:
    """Validate Sichuan melds (suited tiles, at most four, no tile in two melds) and summarise them."""
    if not melds:
        return NO_MELDS
    return _meld_facts(tuple(melds))


@lru_cache(maxsize=4096)
def _meld_facts(melds: tuple[Meld, ...]) -> MeldFacts:
    """`meld_facts`, memoised: a hand keeps its melds for many turns."""
    if len(melds) > MAX_MELD_COUNT:
        raise HandSizeError(f"a hand has at most {MAX_MELD_COUNT} melds, not {len(melds)}")
    suit_mask = 0
    kong_count = 0
    pong_tiles: list[Tile] = []
    for meld in melds:
        if meld.tile >= SUITED_TILE_KIND_COUNT:
            raise InvalidTileError(f"tile {tile_code(meld.tile)} is not used in Sichuan Bloody")
        suit_mask |= 1 << TILE_SUIT_INDEX[meld.tile]
        if meld.kind == "kong":
            kong_count += 1
        else:
            pong_tiles.append(meld.tile)
    tiles = [meld.tile for meld in melds]
    if len(set(tiles)) != len(tiles):
        duplicate = next(tile for tile in tiles if tiles.count(tile) > 1)
        raise TileCountError(
            f"tile {tile_code(duplicate)} is in two melds: more than {COPIES_PER_TILE} copies"
        )
    return MeldFacts(
        count=len(melds),
        kong_count=kong_count,
        suit_mask=suit_mask,
        all_terminal=all(TILE_IS_TERMINAL[tile] for tile in tiles),
        any_terminal=any(TILE_IS_TERMINAL[tile] for tile in tiles),
        all_two_five_eight=all(TILE_IS_TWO_FIVE_EIGHT[tile] for tile in tiles),
        pong_tiles=tuple(pong_tiles),
    )


def concealed_count(suit_keys: Sequence[int], tile: Tile) -> int:
    """How many copies of ``tile`` the suit keys hold."""
    return (suit_keys[TILE_SUIT_INDEX[tile]] >> (BITS_PER_RANK * (tile % 9))) & RANK_MASK


def check_hand_size(concealed: Sequence[Tile], expected_tile_count: int, what: str) -> None:
    """Raise ``HandSizeError`` unless there are ``expected_tile_count`` concealed tiles."""
    check_tile_total(len(concealed), expected_tile_count, what)


def check_tile_total(tile_count: int, expected_tile_count: int, what: str) -> None:
    """Raise ``HandSizeError`` unless ``tile_count`` is ``expected_tile_count``."""
    if tile_count != expected_tile_count:
        raise HandSizeError(
            f"expected {expected_tile_count} concealed tiles ({what}) for this many melds, got {tile_count}"
        )


def suit_keys(concealed: Sequence[Tile]) -> list[int]:
    """Validate the kinds of concealed Sichuan tiles and return their suit keys (m, p, s, other).

    Raises ``InvalidTileError`` naming a tile that is not suited. The caller limits the hand size
    first (at most 14 tiles, so a rank's four-bit count cannot overflow) and checks fifth copies
    with ``check_copies`` once the melds are known.
    """
    keys = [0, 0, 0, 0]
    try:
        for tile in concealed:
            keys[TILE_SUIT_INDEX[tile]] += TILE_KEY_UNIT[tile]
    except (IndexError, TypeError):
        bad = next(tile for tile in concealed if not isinstance(tile, int) or not 0 <= tile < TILE_KIND_COUNT)
        raise InvalidTileError(f"not a tile: {bad!r}") from None
    if keys[3]:
        bad = next(tile for tile in concealed if tile >= SUITED_TILE_KIND_COUNT or tile < 0)
        raise InvalidTileError(f"tile {tile_code(bad)} is not used in Sichuan Bloody")
    return keys


def suit_keys_of_counts(counts: Sequence[int]) -> list[int]:
    """Validate 27 concealed tile counts (1m..9s, each 0..4) and return their suit keys (m, p, s,
    and 0 for the other tiles): the table engine keeps hands as counts, so it need not list tiles."""
    if len(counts) != SUITED_TILE_KIND_COUNT or min(counts) < 0 or max(counts) > COPIES_PER_TILE:
        raise TileCountError(
            f"expected {SUITED_TILE_KIND_COUNT} tile counts of 0..{COPIES_PER_TILE}, got {counts!r}"
        )
    return [sum(map(mul, counts[start : start + 9], RANK_UNITS)) for start in (0, 9, 18)] + [0]


def check_copies(suit_keys_of_hand: Sequence[int], melds: Sequence[Meld]) -> None:
    """Raise ``TileCountError`` naming a tile held more than four times (concealed + melds)."""
    for key in suit_keys_of_hand[:3]:
        if (SUIT_SUMMARIES.get(key) or suit_summary(key))[5] > COPIES_PER_TILE:
            raise_fifth_copy(suit_keys_of_hand, melds)
    for meld in melds:
        if concealed_count(suit_keys_of_hand, meld.tile) + meld.size > COPIES_PER_TILE:
            raise_fifth_copy(suit_keys_of_hand, melds)


def raise_fifth_copy(suit_keys_of_hand: Sequence[int], melds: Sequence[Meld]) -> None:
    """Raise ``TileCountError`` naming the first tile held more than four times (hand + melds)."""
    held = [concealed_count(suit_keys_of_hand, tile) for tile in range(SUITED_TILE_KIND_COUNT)]
    for meld in melds:
        held[meld.tile] += meld.size
    for tile, count in enumerate(held):
        if count > COPIES_PER_TILE:
            raise TileCountError(
                f"tile {tile_code(tile)} appears {count} times; the set holds only {COPIES_PER_TILE}"
            )


def missing_suit_index(missing_suit: Suit | None) -> int:
    """Index of the declared missing suit, or -1 when none is declared."""
    return -1 if missing_suit is None else suit_index(missing_suit)


def suits_held(concealed: Sequence[Tile], melds: Sequence[Meld]) -> frozenset[Suit]:
    """The suits present in the concealed tiles and melds."""
    tiles = [*concealed, *(meld.tile for meld in melds)]
    return frozenset(SUITS[TILE_SUIT_INDEX[tile]] for tile in tiles if 0 <= tile < SUITED_TILE_KIND_COUNT)


def holds_three_suits(concealed: Sequence[Tile], melds: Sequence[Meld]) -> bool:
    """True when the hand (concealed + melds) holds all three suits: a flower pig (RULES.md 1.8)."""
    return len(suits_held(concealed, melds)) == 3
