"""The Sichuan Bloody win check (RULES.md 1.6): four sets + a pair, or seven pairs.

A winning hand has 14 tiles counting its melds, holds at most two suits and no tile of the declared
missing suit. Seven pairs must be concealed (no melds); four equal tiles count as two pairs. The
decomposition itself is table-driven (see ``decomposition``).
"""

from collections.abc import Sequence

from mahjong_rules.decomposition import SUIT_SUMMARIES, hand_pair_readings, suit_summary
from mahjong_rules.hand import (
    WINNING_HAND_TILE_COUNT,
    Meld,
    check_copies,
    check_hand_size,
    meld_facts,
    missing_suit_index,
    suit_keys,
)
from mahjong_rules.tiles import Suit, Tile


def is_winning_hand(concealed: Sequence[Tile], melds: Sequence[Meld], missing_suit: Suit | None) -> bool:
    """True when the concealed tiles (winning tile included) and melds form a winning hand.

    ``concealed`` holds 14 − 3 × len(melds) tiles. ``missing_suit`` is the declared 定缺 suit, or
    ``None`` before the declaration (then only the two-suit limit applies). Impossible input (wrong
    size, a fifth copy, a tile that is not suited) raises a ``RulesError``.
    """
    facts = meld_facts(melds)
    check_hand_size(concealed, WINNING_HAND_TILE_COUNT - 3 * facts.count, "winning tile included")
    keys = suit_keys(concealed)
    check_copies(keys, melds)
    return is_winning_suit_keys(keys, facts.suit_mask, facts.count, missing_suit_index(missing_suit))


def is_winning_suit_keys(
    keys: Sequence[int], meld_suit_mask: int, meld_count: int, missing_index: int
) -> bool:
    """The win check on validated suit keys (the inner loop of ``is_winning_hand`` and the waits)."""
    key0, key1, key2 = keys[0], keys[1], keys[2]
    suit_mask = (key0 != 0) | (key1 != 0) << 1 | (key2 != 0) << 2 | meld_suit_mask
    if suit_mask == 7 or (missing_index >= 0 and suit_mask >> missing_index & 1):
        return False
    summary0 = SUIT_SUMMARIES.get(key0) or suit_summary(key0)
    summary1 = SUIT_SUMMARIES.get(key1) or suit_summary(key1)
    summary2 = SUIT_SUMMARIES.get(key2) or suit_summary(key2)
    if hand_pair_readings(summary0[0], summary1[0], summary2[0]):
        return True
    return meld_count == 0 and summary0[1] and summary1[1] and summary2[1]
