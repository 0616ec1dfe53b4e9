"""Table-driven decomposition of one suit into sets and at most one pair (the win-check hot path).

One suit's tiles are encoded as a *suit key*: an int with four bits per rank, ``count << 4 * rank``
(rank 0..8). Adding a tile is one addition, and every quantity the fan rules need from a suit is
computed once per key and memoised, so a hand costs three dictionary look-ups.

A *reading* is what a decomposition says about the fans that depend on it (RULES.md 1.7): whether it
uses the pair, whether every set is a pong (碰碰胡), and whether every set and the pair hold a 1 or a
9 (幺九). Reading index = ``pair * 4 + all_pongs * 2 + terminals``; a *readings mask* has bit
``1 << index`` set when some decomposition gives that reading. Keeping every achievable reading,
instead of one decomposition, is what lets the scorer take the highest product over decompositions.
"""

from functools import cache
from typing import TypeAlias

RANK_COUNT = 9
BITS_PER_RANK = 4
RANK_MASK = (1 << BITS_PER_RANK) - 1

PAIR_READING_BIT = 4
ALL_PONGS_READING_BIT = 2
TERMINALS_READING_BIT = 1
EMPTY_SUIT_READINGS = 1 << (ALL_PONGS_READING_BIT | TERMINALS_READING_BIT)
"""An empty suit: no pair, and vacuously all pongs and all terminal sets."""

_TWO_FIVE_EIGHT_RANKS = (1, 4, 7)
_OTHER_RANKS = tuple(rank for rank in range(RANK_COUNT) if rank not in _TWO_FIVE_EIGHT_RANKS)

SuitSummary: TypeAlias = tuple[int, bool, int, bool, bool, int]
"""(readings mask, every count even, sets of four, holds a 1 or 9, only 2/5/8, largest count)."""


def rank_unit(rank: int) -> int:
    """The suit-key increment for one tile of ``rank`` (0-based)."""
    return 1 << (BITS_PER_RANK * rank)


RANK_UNITS: tuple[int, ...] = tuple(rank_unit(rank) for rank in range(RANK_COUNT))
ODD_COUNT_BITS = sum(RANK_UNITS)
"""The lowest bit of every rank's count: ``key & ODD_COUNT_BITS == 0`` when every count is even."""


def decode_suit_key(key: int) -> list[int]:
    """The nine per-rank counts of a suit key."""
    return [(key >> (BITS_PER_RANK * rank)) & RANK_MASK for rank in range(RANK_COUNT)]


def encode_suit_key(counts: list[int]) -> int:
    """The suit key of nine per-rank counts (each 0..15)."""
    return sum(count << (BITS_PER_RANK * rank) for rank, count in enumerate(counts))


@cache
def _add_set(sub_readings: int, is_pair: int, is_pong: int, is_terminal: int) -> int:
    """Readings after adding one set (or the pair) to every decomposition in ``sub_readings``."""
    flags = (is_pong << 1) | is_terminal
    result = 0
    for index in range(8):
        if sub_readings >> index & 1:
            pairs = (index >> 2) + is_pair
            if pairs <= 1:
                result |= 1 << ((pairs << 2) | (index & 3 & flags))
    return result


@cache
def suit_readings(key: int) -> int:
    """Readings mask of every decomposition of one suit into pongs, runs and at most one pair.

    0 means the suit cannot be decomposed. The lowest rank present must start a pong, the pair or a
    run, so trying those three choices and recursing enumerates every decomposition exactly.
    """
    if key == 0:
        return EMPTY_SUIT_READINGS
    rank = ((key & -key).bit_length() - 1) // BITS_PER_RANK  # the lowest rank held
    count = key >> (BITS_PER_RANK * rank) & RANK_MASK
    unit = RANK_UNITS[rank]
    terminal = 1 if rank in (0, 8) else 0
    readings = 0
    if count >= 3:
        readings |= _add_set(suit_readings(key - 3 * unit), 0, 1, terminal)
    if count >= 2:
        readings |= _add_set(suit_readings(key - 2 * unit), 1, 1, terminal)
    if (
        rank <= 6
        and key >> (BITS_PER_RANK * (rank + 1)) & RANK_MASK
        and key >> (BITS_PER_RANK * (rank + 2)) & RANK_MASK
    ):
        run_terminal = 1 if rank in (0, 6) else 0
        run_key = key - unit - RANK_UNITS[rank + 1] - RANK_UNITS[rank + 2]
        readings |= _add_set(suit_readings(run_key), 0, 0, run_terminal)
    return readings


@cache
def combine_readings(first: int, second: int) -> int:
    """Readings of two tile groups taken together: pairs add (at most one), flags must hold in both."""
    result = 0
    for first_index in range(8):
        if not first >> first_index & 1:
            continue
        for second_index in range(8):
            if second >> second_index & 1:
                pairs = (first_index >> 2) + (second_index >> 2)
                if pairs <= 1:
                    result |= 1 << ((pairs << 2) | (first_index & second_index & 3))
    return result


@cache
def hand_pair_readings(first: int, second: int, third: int) -> int:
    """Readings of a whole hand's three suits that use exactly one pair, as a 4-bit mask.

    Bit ``all_pongs * 2 + terminals`` is set when some decomposition of the concealed tiles into sets
    and one pair gives that reading; 0 means the concealed tiles do not form sets + a pair.
    """
    return combine_readings(combine_readings(first, second), third) >> 4


_OTHER_RANKS_BITS = sum(RANK_MASK << (BITS_PER_RANK * rank) for rank in _OTHER_RANKS)
"""Every count bit of the ranks other than 2, 5 and 8: ``key & _OTHER_RANKS_BITS == 0`` when only
2s, 5s and 8s are held."""

SUIT_SUMMARIES: dict[int, SuitSummary] = {}
"""Memo of ``suit_summary`` (read directly by the hot loops to skip a function call)."""


def suit_summary(key: int) -> SuitSummary:
    """Everything the win check and the fans need from one suit, memoised per suit key."""
    summary = SUIT_SUMMARIES.get(key)
    if summary is None:
        counts = decode_suit_key(key)
        largest_count = max(counts)
        # A fifth copy is an input error the caller reports; never decompose or memoise it.
        summary = (
            suit_readings(key) if largest_count <= 4 else 0,
            not key & ODD_COUNT_BITS,
            counts.count(4),
            counts[0] > 0 or counts[8] > 0,
            not key & _OTHER_RANKS_BITS,
            largest_count,
        )
        if largest_count <= 4:
            SUIT_SUMMARIES[key] = summary
    return summary
