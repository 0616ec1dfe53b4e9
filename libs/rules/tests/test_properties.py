"""Hypothesis properties of the win check, the fans and the waits (RULES.md 1.6-1.8).

The brute force here is written separately from ``mahjong_rules.decomposition``: it removes sets from
a sorted tile list recursively, with no counts, keys or memo.
"""

from collections import Counter

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from mahjong_rules import (
    Meld,
    Suit,
    WinContext,
    evaluate_win,
    find_waits,
    is_winning_hand,
    winning_tiles,
    winning_tiles_of_counts,
)
from mahjong_rules.decomposition import encode_suit_key, hand_pair_readings, suit_summary

SUIT_LETTERS: tuple[Suit, Suit, Suit] = ("m", "p", "s")
PROPERTY_SETTINGS = settings(max_examples=100, deadline=None)


def brute_force_readings(tiles: list[int]) -> set[tuple[bool, bool]]:
    """Every (all pongs, all sets and pair hold a 1 or 9) of every sets + one pair decomposition."""
    found: set[tuple[bool, bool]] = set()

    def search(rest: list[int], has_pair: bool, all_pongs: bool, terminals: bool) -> None:
        if not rest:
            if has_pair:
                found.add((all_pongs, terminals))
            return
        first = rest[0]
        is_terminal = first % 9 in (0, 8)
        if rest.count(first) >= 3:
            search(rest[3:], has_pair, all_pongs, terminals and is_terminal)
        if rest.count(first) >= 2 and not has_pair:
            search(rest[2:], True, all_pongs, terminals and is_terminal)
        if first % 9 <= 6 and first + 1 in rest and first + 2 in rest:
            remaining = list(rest)
            for tile in (first, first + 1, first + 2):
                remaining.remove(tile)
            search(remaining, has_pair, False, terminals and first % 9 in (0, 6))

    search(sorted(tiles), False, True, True)
    return found


def brute_force_wins(concealed: list[int], melds: list[Meld], missing: Suit | None) -> bool:
    suits = {tile // 9 for tile in concealed} | {meld.tile // 9 for meld in melds}
    if len(suits) > 2 or (missing is not None and SUIT_LETTERS.index(missing) in suits):
        return False
    if brute_force_readings(concealed):
        return True
    return not melds and all(count % 2 == 0 for count in Counter(concealed).values())


@st.composite
def winning_hands(draw: st.DrawFn) -> tuple[list[int], list[Meld], Suit]:
    """A winning hand of two suits: four sets (some melded) and a pair, shuffled; winning tile last."""
    suits = draw(st.lists(st.integers(0, 2), min_size=2, max_size=2, unique=True))
    meld_count = draw(st.integers(0, 4))
    concealed: list[int] = []
    melds: list[Meld] = []
    for index in range(4):
        base = draw(st.sampled_from(suits)) * 9
        if index < meld_count:
            tile = base + draw(st.integers(0, 8))
            melds.append(draw(st.sampled_from([Meld("pong", tile), Meld("kong", tile, "concealed")])))
        elif draw(st.booleans()):
            concealed += [base + draw(st.integers(0, 8))] * 3
        else:
            start = base + draw(st.integers(0, 6))
            concealed += [start, start + 1, start + 2]
    pair = draw(st.sampled_from(suits)) * 9 + draw(st.integers(0, 8))
    concealed += [pair, pair]
    held = Counter(concealed)
    for meld in melds:
        held[meld.tile] += meld.size
    if max(held.values()) > 4 or len({meld.tile for meld in melds}) < len(melds):
        assume(False)
    concealed = draw(st.permutations(concealed))
    missing = next(SUIT_LETTERS[suit] for suit in range(3) if suit not in suits)
    return list(concealed), melds, missing


def relabel(tile: int, permutation: list[int]) -> int:
    return permutation[tile // 9] * 9 + tile % 9


@PROPERTY_SETTINGS
@given(winning_hands(), st.permutations([0, 1, 2]), st.sampled_from(["self_draw", "discard", "rob_kong"]))
def test_a_winning_hand_stays_winning_with_the_same_multiplier_under_suit_relabelling(
    hand: tuple[list[int], list[Meld], Suit], permutation: list[int], win_by: str
) -> None:
    concealed, melds, missing = hand
    assert is_winning_hand(concealed, melds, missing)
    relabelled = [relabel(tile, permutation) for tile in concealed]
    relabelled_melds = [Meld(meld.kind, relabel(meld.tile, permutation), meld.exposure) for meld in melds]
    relabelled_missing = SUIT_LETTERS[permutation[SUIT_LETTERS.index(missing)]]
    assert is_winning_hand(relabelled, relabelled_melds, relabelled_missing)
    context = WinContext(win_by=win_by)  # type: ignore[arg-type]
    original = evaluate_win(concealed[:-1], melds, concealed[-1], missing, context)
    moved = evaluate_win(relabelled[:-1], relabelled_melds, relabelled[-1], relabelled_missing, context)
    assert original is not None and moved is not None
    assert original.multiplier == moved.multiplier
    assert [fan.id for fan in original.fans] == [fan.id for fan in moved.fans]


@st.composite
def near_winning_hands(draw: st.DrawFn) -> tuple[list[int], list[Meld], Suit]:
    """A winning hand with up to two concealed tiles replaced by random tiles of its suits."""
    concealed, melds, missing = draw(winning_hands())
    suits = sorted({tile // 9 for tile in concealed})
    for _ in range(draw(st.integers(0, 2))):
        position = draw(st.integers(0, len(concealed) - 1))
        concealed[position] = draw(st.sampled_from(suits)) * 9 + draw(st.integers(0, 8))
    held = Counter(concealed)
    for meld in melds:
        held[meld.tile] += meld.size
    assume(max(held.values()) <= 4)
    return concealed, melds, missing


@PROPERTY_SETTINGS
@given(near_winning_hands())
def test_the_fast_win_check_agrees_with_brute_force(hand: tuple[list[int], list[Meld], Suit]) -> None:
    concealed, melds, missing = hand
    assert is_winning_hand(concealed, melds, missing) == brute_force_wins(concealed, melds, missing)


@PROPERTY_SETTINGS
@given(
    st.lists(st.integers(0, 8), min_size=2, max_size=14).filter(
        lambda ranks: max(Counter(ranks).values()) <= 4
    )
)
def test_suit_readings_agree_with_brute_force_decompositions(ranks: list[int]) -> None:
    counts = [ranks.count(rank) for rank in range(9)]
    readings_mask = hand_pair_readings(suit_summary(encode_suit_key(counts))[0], 8, 8)
    fast = {(bool(reading >> 1), bool(reading & 1)) for reading in range(4) if readings_mask >> reading & 1}
    assert fast == brute_force_readings(ranks)


@PROPERTY_SETTINGS
@given(near_winning_hands())
def test_waits_agree_with_trying_all_27_tiles(hand: tuple[list[int], list[Meld], Suit]) -> None:
    concealed, melds, missing = hand
    position13 = concealed[:-1]
    held = Counter(position13)
    for meld in melds:
        held[meld.tile] += meld.size
    expected = {}
    for tile in range(27):
        if held[tile] >= 4:
            continue  # RULES.md 1.8: a wait on a tile held four times does not count
        if is_winning_hand([*position13, tile], melds, missing):
            evaluation = evaluate_win(position13, melds, tile, missing)
            assert evaluation is not None
            expected[tile] = evaluation.multiplier
    result = find_waits(position13, melds, missing)
    assert {wait.tile: wait.multiplier for wait in result.waits} == expected
    assert result.ready == bool(expected)
    assert winning_tiles(position13, melds, missing) == tuple(wait.tile for wait in result.waits)
    counts = [position13.count(tile) for tile in range(27)]
    assert winning_tiles_of_counts(counts, melds, missing) == tuple(wait.tile for wait in result.waits)
    # A caller vouching for a valid position (the table engine's folded hands) gets the same waits.
    assert winning_tiles_of_counts(counts, melds, missing, trusted=True) == tuple(
        wait.tile for wait in result.waits
    )
