"""Sichuan Bloody multipliers (番型), RULES.md 1.7: shape fans, 根, extras, self-draw bonus, cap.

The normative product is::

    multiplier = (4 if 清一色) × shape × (4 if 幺九) × 2^(根 left) × extras

``best_reading`` computes everything but the situational extras for every way of reading the hand
(each decomposition into sets + pair, and seven pairs) and keeps the highest product. ``evaluate_win``
adds the extras that depend on how the hand was won (``WinContext``) and reports the fans the way
the table names them: 清一色 with 碰碰胡, 七对, 金钩钓, 幺九, 龙七对 or 十八罗汉 becomes the composite
(清碰, 清七对, 清金钩钓, 清幺九, 清龙七对, 清十八罗汉) valued at the product, and a hand with nothing
else reports 平胡 ×1. Each 根 is listed as its own ``Fan`` (×2 each).

Decisions where RULES.md is silent, all documented in the tests:

- 将对 and the 将 seven-pairs forms need every tile (pair included) to be a 2, 5 or 8.
- 天胡/地胡 need a concealed hand (no melds) and a self-draw with ``first_turn``; they replace 自摸,
  so with ``self_draw_bonus = add_one`` they also get no extra point.
- 杠上开花 and 海底捞月 need a self-draw; 杠上炮 needs a discard win (``after_kong`` then means the
  discarder had just made a kong).
- When two readings score the same product, seven pairs is reported.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from mahjong_rules.decomposition import SUIT_SUMMARIES, hand_pair_readings, suit_summary
from mahjong_rules.errors import RulesError
from mahjong_rules.hand import (
    WINNING_HAND_TILE_COUNT,
    Meld,
    MeldFacts,
    check_copies,
    check_hand_size,
    concealed_count,
    meld_facts,
    missing_suit_index,
    suit_keys,
)
from mahjong_rules.tiles import Suit, Tile

WinBy = Literal["self_draw", "discard", "rob_kong"]
SelfDrawBonus = Literal["double", "add_one"]
WIN_BY_VALUES: tuple[WinBy, ...] = ("self_draw", "discard", "rob_kong")
SELF_DRAW_BONUS_VALUES: tuple[SelfDrawBonus, ...] = ("double", "add_one")


@dataclass(frozen=True, slots=True)
class Fan:
    """One scored fan: its stable id, its Chinese name, and the factor it contributes."""

    id: str
    name: str
    multiplier: int


# RULES.md 1.7, shape table, in table order.
PLAIN = Fan("plain", "平胡", 1)
ALL_PONGS = Fan("all_pongs", "碰碰胡", 2)
FULL_FLUSH = Fan("full_flush", "清一色", 4)
SEVEN_PAIRS = Fan("seven_pairs", "七对", 4)
SINGLE_WAIT = Fan("single_wait", "金钩钓", 4)
TERMINALS = Fan("terminals", "幺九", 4)
PURE_PONGS = Fan("pure_pongs", "清碰", 8)
DRAGON_PAIRS = Fan("dragon_pairs", "龙七对", 8)
TWO_FIVE_EIGHT_PONGS = Fan("two_five_eight_pongs", "将对", 8)
PURE_SEVEN_PAIRS = Fan("pure_seven_pairs", "清七对", 16)
PURE_SINGLE_WAIT = Fan("pure_single_wait", "清金钩钓", 16)
PURE_TERMINALS = Fan("pure_terminals", "清幺九", 16)
TWO_FIVE_EIGHT_PAIRS = Fan("two_five_eight_pairs", "将七对", 16)
PURE_DRAGON_PAIRS = Fan("pure_dragon_pairs", "清龙七对", 32)
EIGHTEEN_ARHATS = Fan("eighteen_arhats", "十八罗汉", 64)
TWO_FIVE_EIGHT_DOUBLE_DRAGON = Fan("two_five_eight_double_dragon", "将双七对", 64)
TWO_FIVE_EIGHT_TRIPLE_DRAGON = Fan("two_five_eight_triple_dragon", "将三七对", 128)
PURE_EIGHTEEN_ARHATS = Fan("pure_eighteen_arhats", "清十八罗汉", 256)
SHAPE_FANS: tuple[Fan, ...] = (
    PLAIN,
    ALL_PONGS,
    FULL_FLUSH,
    SEVEN_PAIRS,
    SINGLE_WAIT,
    TERMINALS,
    PURE_PONGS,
    DRAGON_PAIRS,
    TWO_FIVE_EIGHT_PONGS,
    PURE_SEVEN_PAIRS,
    PURE_SINGLE_WAIT,
    PURE_TERMINALS,
    TWO_FIVE_EIGHT_PAIRS,
    PURE_DRAGON_PAIRS,
    EIGHTEEN_ARHATS,
    TWO_FIVE_EIGHT_DOUBLE_DRAGON,
    TWO_FIVE_EIGHT_TRIPLE_DRAGON,
    PURE_EIGHTEEN_ARHATS,
)

# RULES.md 1.7, extras table, in table order.
ROOT = Fan("root", "根", 2)
SELF_DRAW = Fan("self_draw", "自摸", 2)
KONG_BLOOM = Fan("kong_bloom", "杠上开花", 2)
KONG_DISCARD = Fan("kong_discard", "杠上炮", 2)
ROB_KONG = Fan("rob_kong", "抢杠胡", 2)
LAST_TILE = Fan("last_tile", "海底捞月", 2)
NO_TERMINALS = Fan("no_terminals", "断幺九", 2)
HEAVENLY = Fan("heavenly", "天胡", 32)
EARTHLY = Fan("earthly", "地胡", 32)
EXTRA_FANS: tuple[Fan, ...] = (
    ROOT,
    SELF_DRAW,
    KONG_BLOOM,
    KONG_DISCARD,
    ROB_KONG,
    LAST_TILE,
    NO_TERMINALS,
    HEAVENLY,
    EARTHLY,
)
FANS_BY_ID: dict[str, Fan] = {fan.id: fan for fan in (*SHAPE_FANS, *EXTRA_FANS)}

# 清一色 + a shape fan is reported as the composite, valued at the product (RULES.md 1.7 naming).
_PURE_COMPOSITES: dict[Fan, Fan] = {
    ALL_PONGS: PURE_PONGS,
    SEVEN_PAIRS: PURE_SEVEN_PAIRS,
    SINGLE_WAIT: PURE_SINGLE_WAIT,
    TERMINALS: PURE_TERMINALS,
    DRAGON_PAIRS: PURE_DRAGON_PAIRS,
    EIGHTEEN_ARHATS: PURE_EIGHTEEN_ARHATS,
}
_TWO_FIVE_EIGHT_PAIRS_BY_ROOTS = {
    1: TWO_FIVE_EIGHT_PAIRS,
    2: TWO_FIVE_EIGHT_DOUBLE_DRAGON,
    3: TWO_FIVE_EIGHT_TRIPLE_DRAGON,
}
# The set bits of a 4-bit pair-readings mask, best candidates first.
_READINGS_IN_MASK: tuple[tuple[int, ...], ...] = tuple(
    tuple(reading for reading in (3, 2, 1, 0) if mask >> reading & 1) for mask in range(16)
)

Reading = tuple[int, tuple[Fan, ...], bool, bool, int, bool]
"""(product without situational extras, shape fans, 清一色, 幺九, 根 left, 断幺九 counted)."""


def best_reading(suit_keys_of_hand: Sequence[int], melds: MeldFacts, missing_index: int) -> Reading | None:
    """Score a complete hand's shape fans, 根 and 断幺九, keeping the reading with the highest product.

    ``suit_keys_of_hand`` are the concealed tiles (winning tile included) as suit keys; the hand is
    already validated. Returns ``None`` when the tiles do not win: not sets + a pair nor seven pairs,
    a tile of the missing suit, or three suits (RULES.md 1.6).
    """
    key0, key1, key2 = suit_keys_of_hand[0], suit_keys_of_hand[1], suit_keys_of_hand[2]
    suit_mask = (key0 != 0) | (key1 != 0) << 1 | (key2 != 0) << 2 | melds.suit_mask
    if suit_mask == 7 or (missing_index >= 0 and suit_mask >> missing_index & 1):
        return None
    readings0, even0, fours0, terminal0, only0, _ = SUIT_SUMMARIES.get(key0) or suit_summary(key0)
    readings1, even1, fours1, terminal1, only1, _ = SUIT_SUMMARIES.get(key1) or suit_summary(key1)
    readings2, even2, fours2, terminal2, only2, _ = SUIT_SUMMARIES.get(key2) or suit_summary(key2)
    pair_readings = hand_pair_readings(readings0, readings1, readings2)
    seven_pairs = melds.count == 0 and even0 and even1 and even2
    if not pair_readings and not seven_pairs:
        return None
    roots = fours0 + fours1 + fours2 + melds.kong_count
    for tile in melds.pong_tiles:
        if concealed_count(suit_keys_of_hand, tile) == 1:
            roots += 1
    flush = suit_mask in (1, 2, 4)
    flush_factor = 4 if flush else 1
    two_five_eight = only0 and only1 and only2 and melds.all_two_five_eight
    no_terminals = not (terminal0 or terminal1 or terminal2 or melds.any_terminal)
    best: Reading | None = None
    if pair_readings:
        if not melds.all_terminal:  # a meld without a 1 or 9 rules out 幺九 for every reading
            pair_readings = (pair_readings & 0b0101) | ((pair_readings & 0b1010) >> 1)
        for reading in _READINGS_IN_MASK[pair_readings]:
            shape, value, roots_used = _standard_shape(reading >> 1, melds, two_five_eight)
            terminals = bool(reading & 1)
            product = flush_factor * value * (4 if terminals else 1) << (roots - roots_used)
            if no_terminals:
                product *= 2
            if best is None or product > best[0]:
                best = (product, shape, flush, terminals, roots - roots_used, no_terminals)
    if seven_pairs:
        if two_five_eight:
            # Two suits hold six 2/5/8 kinds, so seven such pairs always include a set of four.
            assert 1 <= roots <= 3, "将七对 without a set of four"
            shape, value, roots_used, no_terminals = (_TWO_FIVE_EIGHT_PAIRS_BY_ROOTS[roots],), 0, roots, False
            value = shape[0].multiplier
        elif roots:
            shape, value, roots_used = (DRAGON_PAIRS,), 8, 1
        else:
            shape, value, roots_used = (SEVEN_PAIRS,), 4, 0
        product = flush_factor * value << (roots - roots_used)
        if no_terminals:
            product *= 2
        if best is None or product >= best[0]:
            best = (product, shape, flush, False, roots - roots_used, no_terminals)
    return best


def _standard_shape(
    all_pongs: int, melds: MeldFacts, two_five_eight: bool
) -> tuple[tuple[Fan, ...], int, int]:
    """Shape fans, their product and the 根 they use, for four sets + a pair (RULES.md 1.7)."""
    if melds.count == 4:
        if melds.kong_count == 4:
            return (EIGHTEEN_ARHATS,), 64, 4
        if two_five_eight:
            return (SINGLE_WAIT, TWO_FIVE_EIGHT_PONGS), 32, 0
        return (SINGLE_WAIT,), 4, 0
    if all_pongs:
        if two_five_eight:
            return (TWO_FIVE_EIGHT_PONGS,), 8, 0
        return (ALL_PONGS,), 2, 0
    return (), 1, 0


@lru_cache(maxsize=4096)
def fan_list(
    shape: tuple[Fan, ...],
    flush: bool,
    terminals: bool,
    roots_left: int,
    no_terminals: bool,
    situational: tuple[Fan, ...],
) -> tuple[Fan, ...]:
    """The reported fans, in table order: shape or composite, 根 (one entry each), then extras."""
    fans: list[Fan] = []
    shape_fans = list(shape)
    if flush:
        if len(shape_fans) == 1 and shape_fans[0] in _PURE_COMPOSITES:
            shape_fans = [_PURE_COMPOSITES[shape_fans[0]]]
        elif not shape_fans and terminals:
            shape_fans, terminals = [PURE_TERMINALS], False
        else:
            fans.append(FULL_FLUSH)
    fans.extend(shape_fans)
    if terminals:
        fans.append(TERMINALS)
    if not fans:
        fans.append(PLAIN)
    fans.extend([ROOT] * roots_left)
    extras = list(situational)
    if no_terminals:
        extras.append(NO_TERMINALS)
    extras.sort(key=EXTRA_FANS.index)
    fans.extend(extras)
    return tuple(fans)


def apply_cap(points: int, cap_points: int) -> int:
    """A payment after the room cap (RULES.md 1.9): ``min(points, cap)``, or unchanged when cap is 0."""
    if cap_points < 0:
        raise RulesError(f"cap_points must be 0 (no cap) or positive, not {cap_points}")
    return min(points, cap_points) if cap_points else points


@dataclass(frozen=True, slots=True)
class WinContext:
    """How a hand was won: the facts the situational extras of RULES.md 1.7 depend on.

    - ``win_by``: self_draw, discard, or rob_kong (抢杠胡).
    - ``after_kong``: on a self-draw, the winning tile is the kong replacement (杠上开花); on a
      discard win, the discard was made right after the discarder's own kong (杠上炮).
    - ``last_tile``: self-draw of the last tile of the wall (海底捞月).
    - ``first_turn``: the dealer's initial 14 tiles, or a non-dealer's first draw before any pong
      or kong (天胡 / 地胡, with ``dealer`` telling which).
    - ``self_draw_bonus`` and ``cap_points``: the room options of RULES.md 1.7 and 1.9.
    """

    win_by: WinBy = "discard"
    after_kong: bool = False
    last_tile: bool = False
    first_turn: bool = False
    dealer: bool = False
    self_draw_bonus: SelfDrawBonus = "double"
    cap_points: int = 0

    def __post_init__(self) -> None:
        if self.win_by not in WIN_BY_VALUES:
            raise RulesError(f"bad win_by {self.win_by!r} (expected self_draw, discard or rob_kong)")
        if self.self_draw_bonus not in SELF_DRAW_BONUS_VALUES:
            raise RulesError(f"bad self_draw_bonus {self.self_draw_bonus!r} (expected double or add_one)")
        if self.cap_points < 0:
            raise RulesError(f"cap_points must be 0 (no cap) or positive, not {self.cap_points}")


DISCARD_CONTEXT = WinContext()
"""A discard win with no situational extra: the context of the wait multiplier (RULES.md 1.7)."""


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The score of a winning hand.

    ``multiplier`` is the product of every fan's multiplier, uncapped (what 过手胡 compares).
    ``self_draw_add_one`` is set for a self-draw in an ``add_one`` room: 自摸 is then not a fan and
    each payer pays one extra point after the cap, which ``points_per_payer`` includes.
    """

    fans: tuple[Fan, ...]
    multiplier: int
    self_draw_add_one: bool = False
    cap_points: int = 0

    @property
    def capped_multiplier(self) -> int:
        """The multiplier after the room cap (RULES.md 1.9), without the add_one point."""
        return apply_cap(self.multiplier, self.cap_points)

    @property
    def points_per_payer(self) -> int:
        """What each payer owes for this win, in points: capped multiplier, plus 1 for add_one."""
        return self.capped_multiplier + (1 if self.self_draw_add_one else 0)


@lru_cache(maxsize=256)
def _situational_fans(context: WinContext, has_melds: bool) -> tuple[tuple[Fan, ...], int, bool]:
    """Extras that depend only on how the hand was won: (fans, their product, add_one flag)."""
    fans: list[Fan] = []
    add_one = False
    if context.win_by == "self_draw":
        if context.first_turn and not has_melds:
            fans.append(HEAVENLY if context.dealer else EARTHLY)
        elif context.self_draw_bonus == "double":
            fans.append(SELF_DRAW)
        else:
            add_one = True
        if context.after_kong:
            fans.append(KONG_BLOOM)
        if context.last_tile:
            fans.append(LAST_TILE)
    elif context.win_by == "discard":
        if context.after_kong:
            fans.append(KONG_DISCARD)
    else:
        fans.append(ROB_KONG)
    product = 1
    for fan in fans:
        product *= fan.multiplier
    return tuple(fans), product, add_one


def evaluation_from_reading(reading: Reading, context: WinContext, has_melds: bool) -> Evaluation:
    """Turn a ``best_reading`` result into an ``Evaluation`` under ``context``."""
    situational, situational_product, add_one = _situational_fans(context, has_melds)
    product, shape, flush, terminals, roots_left, no_terminals = reading
    fans = fan_list(shape, flush, terminals, roots_left, no_terminals, situational)
    return Evaluation(fans, product * situational_product, add_one, context.cap_points)


def evaluate_win(
    concealed: Sequence[Tile],
    melds: Sequence[Meld],
    win_tile: Tile,
    missing_suit: Suit | None,
    context: WinContext = DISCARD_CONTEXT,
) -> Evaluation | None:
    """Score a Sichuan Bloody win, or return ``None`` when the tiles do not win (RULES.md 1.6, 1.7).

    ``concealed`` is the hand *without* the winning tile (13 − 3 × melds tiles). Raises
    ``HandSizeError``, ``InvalidTileError`` or ``TileCountError`` for impossible input, because a
    caller that passes such a hand has a bug that a plain "no win" would hide.
    """
    facts = meld_facts(melds)
    check_hand_size(concealed, WINNING_HAND_TILE_COUNT - 1 - 3 * facts.count, "without the winning tile")
    keys = suit_keys([*concealed, win_tile])
    check_copies(keys, melds)
    reading = best_reading(keys, facts, missing_suit_index(missing_suit))
    if reading is None:
        return None
    return evaluation_from_reading(reading, context, facts.count > 0)
