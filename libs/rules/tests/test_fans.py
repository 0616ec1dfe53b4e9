"""Multipliers (RULES.md 1.7), one or more cases per fan and per "not counted" rule, and the cap (1.9)."""

from dataclasses import dataclass, field

import pytest
from mahjong_rules import (
    EXTRA_FANS,
    SHAPE_FANS,
    KongExposure,
    Meld,
    RulesError,
    WinContext,
    apply_cap,
    evaluate_win,
    parse_tile,
    parse_tiles,
)


def melds_from(text: str) -> list[Meld]:
    """``"pong 5p, kong 7p concealed"`` -> melds."""
    result: list[Meld] = []
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        words = part.split()
        exposure: KongExposure | None = None
        if words[0] == "kong":
            exposure = "concealed" if len(words) < 3 else words[2]  # type: ignore[assignment]
        result.append(Meld("kong" if words[0] == "kong" else "pong", parse_tile(words[1]), exposure))
    return result


@dataclass(frozen=True)
class Case:
    id: str
    concealed: str
    win_tile: str
    fans: str
    multiplier: int
    melds: str = ""
    context: WinContext = field(default_factory=WinContext)


SELF_DRAW = WinContext(win_by="self_draw")

CASES = [
    # Shape fans (RULES.md 1.7 shape table).
    Case("1.7 平胡 1", "123m456m456p789p5p", "5p", "plain", 1),
    Case("1.7 碰碰胡 2", "111m555m333p999p7p", "7p", "all_pongs", 2),
    Case("1.7 清一色 4", "123456789m1235m", "5m", "full_flush", 4),
    Case("1.7 七对 4", "1133m22557799p4p", "4p", "seven_pairs", 4),
    Case(
        "1.7 金钩钓 4, 碰碰胡 not counted", "7p", "7p", "single_wait", 4, "pong 1m, pong 4m, pong 6p, pong 9p"
    ),
    Case("1.7 幺九 4", "123789m123789p9p", "9p", "terminals", 4),
    Case("1.7 清碰 8, 清一色 and 碰碰胡 not counted", "1112225558889m", "9m", "pure_pongs", 8),
    Case("1.7 龙七对 8, 七对 and one 根 not counted", "1111m33m557799p2p", "2p", "dragon_pairs", 8),
    Case("1.7 龙七对 8 with a second 根 16", "11113333m5577p9p", "9p", "dragon_pairs root", 16),
    Case(
        "1.7 将对 8, 碰碰胡 not counted; example 将对 + 断幺九 = 16",
        "222555888m2255p",
        "5p",
        "two_five_eight_pongs no_terminals",
        16,
    ),
    Case("1.7 清七对 16, 清一色 and 七对 not counted", "1133557799m224m", "4m", "pure_seven_pairs", 16),
    Case("1.7 清金钩钓 16", "9m", "9m", "pure_single_wait", 16, "pong 1m, pong 3m, pong 5m, pong 7m"),
    Case("1.7 清幺九 16, 清一色 and 幺九 not counted", "123123123789m9m", "9m", "pure_terminals", 16),
    Case(
        "1.7 将七对 16, 七对 龙七对 one 根 断幺九 not counted",
        "22225588m22558p",
        "8p",
        "two_five_eight_pairs",
        16,
    ),
    Case(
        "1.7 example 清一色 + 七对 + a set of four = 清龙七对 32",
        "1111335577m99m2m",
        "2m",
        "pure_dragon_pairs",
        32,
    ),
    Case(
        "1.7 十八罗汉 64, 金钩钓 碰碰胡 four 根 not counted",
        "7p",
        "7p",
        "eighteen_arhats",
        64,
        "kong 1m, kong 4m exposed, kong 6p added, kong 9p",
    ),
    Case("1.7 将双七对 64", "22225555m22558p", "8p", "two_five_eight_double_dragon", 64),
    Case("1.7 将三七对 128", "222255558888m2p", "2p", "two_five_eight_triple_dragon", 128),
    Case("1.7 清十八罗汉 256", "9m", "9m", "pure_eighteen_arhats", 256, "kong 1m, kong 3m, kong 5m, kong 7m"),
    Case(
        "1.7 example 金钩钓 + 将对 = 32 (×2 断幺九 always applies)",
        "2m",
        "2m",
        "single_wait two_five_eight_pongs no_terminals",
        64,
        "pong 5m, pong 8m, pong 5p, pong 8p",
    ),
    Case(
        "1.7 金钩钓 with kongs keeps its 根",
        "7p",
        "7p",
        "single_wait root root",
        16,
        "kong 1m, pong 4m, kong 6p, pong 9p",
    ),
    # 根 (RULES.md 1.7 extras).
    Case("1.7 根 four equal concealed tiles", "111123m456p789p5p", "5p", "plain root", 2),
    Case("1.7 根 a pong plus its fourth tile in hand", "123m456m567p9p", "9p", "plain root", 2, "pong 5p"),
    Case("1.7 根 a kong", "123m456m567p9p", "9p", "plain root", 2, "kong 2p exposed"),
    # Situational extras (RULES.md 1.7 extras table).
    Case("1.7 自摸 2", "123m456m456p789p5p", "5p", "plain self_draw", 2, context=SELF_DRAW),
    Case(
        "1.7 杠上开花 2, 自摸 counts too",
        "123m456m567p9p",
        "9p",
        "plain root self_draw kong_bloom",
        8,
        "kong 2p concealed",
        WinContext(win_by="self_draw", after_kong=True),
    ),
    Case(
        "1.7 杠上炮 2",
        "123m456m456p789p5p",
        "5p",
        "plain kong_discard",
        2,
        context=WinContext(win_by="discard", after_kong=True),
    ),
    Case(
        "1.7 抢杠胡 2", "123m456m456p789p5p", "5p", "plain rob_kong", 2, context=WinContext(win_by="rob_kong")
    ),
    Case(
        "1.7 海底捞月 2, 自摸 counts too",
        "123m456m456p789p5p",
        "5p",
        "plain self_draw last_tile",
        4,
        context=WinContext(win_by="self_draw", last_tile=True),
    ),
    Case(
        "1.7 海底捞月 needs a self-draw",
        "123m456m456p789p5p",
        "5p",
        "plain",
        1,
        context=WinContext(win_by="discard", last_tile=True),
    ),
    Case("1.7 断幺九 2", "234m456m345p678p5p", "5p", "plain no_terminals", 2),
    Case(
        "1.7 天胡 32 replaces 自摸",
        "123m456m456p789p5p",
        "5p",
        "plain heavenly",
        32,
        context=WinContext(win_by="self_draw", first_turn=True, dealer=True),
    ),
    Case(
        "1.7 地胡 32 replaces 自摸",
        "123m456m456p789p5p",
        "5p",
        "plain earthly",
        32,
        context=WinContext(win_by="self_draw", first_turn=True),
    ),
    Case(
        "1.7 地胡 needs a concealed hand",
        "123m456m567p9p",
        "9p",
        "plain self_draw",
        2,
        "pong 2p",
        WinContext(win_by="self_draw", first_turn=True),
    ),
    # Highest product over readings (RULES.md 1.7).
    Case("1.7 all pongs beats runs of the same tiles", "111222333m99p77p", "9p", "all_pongs", 2),
    Case("1.7 seven pairs beats sets + pair", "112233m445566p7p", "7p", "seven_pairs", 4),
    Case(
        "1.7 equal products report seven pairs (清龙七对 + 2 根 = 清幺九 + 3 根 = 128)",
        "1111222233339m",
        "9m",
        "pure_dragon_pairs root root",
        128,
    ),
]


def fan_ids(evaluation_fans: tuple[object, ...]) -> str:
    return " ".join(fan.id for fan in evaluation_fans)  # type: ignore[attr-defined]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_fans_and_product(case: Case) -> None:
    evaluation = evaluate_win(
        parse_tiles(case.concealed), melds_from(case.melds), parse_tile(case.win_tile), None, case.context
    )
    assert evaluation is not None
    assert fan_ids(evaluation.fans) == case.fans
    assert evaluation.multiplier == case.multiplier
    product = 1
    for fan in evaluation.fans:
        product *= fan.multiplier
    assert product == evaluation.multiplier


def test_fan_ids_and_names_are_exactly_the_rules_tables() -> None:
    shape = [(fan.id, fan.name, fan.multiplier) for fan in SHAPE_FANS]
    assert shape == [
        ("plain", "平胡", 1),
        ("all_pongs", "碰碰胡", 2),
        ("full_flush", "清一色", 4),
        ("seven_pairs", "七对", 4),
        ("single_wait", "金钩钓", 4),
        ("terminals", "幺九", 4),
        ("pure_pongs", "清碰", 8),
        ("dragon_pairs", "龙七对", 8),
        ("two_five_eight_pongs", "将对", 8),
        ("pure_seven_pairs", "清七对", 16),
        ("pure_single_wait", "清金钩钓", 16),
        ("pure_terminals", "清幺九", 16),
        ("two_five_eight_pairs", "将七对", 16),
        ("pure_dragon_pairs", "清龙七对", 32),
        ("eighteen_arhats", "十八罗汉", 64),
        ("two_five_eight_double_dragon", "将双七对", 64),
        ("two_five_eight_triple_dragon", "将三七对", 128),
        ("pure_eighteen_arhats", "清十八罗汉", 256),
    ]
    extras = [(fan.id, fan.name, fan.multiplier) for fan in EXTRA_FANS]
    assert extras == [
        ("root", "根", 2),
        ("self_draw", "自摸", 2),
        ("kong_bloom", "杠上开花", 2),
        ("kong_discard", "杠上炮", 2),
        ("rob_kong", "抢杠胡", 2),
        ("last_tile", "海底捞月", 2),
        ("no_terminals", "断幺九", 2),
        ("heavenly", "天胡", 32),
        ("earthly", "地胡", 32),
    ]


def test_1_7_add_one_drops_self_draw_and_adds_a_point_after_the_cap() -> None:
    context = WinContext(win_by="self_draw", self_draw_bonus="add_one", cap_points=8)
    evaluation = evaluate_win(parse_tiles("1111335577m99m2m"), [], parse_tile("2m"), "p", context)
    assert evaluation is not None
    assert fan_ids(evaluation.fans) == "pure_dragon_pairs"
    assert evaluation.self_draw_add_one
    assert evaluation.multiplier == 32
    assert evaluation.capped_multiplier == 8
    assert evaluation.points_per_payer == 9


def test_1_7_add_one_does_not_apply_to_heavenly() -> None:
    context = WinContext(win_by="self_draw", self_draw_bonus="add_one", first_turn=True, dealer=True)
    evaluation = evaluate_win(parse_tiles("123m456m456p789p5p"), [], parse_tile("5p"), "s", context)
    assert evaluation is not None
    assert not evaluation.self_draw_add_one
    assert evaluation.points_per_payer == 32


@pytest.mark.parametrize(
    ("points", "cap", "expected"),
    [(100, 0, 100), (100, 64, 64), (8, 64, 8), (64, 64, 64)],
    ids=["1.9 no cap", "1.9 capped", "1.9 below cap", "1.9 at cap"],
)
def test_1_9_cap_limits_one_payment(points: int, cap: int, expected: int) -> None:
    assert apply_cap(points, cap) == expected


def test_1_9_uncapped_evaluation_pays_the_multiplier() -> None:
    evaluation = evaluate_win(parse_tiles("1111335577m99m2m"), [], parse_tile("2m"), None)
    assert evaluation is not None
    assert evaluation.points_per_payer == 32


@pytest.mark.parametrize(
    "arguments",
    [{"win_by": "ron"}, {"self_draw_bonus": "triple"}, {"cap_points": -1}],
    ids=["bad win_by", "bad self_draw_bonus", "negative cap"],
)
def test_bad_context_raises(arguments: dict[str, object]) -> None:
    with pytest.raises(RulesError):
        WinContext(**arguments)  # type: ignore[arg-type]


def test_not_a_win_is_none() -> None:
    assert evaluate_win(parse_tiles("123m456m456p789p5p"), [], parse_tile("6p"), None) is None
