"""Scoring a formula win with wildcards (财神), 无财神 and flowers (RULES.md 2.1, 2.2).

A wildcard stands for any non-flower tile, and the hand scores under the substitution with the
highest total. Trying every tile for every wildcard (34^k calls of the MCR calculator) is far too
slow, so the search works in two steps:

1. Enumerate the substitutions that make a *legal winning shape* and nothing else, straight from
   the shapes: four sets + a pair (the lowest real tile must sit in a pair, a pong or one of the
   three chows through it; the wildcards fill the gaps), seven pairs, thirteen orphans, the
   honors-and-knitted hands and the knitted straight. Wildcards left over after every real tile
   is placed form free sets or a free pair, and only then is every tile a candidate.
2. Score each distinct substitution once with the calculator (memoised per search) and keep the
   best. A substitution that would make a fifth copy of a tile (hand + melds) is dropped first.

A wildcard someone discards is won on only as its face value (it is a plain tile then).
"""

from collections.abc import Sequence
from functools import lru_cache
from itertools import combinations, combinations_with_replacement
from typing import NamedTuple

from mahjong_rules.errors import HandSizeError, InvalidMeldError, InvalidTileError, RulesError, TileCountError
from mahjong_rules.formula.fans import (
    CALCULATOR_CODES,
    FLOWER_TILES,
    NO_WILDCARD,
    CalculatorFlags,
    CalculatorPack,
    FormulaMeld,
    FormulaWinContext,
    ScoredFan,
    StandardFans,
    WinBy,
    calculate_standard_fans,
    calculator_flags,
    calculator_packs,
    scored,
)
from mahjong_rules.tiles import COPIES_PER_TILE, Tile, tile_code

KIND_COUNT = 34
"""Suited and honor tile kinds (0..33); flowers never enter a winning hand."""
HONORS: tuple[Tile, ...] = tuple(range(27, 34))
ORPHANS: tuple[Tile, ...] = (0, 8, 9, 17, 18, 26, *HONORS)
MAX_FLOWERS = 8
SETS_IN_A_HAND = 4
KNITTED_ARRANGEMENTS: tuple[tuple[Tile, ...], ...] = tuple(
    tuple(
        suit * 9 + rank
        for suit, start in zip(order, (0, 1, 2), strict=True)
        for rank in (start, start + 3, start + 6)
    )
    for order in ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))
)
"""The six knitted straights (组合龙): 147 / 258 / 369 spread over the three suits in every order."""
FREE_SETS: tuple[tuple[Tile, ...], ...] = (
    *((tile, tile, tile) for tile in range(KIND_COUNT)),
    *((tile, tile + 1, tile + 2) for tile in range(27) if tile % 9 <= 6),
)
"""Every set three wildcards could stand for on their own: 34 pongs and 21 chows."""

Substitution = tuple[Tile, ...]
"""What the wildcards stand for, sorted."""


class FormulaEvaluation(NamedTuple):
    """The score of a formula win under its best substitution (a named tuple: built on every
    evaluation, and a frozen dataclass costs more to build than the rest of a plain evaluation).

    - ``fans``: the standard fans, then 无财神, then 花牌 (flowers), each with its count.
    - ``total_fan``: everything, flowers included (what the room's ``fan_term`` uses).
    - ``fan_toward_minimum``: the total without flowers, compared with ``min_fan``.
    - ``wildcards_as``: what each wildcard stands for, sorted (empty with no wildcard).
    """

    fans: tuple[ScoredFan, ...]
    total_fan: int
    fan_toward_minimum: int
    meets_min: bool
    wildcards_as: tuple[Tile, ...]


def evaluate_formula_win(
    concealed: Sequence[Tile],
    melds: Sequence[FormulaMeld],
    win_tile: Tile,
    context: FormulaWinContext | None = None,
    *,
    wildcard: Tile | None = None,
    flowers: int = 0,
    min_fan: int = 8,
    no_wildcard_fan: int = NO_WILDCARD.fan,
) -> FormulaEvaluation | None:
    """Score a formula win (RULES.md 2.2); ``None`` when no substitution makes a winning hand.

    ``concealed`` is the hand without the winning tile. ``wildcard`` is the wildcard's tile code
    (every copy in ``concealed``, and a self-drawn ``win_tile``, is a wildcard); ``None`` plays
    plain MCR with no 无财神. ``flowers`` count 1 fan each once the hand has won, never toward
    ``min_fan``. 无财神 (``no_wildcard_fan``) applies when no wildcard is used or every wildcard
    stands for itself. 无番和 is judged on the standard fans alone: 无财神 and flowers do not
    take it away (otherwise a hand would lose fan for holding no wildcard).
    """
    context = context or DEFAULT_CONTEXT
    check_options(wildcard, flowers, min_fan, no_wildcard_fan)
    codes, held = _validated_codes(concealed, melds, win_tile, wildcard)
    win_is_wildcard = win_tile == wildcard and context.win_by is WinBy.SELF_DRAW
    packs = calculator_packs(melds)
    flags = calculator_flags(context)
    best: tuple[StandardFans, Substitution] | None
    if wildcard is None or not (held or win_is_wildcard):
        # No wildcard in play: none held, or only a discarded one won on at face value.
        plain = calculate_standard_fans(packs, codes, CALCULATOR_CODES[win_tile], flags)
        best = None if plain is None else (plain, ())
    else:
        best = _best_substitution(
            concealed, melds, packs, flags, win_tile, win_is_wildcard, wildcard, no_wildcard_fan
        )
    if best is None:
        return None
    (fans, toward_minimum), substitution = best
    if wildcard is not None and no_wildcard_fan > 0 and all(tile == wildcard for tile in substitution):
        fans += (scored(NO_WILDCARD, value=no_wildcard_fan),)
        toward_minimum += no_wildcard_fan
    if flowers:
        fans += (scored(FLOWER_TILES, flowers),)
    return FormulaEvaluation(
        fans, toward_minimum + flowers, toward_minimum, toward_minimum >= min_fan, substitution
    )


DEFAULT_CONTEXT = FormulaWinContext()
_HAND_TILES = frozenset(range(KIND_COUNT))


def check_options(wildcard: Tile | None, flowers: int, min_fan: int, no_wildcard_fan: int) -> None:
    """The evaluation options are valid (a wildcard tile 0..33, 0..8 flowers, non-negative fans)."""
    if wildcard is not None and wildcard not in _HAND_TILES:
        raise InvalidTileError(f"the wildcard must be a suited or honor tile, not {wildcard!r}")
    if not isinstance(flowers, int) or not 0 <= flowers <= MAX_FLOWERS:
        raise RulesError(f"flowers must be 0..{MAX_FLOWERS}, not {flowers!r}")
    if not isinstance(min_fan, int) or min_fan < 0:
        raise RulesError(f"min_fan must be a non-negative integer, not {min_fan!r}")
    if not isinstance(no_wildcard_fan, int) or no_wildcard_fan < 0:
        raise RulesError(f"no_wildcard_fan must be a non-negative integer, not {no_wildcard_fan!r}")


_COUNT_BIT_WIDTH = 5
_ONE_COPY: tuple[int, ...] = tuple(1 << (_COUNT_BIT_WIDTH * tile) for tile in range(KIND_COUNT))
_PLUS_THREE = 3 * sum(_ONE_COPY)
_FIFTH_COPY_BITS = 0b11000 * sum(_ONE_COPY)
"""Copies are counted in one integer, 5 bits per kind (no hand reaches 32 copies of a kind).
Adding 3 to every field sets bit 3 or 4 exactly in the fields holding 5 or more copies."""


def _validated_codes(
    concealed: Sequence[Tile], melds: Sequence[FormulaMeld], win_tile: Tile, wildcard: Tile | None
) -> tuple[tuple[str, ...], int]:
    """The concealed tiles in the calculator's codes and how many of them are the wildcard, in one
    pass; raises for an impossible hand (a flower, a wrong size, a wildcard meld, a fifth copy)."""
    if len(melds) > SETS_IN_A_HAND:
        raise HandSizeError(f"a hand has at most 4 melds, not {len(melds)}")
    expected = 13 - 3 * len(melds)
    if len(concealed) != expected:
        raise HandSizeError(
            f"with {len(melds)} meld(s) the concealed hand holds {expected} tiles besides the "
            f"winning tile, not {len(concealed)}"
        )
    if not _HAND_TILES.issuperset(concealed) or win_tile not in _HAND_TILES:
        bad = next(tile for tile in (*concealed, win_tile) if tile not in _HAND_TILES)
        raise InvalidTileError(f"{bad!r} cannot be in a winning hand (flowers are counted apart)")
    copies = _ONE_COPY[win_tile]
    codes: list[str] = []
    for tile in concealed:
        copies += _ONE_COPY[tile]
        codes.append(CALCULATOR_CODES[tile])
    for meld in melds:
        for tile in meld.tiles:
            copies += _ONE_COPY[tile]
        if wildcard is not None and wildcard in meld.tiles:
            raise InvalidMeldError(f"the wildcard {tile_code(wildcard)} cannot be chowed, ponged or konged")
    if (copies + _PLUS_THREE) & _FIFTH_COPY_BITS:
        counts = [(copies >> (_COUNT_BIT_WIDTH * tile)) & 0b11111 for tile in range(KIND_COUNT)]
        tile = max(range(KIND_COUNT), key=counts.__getitem__)
        count = counts[tile]
        raise TileCountError(f"tile {tile_code(tile)} appears {count} times; the set holds only 4")
    held = 0 if wildcard is None else concealed.count(wildcard)
    return tuple(codes), held


def _best_substitution(
    concealed: Sequence[Tile],
    melds: Sequence[FormulaMeld],
    packs: tuple[CalculatorPack, ...],
    flags: CalculatorFlags,
    win_tile: Tile,
    win_is_wildcard: bool,
    wildcard: Tile,
    no_wildcard_fan: int,
) -> tuple[StandardFans, Substitution] | None:
    """The highest-scoring (standard fans, substitution), 无财神 included in the comparison.

    Ties keep the first substitution in sorted order, so the answer is deterministic.
    """
    counts = [0] * KIND_COUNT
    real_codes: list[str] = []  # the real concealed tiles, winning tile excluded
    for tile in concealed:
        if tile != wildcard:
            counts[tile] += 1
            real_codes.append(CALCULATOR_CODES[tile])
    wildcard_count = len(concealed) - len(real_codes)
    if win_is_wildcard:
        wildcard_count += 1
    else:
        counts[win_tile] += 1
    limits = [COPIES_PER_TILE - count for count in counts]
    for meld in melds:
        for tile in meld.tiles:
            limits[tile] -= 1
    base = tuple(real_codes)
    best: tuple[StandardFans, Substitution] | None = None
    best_total = -1
    for substitution in sorted(winning_substitutions(counts, wildcard_count, len(melds))):
        if not _within_copies(substitution, limits):
            continue
        bonus = no_wildcard_fan if all(tile == wildcard for tile in substitution) else 0
        substituted = [CALCULATOR_CODES[tile] for tile in substitution]
        if win_is_wildcard:
            choices = [
                (index, substitution[index])
                for index in range(len(substitution))
                if index == 0 or substitution[index] != substitution[index - 1]
            ]
        else:
            choices = [(-1, win_tile)]
        for index, winning in choices:
            codes = (
                base + tuple(substituted[:index] + substituted[index + 1 :])
                if index >= 0
                else base + tuple(substituted)
            )
            found = calculate_standard_fans(packs, codes, CALCULATOR_CODES[winning], flags)
            if found is None:
                continue
            total = bonus + found[1]
            if total > best_total:
                best, best_total = (found, substitution), total
    return best


def _within_copies(substitution: Substitution, limits: list[int]) -> bool:
    """False when the substitution would make a fifth copy of a tile (hand + melds, RULES.md 2.2)."""
    previous, run = -1, 0
    for tile in substitution:
        run = run + 1 if tile == previous else 1
        previous = tile
        if run > limits[tile]:
            return False
    return True


def winning_substitutions(
    counts: Sequence[int], wildcard_count: int, meld_count: int
) -> frozenset[Substitution]:
    """Every multiset of ``wildcard_count`` tiles that completes ``counts`` into a winning shape.

    ``counts`` are the real concealed tiles per kind (winning tile included, wildcards excluded);
    ``meld_count`` melds are already sets. Shapes: four sets + a pair, and with no meld seven
    pairs, thirteen orphans and the honors-and-knitted hands; the knitted straight with at most one
    meld. Copy limits are the caller's business. Public for the tests' brute-force comparison.
    """
    counts = tuple(counts)
    sets_needed = SETS_IN_A_HAND - meld_count
    if sum(counts) + wildcard_count != 3 * sets_needed + 2:
        raise HandSizeError("the real tiles and the wildcards do not make a hand of 14")
    found = _standard(counts, wildcard_count)
    if meld_count <= 1:
        found.update(_knitted_straight(counts, wildcard_count))
    if meld_count == 0:
        found.update(_seven_pairs(counts, wildcard_count))
        found.update(_thirteen_orphans(counts, wildcard_count))
        found.update(_honors_and_knitted(counts, wildcard_count))
    return frozenset(found)


REGIONS: tuple[tuple[int, int, bool], ...] = ((0, 9, True), (9, 18, True), (18, 27, True), (27, 34, False))
"""(first tile, end, chows possible): the three suits and the honors, which never share a set."""
FREE_SHAPES: tuple[tuple[int, int, int], ...] = ((0, 0, 0), (2, 0, 1), (3, 1, 0), (5, 1, 1))
"""(wildcards, sets, pairs) that wildcards can make on their own, with at most five of them."""


def _standard(counts: tuple[int, ...], jokers: int) -> set[Substitution]:
    """Completions of ``counts`` into sets and one pair with ``jokers`` wildcards.

    Suits and honors never share a set, so each region (a suit, or the honors) is completed on its
    own with the wildcards it receives (``_region_completions``, cached across calls: the same suit
    patterns come back all the time); wildcards given to no region form free sets or the free pair.
    """
    active = [(start, counts[start:end], chows) for start, end, chows in REGIONS if any(counts[start:end])]
    found: set[Substitution] = set()
    for free_jokers, free_sets, free_pairs in FREE_SHAPES:
        if free_jokers > jokers:
            continue
        free = _free_groups(free_sets, free_pairs)
        for regional in _distribute(active, jokers - free_jokers, 1 - free_pairs):
            for extra in free:
                found.add(tuple(sorted(regional + extra)))
    return found


def _distribute(
    active: list[tuple[int, tuple[int, ...], bool]], jokers: int, pairs: int
) -> list[Substitution]:
    """Every way the active regions take all ``jokers`` and ``pairs`` and complete (tiles unsorted)."""
    if not active:
        return [()] if jokers == 0 and pairs == 0 else []
    (start, pattern, chows), rest = active[0], active[1:]
    size = sum(pattern)
    results: list[Substitution] = []
    for given in range(jokers + 1):
        remainder = (size + given) % 3
        if remainder == 1 or (remainder == 2 and not pairs):
            continue
        pair_here = 1 if remainder == 2 else 0
        here = _region_completions(pattern, given, pair_here, chows)
        if not here:
            continue
        for others in _distribute(rest, jokers - given, pairs - pair_here):
            for added in here:
                results.append(tuple(start + rank for rank in added) + others)
    return results


@lru_cache(maxsize=1 << 16)
def _region_completions(
    pattern: tuple[int, ...], jokers: int, pairs: int, chows: bool
) -> frozenset[tuple[int, ...]]:
    """Completions of one region's ``pattern`` (counts by rank) into sets + ``pairs`` pairs, using
    exactly ``jokers`` wildcards, each inside a group that holds a real tile (ranks, sorted).

    The lowest real tile must belong to some group: a pair, a pong, or one of the (at most three)
    chows through it. Other members of that group use a real tile when there is one, else a
    wildcard. Preferring real tiles loses nothing: the result is a multiset of substitutions, and a
    wildcard taking a tile's place while that real tile goes elsewhere gives the same multiset.
    """
    lowest = next((rank for rank, count in enumerate(pattern) if count), -1)
    if lowest < 0:
        return frozenset({()}) if jokers == 0 and pairs == 0 else frozenset()
    copies = pattern[lowest]
    groups: list[tuple[tuple[int, ...], int]] = []  # (members, pairs used)
    if pairs:
        groups.append(((lowest, lowest), 1))
    groups.append(((lowest, lowest, lowest), 0))
    if chows:
        for start in range(max(0, lowest - 2), min(lowest, 6) + 1):
            groups.append(((start, start + 1, start + 2), 0))
    found: set[tuple[int, ...]] = set()
    for members, pairs_used in groups:
        remaining = list(pattern)
        added: list[int] = []
        if members[0] == members[-1]:
            used = min(copies, len(members))
            remaining[lowest] -= used
            added.extend([lowest] * (len(members) - used))
        else:
            for rank in members:
                if remaining[rank] > 0:
                    remaining[rank] -= 1
                else:
                    added.append(rank)
        if len(added) > jokers:
            continue
        for rest in _region_completions(tuple(remaining), jokers - len(added), pairs - pairs_used, chows):
            found.add(tuple(sorted((*added, *rest))))
    return frozenset(found)


@lru_cache(maxsize=8)
def _free_groups(sets: int, pairs: int) -> tuple[Substitution, ...]:
    """What wildcards left alone can stand for: any ``sets`` sets and ``pairs`` pair (tiles unsorted)."""
    pair_choices: list[tuple[Tile, ...]] = [(tile, tile) for tile in range(KIND_COUNT)] if pairs else [()]
    return tuple(
        tuple(tile for group in chosen for tile in group) + pair
        for chosen in combinations_with_replacement(FREE_SETS, sets)
        for pair in pair_choices
    )


def _seven_pairs(counts: tuple[int, ...], jokers: int) -> set[Substitution]:
    """七对 (and 连七对): every odd count takes a wildcard; wildcards left form free pairs.

    Four equal tiles count as two pairs (MCR), so a free pair may repeat a pair already held.
    """
    singles = tuple(tile for tile in range(KIND_COUNT) if counts[tile] % 2)
    left = jokers - len(singles)
    if left < 0 or left % 2:
        return set()
    return {
        tuple(sorted(singles + tuple(tile for tile in pairs for _ in range(2))))
        for pairs in combinations_with_replacement(range(KIND_COUNT), left // 2)
    }


def _thirteen_orphans(counts: tuple[int, ...], jokers: int) -> set[Substitution]:
    """十三幺: one of each terminal and honor plus one more of them; wildcards fill the gaps."""
    if any(counts[tile] for tile in range(KIND_COUNT) if tile not in ORPHANS):
        return set()
    if any(counts[tile] > 2 for tile in ORPHANS) or sum(counts[tile] == 2 for tile in ORPHANS) > 1:
        return set()
    missing = tuple(tile for tile in ORPHANS if counts[tile] == 0)
    if any(counts[tile] == 2 for tile in ORPHANS):
        return {missing} if len(missing) == jokers else set()
    if len(missing) + 1 != jokers:
        return set()
    return {tuple(sorted((*missing, extra))) for extra in ORPHANS}


def _honors_and_knitted(counts: tuple[int, ...], jokers: int) -> set[Substitution]:
    """全不靠 / 七星不靠: 14 different tiles among the seven honors and one knitted straight."""
    if any(count > 1 for count in counts):
        return set()
    found: set[Substitution] = set()
    for arrangement in KNITTED_ARRANGEMENTS:
        allowed = (*arrangement, *HONORS)
        if any(counts[tile] and tile not in allowed for tile in range(KIND_COUNT)):
            continue
        free = tuple(sorted(tile for tile in allowed if not counts[tile]))
        found.update(combinations(free, jokers))
    return found


def _knitted_straight(counts: tuple[int, ...], jokers: int) -> set[Substitution]:
    """组合龙 + the rest as sets and a pair: wildcards fill the missing knitted tiles first."""
    found: set[Substitution] = set()
    for arrangement in KNITTED_ARRANGEMENTS:
        missing = tuple(tile for tile in arrangement if not counts[tile])
        if len(missing) > jokers:
            continue
        remaining = list(counts)
        for tile in arrangement:
            if remaining[tile]:
                remaining[tile] -= 1
        for rest in _standard(tuple(remaining), jokers - len(missing)):
            found.add(tuple(sorted(missing + rest)))
    return found
