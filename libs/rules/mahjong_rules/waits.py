"""Waits (听牌) of a 13-tile position and their wait multipliers (RULES.md 1.7, 1.8).

A tile is a wait when adding it makes a winning hand (RULES.md 1.6). Its *wait multiplier* is the
product as if won on a discard with no situational extra: shape fans, 根 and 断幺九 only; 查大叫
pays the highest one. A wait on a tile of which the player holds all four copies (concealed +
melds) does not count, and a player whose only waits are such tiles is not ready (RULES.md 1.8).
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from operator import mul

from mahjong_rules.decomposition import (
    BITS_PER_RANK,
    ODD_COUNT_BITS,
    RANK_MASK,
    RANK_UNITS,
    SUIT_SUMMARIES,
    combine_readings,
    decode_suit_key,
    suit_readings,
    suit_summary,
)
from mahjong_rules.fans import Fan, best_reading, fan_list
from mahjong_rules.hand import (
    WINNING_HAND_TILE_COUNT,
    Meld,
    MeldFacts,
    check_copies,
    check_hand_size,
    check_tile_total,
    meld_facts,
    missing_suit_index,
    suit_keys,
    suit_keys_of_counts,
)
from mahjong_rules.tiles import COPIES_PER_TILE, Suit, Tile


@dataclass(frozen=True, slots=True)
class Wait:
    """One winning tile of a ready hand, with its wait multiplier and the fans behind it."""

    tile: Tile
    multiplier: int
    fans: tuple[Fan, ...]


@dataclass(frozen=True, slots=True)
class Waits:
    """Every counted wait of a 13-tile position, in tile order; ``ready`` when there is one."""

    ready: bool
    waits: tuple[Wait, ...]

    @property
    def max_multiplier(self) -> int:
        """The highest wait multiplier (what a not-ready player pays a ready one), 0 when not ready."""
        return max((wait.multiplier for wait in self.waits), default=0)


NOT_READY = Waits(False, ())


def find_waits(concealed: Sequence[Tile], melds: Sequence[Meld], missing_suit: Suit | None) -> Waits:
    """Every tile that would complete the hand, each with its wait multiplier (RULES.md 1.7, 1.8).

    ``concealed`` holds 13 − 3 × len(melds) tiles. A hand holding a missing-suit tile or three suits
    is never ready (RULES.md 1.3). Only tiles within two ranks of a concealed tile are tried: the
    winning tile must form a set or the pair with concealed tiles, never with a meld.
    """
    keys, facts, missing_index = _waiting_position(concealed, melds, missing_suit)
    waits: list[Wait] = []
    for suit, new_key, tile in _winning_candidates(keys, facts, melds, missing_index):
        key = keys[suit]
        keys[suit] = new_key
        reading = best_reading(keys, facts, missing_index)
        keys[suit] = key
        if reading is not None:
            product, shape, flush, terminals, roots_left, no_terminals = reading
            fans = fan_list(shape, flush, terminals, roots_left, no_terminals, ())
            waits.append(Wait(tile, product, fans))
    return Waits(True, tuple(waits)) if waits else NOT_READY


def winning_tiles(
    concealed: Sequence[Tile], melds: Sequence[Meld], missing_suit: Suit | None
) -> tuple[Tile, ...]:
    """The tiles of ``find_waits(...).waits``, in tile order, without scoring them.

    Every candidate that completes sets + a pair (or seven pairs) has a scoring reading, so this
    is the same list; it skips the fans, which a claim check or a waits hint does not need.
    """
    keys, facts, missing_index = _waiting_position(concealed, melds, missing_suit)
    return tuple(tile for _, _, tile in _winning_candidates(keys, facts, melds, missing_index))


def winning_tiles_of_counts(
    counts: Sequence[int], melds: Sequence[Meld], missing_suit: Suit | None, *, trusted: bool = False
) -> tuple[Tile, ...]:
    """``winning_tiles`` of concealed tiles given as their 27 counts (1m..9s), as the table
    engine keeps hands.

    ``trusted=True`` is the caller's promise that the position is valid (27 counts of 0..4, the
    hand's size for its melds, no fifth copy with the melds), as a table engine's folded hands
    are: the checks are skipped, and an invalid position gives an unspecified answer instead of
    an error. The melds are checked either way.
    """
    facts = meld_facts(melds)
    if trusted:
        keys = [sum(map(mul, counts[start : start + 9], RANK_UNITS)) for start in (0, 9, 18)] + [0]
    else:
        keys = suit_keys_of_counts(counts)
        check_tile_total(sum(counts), WINNING_HAND_TILE_COUNT - 1 - 3 * facts.count, "a waiting hand")
        check_copies(keys, melds)
    missing_index = missing_suit_index(missing_suit)
    return tuple(tile for _, _, tile in _winning_candidates(keys, facts, melds, missing_index))


def _waiting_position(
    concealed: Sequence[Tile], melds: Sequence[Meld], missing_suit: Suit | None
) -> tuple[list[int], MeldFacts, int]:
    """Validate a 13-tile position: its suit keys, meld facts and missing-suit index."""
    facts = meld_facts(melds)
    check_hand_size(concealed, WINNING_HAND_TILE_COUNT - 1 - 3 * facts.count, "a waiting hand")
    keys = suit_keys(concealed)
    check_copies(keys, melds)
    return keys, facts, missing_suit_index(missing_suit)


def _winning_candidates(
    keys: list[int], facts: MeldFacts, melds: Sequence[Meld], missing_index: int
) -> Iterator[tuple[int, int, Tile]]:
    """(suit, the suit's key with the tile, tile) for every counted tile that completes the hand."""
    suit_mask = (keys[0] != 0) | (keys[1] != 0) << 1 | (keys[2] != 0) << 2 | facts.suit_mask
    if suit_mask == 7 or (missing_index >= 0 and suit_mask >> missing_index & 1):
        return
    held = {meld.tile: meld.size for meld in melds}
    summaries = [SUIT_SUMMARIES.get(key) or suit_summary(key) for key in keys[:3]]
    for suit in (0, 1, 2):
        key = keys[suit]
        if key == 0:
            continue  # the winning tile must join concealed tiles of its own suit
        first_other, second_other = _OTHER_SUITS[suit]
        first, second = summaries[first_other], summaries[second_other]
        other_readings = combine_readings(first[0], second[0])
        seven_pairs_possible = facts.count == 0 and first[1] and second[1]
        if not other_readings and not seven_pairs_possible:
            continue
        for rank in _completing_ranks(key, other_readings, seven_pairs_possible):
            tile = suit * 9 + rank
            if (key >> (BITS_PER_RANK * rank) & RANK_MASK) + held.get(tile, 0) >= COPIES_PER_TILE:
                continue  # all four copies held: the wait does not count (RULES.md 1.8)
            yield suit, key + RANK_UNITS[rank], tile


_OTHER_SUITS = ((1, 2), (0, 2), (0, 1))
"""The two other suits of each suit."""


@lru_cache(maxsize=1 << 18)
def _completing_ranks(key: int, other_readings: int, seven_pairs_possible: bool) -> tuple[int, ...]:
    """Ranks whose tile, added to this suit, completes sets + a pair (or seven pairs) with the rest.

    ``other_readings`` are the readings of the other two suits, so this is a per-suit table: a
    position costs one look-up per suit instead of one decomposition per candidate tile.
    """
    counts = decode_suit_key(key)
    near = {rank for rank, count in enumerate(counts) if count for rank in range(rank - 2, rank + 3)}
    ranks: list[int] = []
    for rank in sorted(near):
        if 0 <= rank < 9 and counts[rank] < 4:
            new_key = key + RANK_UNITS[rank]
            if combine_readings(suit_readings(new_key), other_readings) >> 4 or (
                seven_pairs_possible and not new_key & ODD_COUNT_BITS
            ):
                ranks.append(rank)
    return tuple(ranks)


def max_wait_multiplier(concealed: Sequence[Tile], melds: Sequence[Meld], missing_suit: Suit | None) -> int:
    """The highest wait multiplier of a 13-tile position, 0 when not ready (the 查大叫 amount, uncapped)."""
    return find_waits(concealed, melds, missing_suit).max_multiplier


def wait_multiplier(
    concealed: Sequence[Tile], melds: Sequence[Meld], tile: Tile, missing_suit: Suit | None
) -> int:
    """The wait multiplier of one tile for a 13-tile position, 0 when that tile does not win."""
    for wait in find_waits(concealed, melds, missing_suit).waits:
        if wait.tile == tile:
            return wait.multiplier
    return 0
