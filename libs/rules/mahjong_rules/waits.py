"""Waits (听牌) of a 13-tile position and their wait multipliers (RULES.md 1.7, 1.8).

A tile is a wait when adding it makes a winning hand (RULES.md 1.6). Its *wait multiplier* is the
product as if won on a discard with no situational extra: shape fans, 根 and 断幺九 only; 查大叫
pays the highest one. A wait on a tile of which the player holds all four copies (concealed +
melds) does not count, and a player whose only waits are such tiles is not ready (RULES.md 1.8).
"""

from collections.abc import Sequence
from dataclasses import dataclass

from mahjong_rules.decomposition import RANK_UNITS
from mahjong_rules.fans import DISCARD_CONTEXT, Fan, best_reading, evaluation_from_reading
from mahjong_rules.hand import (
    WINNING_HAND_TILE_COUNT,
    Meld,
    check_copies,
    check_hand_size,
    concealed_count,
    meld_facts,
    missing_suit_index,
    suit_keys,
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
    facts = meld_facts(melds)
    check_hand_size(concealed, WINNING_HAND_TILE_COUNT - 1 - 3 * facts.count, "a waiting hand")
    keys = suit_keys(concealed)
    check_copies(keys, melds)
    missing_index = missing_suit_index(missing_suit)
    suit_mask = (keys[0] != 0) | (keys[1] != 0) << 1 | (keys[2] != 0) << 2 | facts.suit_mask
    if suit_mask == 7 or (missing_index >= 0 and suit_mask >> missing_index & 1):
        return NOT_READY
    held = {meld.tile: meld.size for meld in melds}
    waits: list[Wait] = []
    for tile in _candidate_tiles(concealed):
        if concealed_count(keys, tile) + held.get(tile, 0) >= COPIES_PER_TILE:
            continue
        suit = tile // 9
        keys[suit] += RANK_UNITS[tile % 9]
        reading = best_reading(keys, facts, missing_index)
        keys[suit] -= RANK_UNITS[tile % 9]
        if reading is not None:
            evaluation = evaluation_from_reading(reading, DISCARD_CONTEXT, facts.count > 0)
            waits.append(Wait(tile, evaluation.multiplier, evaluation.fans))
    return Waits(bool(waits), tuple(waits)) if waits else NOT_READY


def _candidate_tiles(concealed: Sequence[Tile]) -> list[Tile]:
    """Tiles within two ranks (same suit) of some concealed tile, sorted."""
    candidates: set[Tile] = set()
    for tile in set(concealed):
        suit_start = tile - tile % 9
        low = max(suit_start, tile - 2)
        high = min(suit_start + 8, tile + 2)
        candidates.update(range(low, high + 1))
    return sorted(candidates)


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
