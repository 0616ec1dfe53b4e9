"""Formula fans (RULES.md 2.2): the 81 Chinese Official (MCR) fans behind our own interface.

The standard fans, their values and the exclusion principles (不重复, 不拆移, 不得相同, 就高不就低,
套算一次) are computed by the reference MCR calculator of the PyPI package ``PyMahjongGB`` (module
``MahjongGB``); this module is the only place that imports it, so the Sichuan rules stay free of
dependencies. Everything the seed adds to MCR (wildcards, 无财神, flowers, the minimum) is ours and
lives in ``wildcards``.

Two translations keep the fans standard:
- The calculator reports a concealed kong together with a melded kong as one non-standard fan
  明暗杠 (5); the 81 standard fans score that as 暗杠 (2) + 明杠 (1), so we report those two.
- Flowers are never passed to the calculator: ``wildcards`` adds 花牌 itself, because flowers
  count only once the hand has won and never toward the minimum.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Literal

from MahjongGB import MahjongFanCalculator  # type: ignore[import-not-found]  # a C extension with no stubs

from mahjong_rules.errors import InvalidMeldError, InvalidTileError, RulesError
from mahjong_rules.hand import KONG_EXPOSURES, KongExposure
from mahjong_rules.seats import EAST_WIND
from mahjong_rules.tiles import Tile, tile_code


@dataclass(frozen=True, slots=True)
class FanDefinition:
    """One fan of the formula table: stable snake_case id, Chinese name, value in fan."""

    id: str
    name: str
    fan: int


def _fans(value: int, *pairs: tuple[str, str]) -> tuple[FanDefinition, ...]:
    return tuple(FanDefinition(fan_id, name, value) for fan_id, name in pairs)


STANDARD_FANS: tuple[FanDefinition, ...] = (
    *_fans(
        88,
        ("big_four_winds", "大四喜"),
        ("big_three_dragons", "大三元"),
        ("all_green", "绿一色"),
        ("nine_gates", "九莲宝灯"),
        ("four_kongs", "四杠"),
        ("seven_shifted_pairs", "连七对"),
        ("thirteen_orphans", "十三幺"),
    ),
    *_fans(
        64,
        ("all_terminals", "清幺九"),
        ("little_four_winds", "小四喜"),
        ("little_three_dragons", "小三元"),
        ("all_honors", "字一色"),
        ("four_concealed_pungs", "四暗刻"),
        ("pure_terminal_chows", "一色双龙会"),
    ),
    *_fans(48, ("quadruple_chow", "一色四同顺"), ("four_pure_shifted_pungs", "一色四节高")),
    *_fans(
        32,
        ("four_pure_shifted_chows", "一色四步高"),
        ("three_kongs", "三杠"),
        ("all_terminals_and_honors", "混幺九"),
    ),
    *_fans(
        24,
        ("seven_pairs", "七对"),
        ("greater_honors_and_knitted_tiles", "七星不靠"),
        ("all_even_pungs", "全双刻"),
        ("full_flush", "清一色"),
        ("pure_triple_chow", "一色三同顺"),
        ("pure_shifted_pungs", "一色三节高"),
        ("upper_tiles", "全大"),
        ("middle_tiles", "全中"),
        ("lower_tiles", "全小"),
    ),
    *_fans(
        16,
        ("pure_straight", "清龙"),
        ("three_suited_terminal_chows", "三色双龙会"),
        ("pure_shifted_chows", "一色三步高"),
        ("all_fives", "全带五"),
        ("triple_pung", "三同刻"),
        ("three_concealed_pungs", "三暗刻"),
    ),
    *_fans(
        12,
        ("lesser_honors_and_knitted_tiles", "全不靠"),
        ("knitted_straight", "组合龙"),
        ("upper_four", "大于五"),
        ("lower_four", "小于五"),
        ("big_three_winds", "三风刻"),
    ),
    *_fans(
        8,
        ("mixed_straight", "花龙"),
        ("reversible_tiles", "推不倒"),
        ("mixed_triple_chow", "三色三同顺"),
        ("mixed_shifted_pungs", "三色三节高"),
        ("chicken_hand", "无番和"),
        ("last_tile_draw", "妙手回春"),
        ("last_tile_claim", "海底捞月"),
        ("out_with_replacement_tile", "杠上开花"),
        ("robbing_the_kong", "抢杠和"),
    ),
    *_fans(
        6,
        ("all_pungs", "碰碰和"),
        ("half_flush", "混一色"),
        ("mixed_shifted_chows", "三色三步高"),
        ("all_types", "五门齐"),
        ("melded_hand", "全求人"),
        ("two_concealed_kongs", "双暗杠"),
        ("two_dragon_pungs", "双箭刻"),
    ),
    *_fans(
        4,
        ("outside_hand", "全带幺"),
        ("fully_concealed_hand", "不求人"),
        ("two_melded_kongs", "双明杠"),
        ("last_tile", "和绝张"),
    ),
    *_fans(
        2,
        ("dragon_pung", "箭刻"),
        ("prevalent_wind", "圈风刻"),
        ("seat_wind", "门风刻"),
        ("concealed_hand", "门前清"),
        ("all_chows", "平和"),
        ("tile_hog", "四归一"),
        ("double_pung", "双同刻"),
        ("two_concealed_pungs", "双暗刻"),
        ("concealed_kong", "暗杠"),
        ("all_simples", "断幺"),
    ),
    *_fans(
        1,
        ("pure_double_chow", "一般高"),
        ("mixed_double_chow", "喜相逢"),
        ("short_straight", "连六"),
        ("two_terminal_chows", "老少副"),
        ("pung_of_terminals_or_honors", "幺九刻"),
        ("melded_kong", "明杠"),
        ("one_voided_suit", "缺一门"),
        ("no_honors", "无字"),
        ("edge_wait", "边张"),
        ("closed_wait", "嵌张"),
        ("single_wait", "单钓将"),
        ("self_drawn", "自摸"),
        ("flower_tiles", "花牌"),
    ),
)
"""The 81 standard MCR fans in the order of the rule book, highest first (RULES.md 2.2)."""
assert len(STANDARD_FANS) == 81

NO_WILDCARD = FanDefinition("no_wildcard", "无财神", 2)
"""无财神 with its default value; the room option ``no_wildcard_fan`` may change the value."""

FANS_BY_ID: dict[str, FanDefinition] = {fan.id: fan for fan in (*STANDARD_FANS, NO_WILDCARD)}
FLOWER_TILES = FANS_BY_ID["flower_tiles"]

# The calculator's Chinese names where they differ from the rule book's.
_CALCULATOR_NAME_ALIASES = {"独听・边张": "边张", "独听・嵌张": "嵌张", "独听・单钓": "单钓将"}
_CONCEALED_AND_MELDED_KONG = "明暗杠"
_FANS_BY_NAME = {fan.name: fan for fan in STANDARD_FANS}


@dataclass(frozen=True, slots=True)
class ScoredFan:
    """A fan a hand scores: its definition's id, name and value, and how many times it counts."""

    id: str
    name: str
    fan: int
    count: int = 1

    @property
    def total(self) -> int:
        """Value × count: what the fan adds to the hand's total."""
        return self.fan * self.count


@lru_cache(maxsize=1024)
def scored(definition: FanDefinition, count: int = 1, value: int | None = None) -> ScoredFan:
    """A ``ScoredFan`` of ``definition`` (``value`` overrides the value, for room options).
    Memoised: scored fans are frozen values, and 无财神 and 花牌 are added to most evaluations."""
    return ScoredFan(definition.id, definition.name, definition.fan if value is None else value, count)


MeldKind = Literal["chow", "pong", "kong"]
MELD_KINDS: tuple[MeldKind, ...] = ("chow", "pong", "kong")


@dataclass(frozen=True, slots=True)
class FormulaMeld:
    """A declared set of the formula family: chow (``tile`` = lowest of the run), pong or kong.

    ``exposure`` is required for a kong (exposed, added or concealed) and ``None`` otherwise. A
    concealed kong keeps the hand concealed for 门前清 / 不求人 and scores 暗杠.
    """

    kind: MeldKind
    tile: Tile
    exposure: KongExposure | None = None

    def __post_init__(self) -> None:
        if self.kind not in MELD_KINDS:
            raise InvalidMeldError(f"bad meld kind {self.kind!r} (expected chow, pong or kong)")
        if not isinstance(self.tile, int) or not 0 <= self.tile < 34:
            raise InvalidTileError(f"meld tile {self.tile!r} is not a suited or honor tile")
        if self.kind == "chow" and (self.tile >= 27 or self.tile % 9 > 6):
            raise InvalidMeldError(f"a chow starts at a suited tile of rank 1..7, not {tile_code(self.tile)}")
        if self.kind == "kong" and self.exposure not in KONG_EXPOSURES:
            raise InvalidMeldError(
                f"kong of {tile_code(self.tile)} needs exposure exposed, added or concealed, "
                f"not {self.exposure!r}"
            )
        if self.kind != "kong" and self.exposure is not None:
            raise InvalidMeldError(f"{self.kind} of {tile_code(self.tile)} takes no exposure")

    @property
    def tiles(self) -> tuple[Tile, ...]:
        """The tiles of the meld, for copy counting."""
        if self.kind == "chow":
            return (self.tile, self.tile + 1, self.tile + 2)
        return (self.tile,) * (4 if self.kind == "kong" else 3)


class WinBy(StrEnum):
    """How a formula hand was won (RULES.md 2.1): the same ids as Sichuan Bloody."""

    SELF_DRAW = "self_draw"
    DISCARD = "discard"
    ROB_KONG = "rob_kong"


@dataclass(frozen=True, slots=True)
class FormulaWinContext:
    """How a formula hand was won: the facts the situational fans depend on.

    - ``after_kong``: a self-draw on a kong replacement (杠上开花); ignored for a discard win.
    - ``last_tile``: the last tile of the wall, self-drawn (妙手回春) or discarded (海底捞月).
    - ``fourth_tile``: the winning tile is the last copy not yet visible (和绝张).
    - ``seat_wind`` / ``round_wind``: 1z..4z; the round wind is East (RULES.md 2.2).
    """

    win_by: WinBy = WinBy.DISCARD
    after_kong: bool = False
    last_tile: bool = False
    fourth_tile: bool = False
    seat_wind: Tile = EAST_WIND
    round_wind: Tile = EAST_WIND

    def __post_init__(self) -> None:
        object.__setattr__(self, "win_by", WinBy(self.win_by))
        for name in ("seat_wind", "round_wind"):
            wind = getattr(self, name)
            if not isinstance(wind, int) or not EAST_WIND <= wind <= EAST_WIND + 3:
                raise InvalidTileError(f"{name} must be a wind 1z..4z, not {wind!r}")

    @property
    def self_drawn(self) -> bool:
        """True for a self-draw (the winning tile came from the wall)."""
        return self.win_by is WinBy.SELF_DRAW


# Tile -> the calculator's tile code (W = 万, B = 筒 (dots), T = 条 (bamboo), F winds, J dragons).
CALCULATOR_CODES: tuple[str, ...] = (
    *(f"W{rank}" for rank in range(1, 10)),
    *(f"B{rank}" for rank in range(1, 10)),
    *(f"T{rank}" for rank in range(1, 10)),
    "F1",
    "F2",
    "F3",
    "F4",
    "J1",
    "J2",
    "J3",
)

CalculatorPack = tuple[str, str, int]
CalculatorFlags = tuple[bool, bool, bool, bool, int, int]


def calculator_packs(melds: Sequence[FormulaMeld]) -> tuple[CalculatorPack, ...]:
    """The melds as the calculator's packs: a chow by its middle tile; offer 0 only for a concealed
    kong (the calculator reads offer 0 as concealed, any other as melded)."""
    if not melds:
        return ()
    packs: list[CalculatorPack] = []
    for meld in melds:
        if meld.kind == "chow":
            packs.append(("CHI", CALCULATOR_CODES[meld.tile + 1], 1))
        elif meld.kind == "pong":
            packs.append(("PENG", CALCULATOR_CODES[meld.tile], 1))
        else:
            offer = 0 if meld.exposure == "concealed" else 1
            packs.append(("GANG", CALCULATOR_CODES[meld.tile], offer))
    return tuple(packs)


_FLAGS: dict["FormulaWinContext", CalculatorFlags] = {}


def calculator_flags(context: FormulaWinContext) -> CalculatorFlags:
    """(self-drawn, 4th tile, about kong, wall last, seat wind 0..3, round wind 0..3).

    "About kong" is 杠上开花 for a self-draw and 抢杠和 for a robbed kong. Memoised: contexts are
    frozen values and few.
    """
    cached = _FLAGS.get(context)
    if cached is not None:
        return cached
    about_kong = (context.self_drawn and context.after_kong) or context.win_by is WinBy.ROB_KONG
    flags = (
        context.self_drawn,
        context.fourth_tile,
        about_kong,
        context.last_tile,
        context.seat_wind - EAST_WIND,
        context.round_wind - EAST_WIND,
    )
    _FLAGS[context] = flags
    return flags


CalculatorFan = tuple[int, str]
"""One line of the calculator's (non-verbose) answer: the fan's points (value × count) and name."""
StandardFans = tuple[tuple[ScoredFan, ...], int]
"""A hand's standard fans and their total."""
_LINES: dict[CalculatorFan, tuple[ScoredFan, ...]] = {}
_ANSWERS: dict[tuple[CalculatorFan, ...], StandardFans] = {}
_ANSWERS_KEPT = 1 << 16
"""Whole answers memoised (the same fan sets come back all the time); cleared when this full."""


def _translate_line(line: CalculatorFan) -> tuple[ScoredFan, ...]:
    """One calculator line as our fans (memoised: the calculator's vocabulary is finite)."""
    points, name = line
    fans: tuple[ScoredFan, ...]
    if name == _CONCEALED_AND_MELDED_KONG:
        fans = (scored(FANS_BY_ID["concealed_kong"]), scored(FANS_BY_ID["melded_kong"]))
    else:
        definition = _FANS_BY_NAME[_CALCULATOR_NAME_ALIASES.get(name, name)]
        count, rest = divmod(points, definition.fan)
        assert count >= 1 and not rest, f"{name}: {points} points is no multiple of {definition.fan}"
        fans = (scored(definition, count),)
    _LINES[line] = fans
    return fans


def _translate(answer: tuple[CalculatorFan, ...]) -> StandardFans:
    fans: list[ScoredFan] = []
    for line in answer:
        fans.extend(_LINES.get(line) or _translate_line(line))
    translated = (tuple(fans), sum(fan.fan * fan.count for fan in fans))
    if len(_ANSWERS) >= _ANSWERS_KEPT:
        _ANSWERS.clear()
    _ANSWERS[answer] = translated
    return translated


def calculate_standard_fans(
    packs: tuple[CalculatorPack, ...],
    hand_codes: tuple[str, ...],
    win_code: str,
    flags: CalculatorFlags,
) -> StandardFans | None:
    """The standard fans of one complete hand in the calculator's codes, with their total; ``None``
    when it is no win.

    The low-level call the wildcard search makes many times: inputs are already translated
    (``calculator_packs``, ``calculator_flags``, ``CALCULATOR_CODES``). ``hand_codes`` excludes
    the winning tile.
    """
    try:
        answer = MahjongFanCalculator(packs, hand_codes, win_code, 0, *flags)
    except TypeError as error:
        if str(error) == "ERROR_NOT_WIN":
            return None
        raise RulesError(f"the MCR calculator refused the hand: {error}") from None
    return _ANSWERS.get(answer) or _translate(answer)
